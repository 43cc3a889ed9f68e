#!/usr/bin/python3
"""The "newcomer" test: a scheduler written only against statecache.proto.

It knows nothing of the project but the .proto file (whose comments are the
API's documentation): it generates Python stubs from it at test time, starts
`statecached` on a Unix socket in a temporary directory (readiness through
--ready_fd, no sleeping), attaches, runs a few multi-turn conversations
through `Step` in the call order the proto documents, checks that resumes
hit and that GetStats adds up, detaches, and stops the daemon with SIGTERM
expecting exit code 0.

Needs Debian's python3-grpcio and python3-protobuf (so run it with
/usr/bin/python3), protoc and grpc_python_plugin.

Usage:
  newcomer_scheduler.py --statecached BIN --proto-dir REPO/proto
      [--protoc protoc] [--grpc-plugin /usr/bin/grpc_python_plugin]
Exit code 0 when every check passed, 1 otherwise (the reason and the
daemon's log on stderr).
"""

import argparse
import hashlib
import importlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

MODEL_ID = "newcomer/model"
BLOCK = 64
NAMESPACE = "newcomer-ns"
NUM_SPEC = 1
NUM_SLOTS = 64
CONVERSATIONS = 3
TURNS = 3
OUTPUT_TOKENS = 100
OK, INVALID_ARGUMENT, NOT_FOUND = 0, 3, 5


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def generate_stubs(protoc, plugin, proto_dir, out_dir):
    """protoc --python_out --grpc_out; returns (pb2, pb2_grpc) modules."""
    root = os.path.dirname(os.path.abspath(proto_dir))
    proto = os.path.relpath(
        os.path.join(os.path.abspath(proto_dir), "statecache", "v1",
                     "statecache.proto"), root)
    subprocess.run([protoc, "-I", root, "--python_out=" + out_dir,
                    "--grpc_out=" + out_dir,
                    "--plugin=protoc-gen-grpc=" + plugin, proto],
                   check=True)
    # Regular packages, so no other top-level "proto" package can shadow
    # the generated one.
    package = os.path.dirname(proto)
    parts = package.split(os.sep)
    for i in range(1, len(parts) + 1):
        init = os.path.join(out_dir, *parts[:i], "__init__.py")
        open(init, "a").close()
    sys.path.insert(0, out_dir)
    module = package.replace(os.sep, ".") + ".statecache_pb2"
    return importlib.import_module(module), importlib.import_module(
        module + "_grpc")


class Daemon:
    """statecached on unix:DIR/statecached.sock, ready when it says so."""

    def __init__(self, binary, directory, flags):
        self.socket = os.path.join(directory, "statecached.sock")
        self.address = "unix:" + self.socket
        self.log_path = os.path.join(directory, "statecached.log")
        read_end, write_end = os.pipe()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [binary, "--listen=" + self.address,
                 "--ready_fd=%d" % write_end] + flags,
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                pass_fds=(write_end,))
        os.close(write_end)
        try:
            got = b""
            deadline = time.monotonic() + 30
            while not got.endswith(b"\n"):
                left = deadline - time.monotonic()
                readable, _, _ = select.select([read_end], [], [],
                                               max(left, 0))
                if not readable:
                    raise Failure("statecached not ready within 30 s")
                chunk = os.read(read_end, 64)
                if not chunk:
                    raise Failure("statecached exited before it was ready "
                                  "(code %s)" % self.process.wait(5))
                got += chunk
            check(got == b"ready\n", "ready_fd said %r" % got)
        finally:
            os.close(read_end)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        """SIGTERM; returns the exit code (SIGKILL after 10 s)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return "killed after SIGTERM timed out"


def block_hashes(conversation, blocks):
    """Chained block hashes in [0, 2^63): block i covers blocks 0..i."""
    hashes, previous = [], b""
    for i in range(blocks):
        digest = hashlib.sha256(
            previous + ("conv%d-block%d" % (conversation, i)).encode()).digest()
        previous = digest
        hashes.append(int.from_bytes(digest[:8], "big") >> 1)
    return hashes


def run(pb, pb_grpc, address):
    import grpc

    channel = grpc.insecure_channel(address)
    grpc.channel_ready_future(channel).result(timeout=10)
    stub = pb_grpc.StateCacheStub(channel)
    admin = pb_grpc.StateCacheAdminStub(channel)
    timeout = 10

    attached = stub.Attach(pb.AttachRequest(
        identity=pb.Identity(model_id=MODEL_ID, hash_block_size=BLOCK,
                             hash_namespace=NAMESPACE, num_spec=NUM_SPEC),
        client_name="newcomer"), timeout=timeout)
    session = attached.session_id
    check(attached.num_slots == NUM_SLOTS, "num_slots %d" % attached.num_slots)
    check(attached.transfer.kind == "fork", "transfer %s" % attached.transfer)
    check(attached.max_operations_per_step >= 16, "max_operations_per_step")
    width = 1 + NUM_SPEC  # "a request's slot set is 1 + num_spec wide"

    def step(*operations):
        response = stub.Step(pb.StepRequest(session_id=session,
                                            operations=list(operations)),
                             timeout=timeout)
        check(len(response.results) == len(operations),
              "one result per operation")
        check(response.epoch == attached.epoch, "epoch changed")
        for i, result in enumerate(response.results):
            check(result.code == OK, "operation %d (%s) refused: %d %s" % (
                i, operations[i].WhichOneof("kind"), result.code,
                result.message))
        return response.results

    def stats():
        s = admin.GetStats(pb.GetStatsRequest(), timeout=timeout)
        check(s.slots_used + s.slots_held + s.slots_vacant == s.slots_total,
              "occupancy does not add up: %s" % s)
        check(s.slots_total == NUM_SLOTS, "slots_total %d" % s.slots_total)
        return s

    live = set()  # slots of live requests and outstanding reservations

    def take(slot, what):
        check(0 <= slot < NUM_SLOTS, "%s: slot %d out of range" % (what, slot))
        check(slot not in live, "%s: slot %d is already held" % (what, slot))
        live.add(slot)

    prompt = {c: 256 + 64 * c for c in range(CONVERSATIONS)}
    hashes = {c: block_hashes(c, 32) for c in range(CONVERSATIONS)}
    previous = {}  # conversation -> (checkpoint blocks, checkpoint slot)
    kept = resumed = 0

    for turn in range(TURNS):
        # ---- prefill pass: begin_pass, resumable_hit, admit, reserve
        ops, expect = [pb.Operation(begin_pass=pb.BeginPass())], {}
        for c in range(CONVERSATIONS):
            request = "c%d-t%d" % (c, turn)
            blocks = prompt[c] // BLOCK
            if turn == 0:
                kv_hit, want_blocks, want_src = 0, 0, -1
            else:
                # The KV cache holds the previous prompt and its output.
                anchor_blocks, anchor_slot = previous[c]
                kv_hit = (anchor_blocks * BLOCK + OUTPUT_TOKENS) // BLOCK
                want_blocks, want_src = anchor_blocks, anchor_slot
                ops.append(pb.Operation(lookup=pb.Lookup(
                    hash=hashes[c][anchor_blocks - 1])))
            ops.append(pb.Operation(resumable_hit=pb.ResumableHit(
                num_tokens=prompt[c], block_hashes=hashes[c][:blocks],
                kv_hit_blocks=kv_hit)))
            ops.append(pb.Operation(admit=pb.Admit(
                request_id=request, width=width, num_tokens=prompt[c],
                anchor_pos=prompt[c], block_hashes=hashes[c][:blocks],
                kv_hit_blocks=kv_hit)))
            # Midstep checkpoints at the block boundaries the forward passes.
            positions = [pb.MidstepPosition(position=b * BLOCK,
                                            hash=hashes[c][b - 1])
                         for b in range(want_blocks + 1, blocks)]
            ops.append(pb.Operation(reserve=pb.Reserve(
                request_id=request, positions=positions)))
            expect[c] = (request, blocks, want_blocks, want_src, positions)
        results = step(*ops)
        i = 1
        requests = {}
        for c in range(CONVERSATIONS):
            request, blocks, want_blocks, want_src, positions = expect[c]
            if turn > 0:
                check(results[i].lookup.slot == want_src,
                      "%s: lookup of the previous checkpoint gave %d, "
                      "expected %d" % (request, results[i].lookup.slot,
                                       want_src))
                i += 1
            hit, admit, reserve = results[i], results[i + 1], results[i + 2]
            i += 3
            check(hit.resumable_hit.blocks == want_blocks,
                  "%s: resumable_hit %d, expected %d" % (
                      request, hit.resumable_hit.blocks, want_blocks))
            check(admit.admit.blocks_resumed == want_blocks,
                  "%s: blocks_resumed %d, expected %d" % (
                      request, admit.admit.blocks_resumed, want_blocks))
            check(admit.admit.fork_src == want_src,
                  "%s: fork_src %d, expected %d" % (
                      request, admit.admit.fork_src, want_src))
            check(not admit.admit.adopted, "%s: adopted" % request)
            check(len(admit.admit.slots) == width, "%s: width" % request)
            for slot in admit.admit.slots:
                take(slot, request)
            if want_blocks > 0:
                resumed += 1
            reservations = reserve.reserve.reservations
            check(len(reservations) == len(positions),
                  "%s: %d reservations for %d positions" % (
                      request, len(reservations), len(positions)))
            for r in reservations:
                take(r.slot, request + " reservation")
            requests[c] = (request, blocks, list(admit.admit.slots),
                           [r.slot for r in reservations])

        # ---- the forward runs; then publish, checkpoint, consume_fork
        ops = []
        for c in range(CONVERSATIONS):
            request, blocks, _, _ = requests[c]
            ops.append(pb.Operation(publish=pb.Publish(request_id=request)))
            ops.append(pb.Operation(checkpoint=pb.Checkpoint(
                request_id=request, boundary_blocks=blocks,
                hash=hashes[c][blocks - 1])))
            ops.append(pb.Operation(consume_fork=pb.ConsumeFork(
                request_id=request)))
        results = step(*ops)
        for c in range(CONVERSATIONS):
            request, blocks, slots, reserved = requests[c]
            publish, checkpoint, consume = results[3 * c:3 * c + 3]
            check(publish.publish.published == len(reserved),
                  "%s: published %d of %d" % (
                      request, publish.publish.published, len(reserved)))
            live.difference_update(reserved)
            kept += len(reserved)
            cp = checkpoint.checkpoint
            check(cp.kept, "%s: checkpoint not kept" % request)
            check(cp.fork_src == slots[0],
                  "%s: the checkpoint files the committed slot" % request)
            live.discard(slots[0])
            take(cp.state_slot, request + " checkpoint")
            slots[0] = cp.state_slot
            kept += 1
            previous[c] = (blocks, cp.fork_src)
            # consume_fork runs after checkpoint (the documented order): the
            # request's fork source is now the checkpoint's.
            check(consume.consume_fork.fork_src == cp.fork_src,
                  "%s: consume_fork forgot %d, checkpoint said %d" % (
                      request, consume.consume_fork.fork_src, cp.fork_src))
        s = stats()
        check(s.checkpoints_kept == kept,
              "checkpoints_kept %d, expected %d" % (s.checkpoints_kept, kept))
        check(s.requests == CONVERSATIONS, "requests %d" % s.requests)
        check(s.slots_used >= len(live), "used %d < live %d" % (
            s.slots_used, len(live)))

        # ---- a decode pass, then the turn ends: release
        step(pb.Operation(begin_pass=pb.BeginPass()))
        results = step(*[pb.Operation(release=pb.Release(
            request_id=requests[c][0])) for c in range(CONVERSATIONS)])
        for c in range(CONVERSATIONS):
            check(results[c].release.slots_released == width,
                  "release gave back %d" % results[c].release.slots_released)
            live.difference_update(requests[c][2])
        prompt = {c: p + 128 for c, p in prompt.items()}

    # ---- a pass in the packed form (PackedOperations), built from the layout
    # rule in the proto alone: two cold admissions, a checkpoint of the
    # first, a lookup of that checkpoint's hash, both released.
    ADMIT, LOOKUP, CHECKPOINT, RELEASE = 2, 4, 8, 11  # Operation's numbers
    fresh = block_hashes(CONVERSATIONS + 7, 4)  # a prefix nobody has seen
    ids = ["packed-a", "packed-b"]
    packed = pb.PackedOperations()

    def add_id(request):
        packed.request_ids += request.encode()
        packed.request_id_lengths.append(len(request.encode()))

    for request in ids:  # request_id; width, num_tokens, anchor_pos,
        packed.kinds.append(ADMIT)  # len(block_hashes); hashes; kv_hit
        add_id(request)
        packed.args.extend([width, 4 * BLOCK + 10, 0, len(fresh)])
        packed.hashes.extend(fresh)
        packed.args.append(0)
    packed.kinds.append(CHECKPOINT)  # request_id; boundary_blocks; hash;
    add_id(ids[0])                   # anchor_pos
    packed.args.append(4)
    packed.hashes.append(fresh[3])
    packed.args.append(0)
    packed.kinds.append(LOOKUP)  # hash
    packed.hashes.append(fresh[3])
    for request in ids:
        packed.kinds.append(RELEASE)
        add_id(request)
    response = stub.Step(pb.StepRequest(session_id=session, packed=packed),
                         timeout=timeout)
    r = response.packed_results
    check(len(response.results) == 0, "packed step answered as a list")
    check(list(r.codes) == [OK] * len(packed.kinds),
          "packed codes %s, messages %s" % (list(r.codes), list(r.messages)))
    values = list(r.values)
    at = 0
    admitted = []
    for request in ids:  # len(slots), slots..., fork_src, blocks, adopted
        n = values[at]
        slots = values[at + 1:at + 1 + n]
        fork_src, blocks, adopted = values[at + 1 + n:at + 4 + n]
        at += 4 + n
        check(n == width and fork_src == -1 and blocks == 0 and adopted == 0,
              "packed admit of %s: %s" % (request, values))
        for slot in slots:
            check(slot not in live, "packed admit took live slot %d" % slot)
        admitted.append(slots)
    state_slot, fork_src, kept_flag = values[at:at + 3]  # checkpoint
    at += 3
    check(kept_flag == 1 and fork_src == admitted[0][0]
          and state_slot not in admitted[0] + admitted[1],
          "packed checkpoint: %s" % values)
    check(values[at] == fork_src, "packed lookup found %d, want %d" % (
        values[at], fork_src))
    at += 1
    check(values[at:] == [width, width], "packed releases: %s" % values[at:])
    kept += 1

    # A malformed packed step is refused whole: a column one entry short.
    del packed.args[-1]
    try:
        stub.Step(pb.StepRequest(session_id=session, packed=packed),
                  timeout=timeout)
        raise Failure("a packed step with args one short was accepted")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and
              "args" in e.details(),
              "malformed packed step: %s %s" % (e.code(), e.details()))

    # A refused operation: a request this session does not hold.
    response = stub.Step(pb.StepRequest(session_id=session, operations=[
        pb.Operation(release=pb.Release(request_id="never-admitted"))]),
        timeout=timeout)
    check(response.results[0].code == NOT_FOUND,
          "unknown request: code %d" % response.results[0].code)

    # Two passes return the last checkpoints' pins: nothing is used.
    for _ in range(2):
        step(pb.Operation(begin_pass=pb.BeginPass()))
    s = stats()
    check(not live, "client thinks it holds %s" % sorted(live))
    check(s.slots_used == 0, "slots_used %d after everything was released"
          % s.slots_used)
    check(s.requests == 0, "requests %d" % s.requests)
    check(s.resumes_fork == resumed == CONVERSATIONS * (TURNS - 1),
          "resumes_fork %d, resumed %d" % (s.resumes_fork, resumed))
    check(s.checkpoints_kept == kept, "checkpoints_kept %d" % s.checkpoints_kept)
    check(s.slots_held == s.indexed_hashes == kept,
          "held %d, indexed %d, kept %d" % (s.slots_held, s.indexed_hashes,
                                            kept))
    listed = admin.ListSessions(pb.ListSessionsRequest(), timeout=timeout)
    check(len(listed.sessions) == 1 and listed.sessions[0].pins == 0,
          "ListSessions: %s" % listed)

    detached = stub.Detach(pb.DetachRequest(session_id=session),
                           timeout=timeout)
    check(detached.requests_released == 0, "detach released %d" %
          detached.requests_released)
    try:
        stub.KeepAlive(pb.KeepAliveRequest(session_id=session),
                       timeout=timeout)
        raise Failure("KeepAlive after Detach succeeded")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.NOT_FOUND,
              "KeepAlive after Detach: %s" % e.code())
    check(stats().sessions == 0, "sessions after detach")
    channel.close()
    return "%d conversations x %d turns, %d resumes, %d checkpoints kept" % (
        CONVERSATIONS, TURNS, resumed, kept)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statecached", required=True)
    parser.add_argument("--proto-dir", required=True,
                        help="the repository's proto/ directory")
    parser.add_argument("--protoc", default="protoc")
    parser.add_argument("--grpc-plugin", default="/usr/bin/grpc_python_plugin")
    args = parser.parse_args()

    directory = tempfile.mkdtemp(prefix="statecache-newcomer-")
    daemon = None
    try:
        stubs_dir = os.path.join(directory, "gen")
        os.mkdir(stubs_dir)
        pb, pb_grpc = generate_stubs(args.protoc, args.grpc_plugin,
                                     args.proto_dir, stubs_dir)
        daemon = Daemon(args.statecached, directory, [
            "--model_id=" + MODEL_ID, "--hash_block_size=%d" % BLOCK,
            "--hash_namespace=" + NAMESPACE, "--num_spec=%d" % NUM_SPEC,
            "--num_slots=%d" % NUM_SLOTS,
            # No metrics endpoint: its default TCP port is shared by every
            # daemon on the machine.
            "--metrics_address="])
        summary = run(pb, pb_grpc, daemon.address)
        code = daemon.stop()
        check(code == 0, "statecached exited with %s after SIGTERM" % code)
        print("newcomer: ok: " + summary)
        return 0
    except Exception as e:  # noqa: BLE001 - report anything, with the log
        print("newcomer: FAILED: %s: %s" % (type(e).__name__, e),
              file=sys.stderr)
        if daemon is not None:
            daemon.stop()
            print("--- statecached log ---\n" + daemon.log(), file=sys.stderr)
        return 1
    finally:
        if daemon is not None and daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""One scheduler process for the chaos test (tests/chaos/chaos_test.py) and
the soak (bench/soak.py): attaches to statecached through the `statecache`
package and runs passes (begin_pass, admit, reserve, consume_fork,
publish or cancel, checkpoint, release) until told to stop, attaching again
whenever its session is lost (the daemon restarted: a new epoch; its lease
lapsed). Its steps are unary, or with --stream go over a StepStream.

    PYTHONPATH=build/python /usr/bin/python3 tests/chaos/scheduler.py \\
        --address unix:/tmp/x/statecached.sock --name s0 --uid 1

Its requests share a few prompt prefixes with every other scheduler (so
resumes fork from other sessions' checkpoints) and have private suffixes.
It checks the daemon never gives a slot it holds to anyone else: with state
memory (the daemon run with a layout holding an f32 tensor "tag" of shape
[2]) it writes (uid, request number) into every slot it takes and, before
each pass, checks that every slot it still holds says so. An operation
refused for any reason but a full pool is a bug too. Either ends the
process with exit status 3.

The driver talks to it over stdin and stdout, one JSON object a line.
Out (stdout):
    {"event": "attached", "epoch": E, "attach": N, "handle": H}
    {"event": "lost", "why": "..."}        (then it attaches again)
    {"event": "progress", "passes": P, "epoch": E}
    {"event": "report", "epoch": E, "slots": [...], "requests": R,
     "lost": bool, "passes": P}
    {"event": "detached", "released": R}
In (stdin):
    quiesce   finish the pass, consume every fork, tick the pin clock
              twice (no pin left), keep the requests and their slots, and
              report; then wait for the next command
    report    check the tags and report again
    exit      detach and exit 0 (also on end of input)
"""

import argparse
import hashlib
import json
import queue
import random
import sys
import threading

import statecache

BLOCK = 64
PREFIXES = 6          # shared prompt prefixes
MAX_RUNNING = 6
RESOURCE_EXHAUSTED = 8


class Bug(Exception):
    """Something the daemon must never do."""


def chained(previous, payload):
    digest = hashlib.blake2b(previous.to_bytes(8, "little") + payload,
                             digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # >= 0: the proto's rule


class Request:
    def __init__(self, rid, seq, hashes, num_tokens, width, decode):
        self.id = rid
        self.seq = seq
        self.hashes = hashes
        self.num_tokens = num_tokens
        self.boundary = len(hashes) * BLOCK
        self.width = width
        self.decode = decode       # passes of decoding after the prompt
        self.slots = []            # slot 0 committed, then rollback slots
        self.reserved = []         # midstep reservations' slots
        self.read_from = -1        # fork source the next forward reads
        self.pos = 0
        self.checkpointed = False

    def owned(self):
        return self.slots + self.reserved


class Scheduler:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.commands = queue.SimpleQueue()
        self.client = None
        self.session = None
        self.stream = None  # with --stream: the session's StepStream
        self.deferred = None  # a command that came while attaching
        self.tags = None
        self.running = []
        self.seq = 0
        self.passes = 0
        self.attaches = 0
        self.kv = set()  # block hashes "the KV cache" holds

    # ---- talking to the driver

    def say(self, **event):
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    def read_commands(self):
        for line in sys.stdin:
            self.commands.put(line.strip())
        self.commands.put("exit")

    # ---- the session

    def attach(self):
        """Attaches, retrying while no daemon answers. False if told to
        exit meanwhile."""
        while True:
            try:
                self.session = self.client.attach(
                    self.args.model_id, BLOCK, client_name=self.args.name)
                memory = self.session.memory
                self.tags = (memory.tensor("tag", 0) if memory is not None
                             else None)
                break
            except FileNotFoundError as e:
                # The daemon that answered Attach was killed right after,
                # and its successor removed its region: the session went
                # with it. Attach again.
                self.forget("its region is gone: %s" % e)
            except (statecache.Unavailable, statecache.DeadlineExceeded):
                # The daemon is down or restarting: the channel reconnects
                # by itself; ask again shortly, unless told to stop.
                try:
                    command = self.commands.get(timeout=0.05)
                except queue.Empty:
                    continue
                if command == "exit":
                    return False
                self.deferred = command  # served once attached
        self.attaches += 1
        if self.args.stream:
            self.stream = self.session.stream()
        self.say(event="attached", epoch=self.session.epoch,
                 attach=self.attaches,
                 handle=memory.handle.decode() if memory else None)
        return True

    def forget(self, why):
        self.say(event="lost", why=why)
        if self.stream is not None:
            self.stream.close()
        if self.session is not None:
            self.session.close()
        self.session = None
        self.stream = None
        self.tags = None
        self.running = []

    def step(self):
        """A builder for the next step: unary, or over the stream."""
        return (self.stream or self.session).step()

    # ---- slots

    def take(self, r, slot):
        if self.tags is not None:
            self.tags[slot] = (self.args.uid, r.seq)

    def check_tags(self):
        if self.tags is None:
            return
        for r in self.running:
            for slot in r.owned():
                got = tuple(int(v) for v in self.tags[slot])
                if got != (self.args.uid, r.seq):
                    # Unless the session is gone (this process stalled
                    # past its lease and the quarantine: raises LeaseLost),
                    # the daemon gave the slot to someone else.
                    self.session.keep_alive()
                    raise Bug("slot %d of request %s (uid %d, seq %d) was "
                              "written by someone else: tag %r"
                              % (slot, r.id, self.args.uid, r.seq, got))

    def owned_slots(self):
        slots = [s for r in self.running for s in r.owned()]
        if len(set(slots)) != len(slots):
            raise Bug("two of my requests hold one slot: %r" % sorted(slots))
        return sorted(slots)

    @staticmethod
    def check(result, what):
        if not result.ok:
            raise Bug("%s refused: code %d: %s"
                      % (what, result.code, result.message))
        return result

    # ---- the workload

    def new_request(self):
        self.seq += 1
        prefix = self.rng.randrange(PREFIXES)
        h, hashes = 0, []
        for b in range(2 + prefix % 3):      # shared: 2-4 blocks
            h = chained(h, b"prefix-%d-%d" % (prefix, b))
            hashes.append(h)
        for b in range(self.rng.randrange(3)):  # private: 0-2 blocks
            h = chained(h, b"%s-%d-%d" % (self.args.name.encode(), self.seq,
                                          b))
            hashes.append(h)
        tail = self.rng.randrange(1, BLOCK)
        return Request("r%d" % self.seq, self.seq, hashes,
                       len(hashes) * BLOCK + tail,
                       width=1 + (self.rng.random() < 0.25),
                       decode=self.rng.randrange(1, 6))

    def kv_hit(self, r):
        n = 0
        while n < len(r.hashes) and r.hashes[n] in self.kv:
            n += 1
        return n

    def apply_moves(self, begin):
        by_id = {r.id: r for r in self.running}
        for move in begin.moves:
            r = by_id[move.request_id]
            if r.slots[move.index] != move.from_slot:
                raise Bug("move of %s[%d] from %d, but it holds %d"
                          % (r.id, move.index, move.from_slot,
                             r.slots[move.index]))
            r.slots[move.index] = move.to_slot

    def run_pass(self):
        s = self.session
        self.check_tags()
        before = self.step().begin_pass()
        # Midstep checkpoints for some running requests: reserve one block
        # ahead, then publish (the forward wrote it) or cancel.
        midstep = [r for r in self.running
                   if r.pos < r.num_tokens and self.rng.random() < 0.3]
        for r in midstep:
            before.reserve(r.id, positions=[(r.pos + 1, chained(
                r.hashes[-1], b"mid-%d" % r.pos))])
        admits = []
        while (len(self.running) + len(admits) < MAX_RUNNING and
               self.rng.random() < 0.7):
            r = self.new_request()
            admits.append(r)
            before.admit(r.id, width=r.width, num_tokens=r.num_tokens,
                         anchor_pos=r.boundary, block_hashes=r.hashes,
                         kv_hit_blocks=self.kv_hit(r))
        results = before.send()
        self.apply_moves(self.check(results[0], "begin_pass"))
        for r, result in zip(midstep, results[1:1 + len(midstep)]):
            for v in self.check(result, "reserve").reservations:
                r.reserved.append(v.slot)
                self.take(r, v.slot)
        for r, a in zip(admits, results[1 + len(midstep):]):
            if a.code == RESOURCE_EXHAUSTED:
                continue  # no free slots: this one never came
            self.check(a, "admit")
            if len(a.slots) != r.width:
                raise Bug("admit of width %d got %r" % (r.width, a.slots))
            r.slots = list(a.slots)
            r.read_from = a.fork_src
            r.pos = a.blocks_resumed * BLOCK
            r.checkpointed = r.pos == r.boundary
            for slot in r.slots:
                self.take(r, slot)
            self.running.append(r)
        self.owned_slots()

        # The forward: every request advances (prefill to its boundary,
        # then to the prompt's end, then one token per pass).
        finished = []
        for r in self.running:
            if r.pos < r.boundary:
                r.pos = r.boundary
            elif r.pos < r.num_tokens:
                r.pos = r.num_tokens
            else:
                r.pos += 1
                r.decode -= 1
                if r.decode <= 0:
                    finished.append(r)
            self.kv.update(r.hashes[:min(r.pos, r.boundary) // BLOCK])
        if len(self.kv) > 4096:
            self.kv.clear()  # the KV cache evicted everything

        after, kinds = self.step(), []
        for r in self.running:
            if r.read_from >= 0:
                after.consume_fork(r.id)
                kinds.append(("consume_fork", r))
                r.read_from = -1
            if r.reserved:
                if self.rng.random() < 0.8:
                    after.publish(r.id)
                    kinds.append(("publish", r))
                else:
                    after.cancel(r.id)
                    kinds.append(("cancel", r))
            if (r.pos == r.boundary and not r.checkpointed and r.boundary
                    and r not in finished):
                after.checkpoint(r.id, boundary_blocks=len(r.hashes),
                                 hash=r.hashes[-1])
                kinds.append(("checkpoint", r))
        for r in finished:
            after.release(r.id)
            kinds.append(("release", r))
        results = after.send() if len(after) else []
        for (kind, r), result in zip(kinds, results):
            self.check(result, kind)
            if kind in ("publish", "cancel"):
                r.reserved = []
            elif kind == "checkpoint":
                r.checkpointed = True
                if result.kept:
                    r.slots[0] = result.state_slot
                    r.read_from = result.fork_src
                    self.take(r, r.slots[0])
            elif kind == "release":
                self.running.remove(r)
        self.passes += 1
        if self.passes % 25 == 0:
            self.say(event="progress", passes=self.passes, epoch=s.epoch)

    def quiesce(self):
        """No pins left: every fork consumed, the pin clock ticked twice
        (a checkpoint's pin survives one tick)."""
        step = self.step()
        for r in self.running:
            if r.read_from >= 0:
                step.consume_fork(r.id)
                r.read_from = -1
        for result in (step.send() if len(step) else []):
            self.check(result, "consume_fork")
        for _ in range(2):
            self.apply_moves(
                self.check(self.step().begin_pass().send()[0],
                           "begin_pass"))

    def report(self):
        self.check_tags()
        self.say(event="report", epoch=self.session.epoch,
                 slots=self.owned_slots(), requests=len(self.running),
                 lost=self.session.lost is not None, passes=self.passes)

    # ---- the loop

    def serve(self):
        """Runs passes until `exit`; handles quiesce/report. Returns the
        exit status."""
        threading.Thread(target=self.read_commands, daemon=True).start()
        self.client = statecache.Client.connect(self.args.address,
                                                timeout=self.args.timeout)
        quiet = False
        while True:
            try:
                # Quiesced: wait for the next command; else the pace
                # between passes (the engine's forward).
                command = self.commands.get(
                    timeout=None if quiet else self.args.pace)
            except queue.Empty:
                command = None
            if command == "exit":
                break
            try:
                if self.session is None and not self.attach():
                    break
                if command is None and self.deferred is not None:
                    command, self.deferred = self.deferred, None
                if command == "quiesce":
                    self.quiesce()
                    quiet = True
                if command in ("quiesce", "report"):
                    self.report()
                if not quiet:
                    self.run_pass()
            except (statecache.LeaseLost, statecache.Unavailable,
                    statecache.DeadlineExceeded) as e:
                # Lost (EpochChanged is a LeaseLost), or unanswered: the step
                # may or may not have run, so start over on a fresh session
                # either way (close() detaches if the daemon still answers).
                self.forget("%s: %s" % (type(e).__name__, e.message))
                if quiet:
                    quiet = False  # quiesce and report again once attached
                    self.deferred = "quiesce"
        released = 0
        if self.stream is not None:
            self.stream.close()
        if self.session is not None:
            try:
                released = self.session.detach()
            except statecache.Error:
                pass
        self.say(event="detached", released=released)
        self.client.close()
        return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--name", required=True,
                        help="client_name, unique per process")
    parser.add_argument("--uid", type=int, required=True,
                        help="the tag this process writes into its slots")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model_id", default="chaos/model")
    parser.add_argument("--pace", type=float, default=0.01,
                        help="seconds between passes (the engine's forward)")
    parser.add_argument("--stream", action="store_true",
                        help="send steps over one StepStream per session")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="each call's deadline, seconds")
    args = parser.parse_args()
    try:
        return Scheduler(args).serve()
    except Bug as e:
        sys.stderr.write("scheduler %s: BUG: %s\n" % (args.name, e))
        return 3


if __name__ == "__main__":
    sys.exit(main())

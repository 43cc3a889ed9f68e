#!/usr/bin/python3
"""python_step_bench: a pass through the Python package, against a Ping.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_step_bench.py \\
        [--statecached build/bin/statecached] [--iterations 2000] [--reps 3]
        [--reference-dir ../shared/reference]
        [--reference-bench build/bin/reference_bench]
        [--daemon-flag=--step_channel_spin=1ms ...] [--json]

Starts its own statecached on a Unix socket in a temporary directory, as
rpc_bench does (--num_slots=4096 --model_id=bench --lease_ttl=60s, metrics
on as deployed), and times, on that socket in the same run:

  * Ping from Python (grpc's Python stub): the baseline;
  * Steps of 1 and 256 operations through the package (statecache.Session
    over gRPC: always the packed form), unary and over StepStream. The
    passes are
    rpc_bench's Scheduler's (bench/rpc/passes.h), ported: begin_pass, the
    releases of the oldest running requests, a consume_fork and a checkpoint
    for every running request, admissions resuming earlier turns, and
    resumable_hit queries filling the rest; the running batch (~ops/2
    requests) and the pool stay in a steady state;
  * `gRPC only`: the 256-op requests encoded off the clock and sent as
    bytes, their results not decoded: the gRPC Python call by itself;
  * in-process, the 256-op pass's build (the builder's methods), encoding
    and decoding, each timed alone; and, for comparison, the same
    StepRequest serialised through protobuf's Python API
    (PackedOperations of the builder's columns) instead of the package's
    encoder.

Then, in the same run, a scheduler's whole 256-operation pass, building it,
sending it and reading its results all on the clock (issue 33's measure),
each as a ratio to the reference pool's calls for such a pass:

  * the reference pool (Python, in process): the pool calls of
    reference_bench's 256-op passes (rpc_bench's Scheduler: this bench's,
    ported) on ../shared/reference's pool, as reference_bench times them
    (it records the trace: --pool_trace; bench/reference_timing.py --paced
    --passes times it, in a child process, once per repetition);
  * the per-operation builder (StepBuilder: one dataclass per result) and
    the columnar API (ColumnarStep: one call per kind, results read as
    arrays), each over gRPC and over the step channel. As the reference's
    passes are timed (their arguments converted before the clock starts,
    then the passes one after another), the scheduler's own decisions for
    all the passes of a measurement (which requests, their hashes: random
    draws and hash chains) are made first, off the clock; then, pass after
    pass, on the clock are the API's calls
    from those decisions (the builder's 256 method calls, or the columnar
    calls from the scheduler's lists: begin_pass, release, consume_fork
    and checkpoint of the running batch with its ids encoded once, admit,
    resumable_hit), the send, and reading the results (every dataclass's
    code; the pass's refusals and the admit, checkpoint and resumable_hit
    batches' arrays). A second columnar row takes its decisions as a
    scheduler keeping its batch in arrays holds them: the running batch's
    ids encoded once (RequestIds) and its numbers as numpy arrays, made
    off the clock; the block hashes stay lists;
  * the step channel's bare round trip (kPing), its floor.

A channel round trip includes waking the daemon's channel thread when it
has stopped polling (its --step_channel_spin, 50 us by default) and gone
to sleep on the futex: on a VM that wake-up alone can be tens of
microseconds. --daemon-flag passes flags to the daemon (e.g.
--step_channel_spin=1ms) to measure without it.

Without the reference (no run_trace.py in --reference-dir, no
reference_bench) one line says why and the ratios are left out.

As in rpc_bench's client-library rows, a call's clock covers send() (the
columns joined, the request serialised, the round trip, the results parsed
into dataclasses); building the pass with the builder's methods comes before
it, off the clock, and is timed on its own in the `build` column (a
scheduler pays both). Each row is timed back to back (n calls in a row) and
paired: interleaved in blocks of 8 with Pings whose client builds the same
pass before each, so both are timed at the same moments of the machine (the
first call of each block is not counted). Every figure is the median over
--reps runs; a ratio is the median of the runs' ratios.

Prints a table (p50/p99 in microseconds, ratio to Ping) or, with --json, one
JSON object.
"""

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import statecache
except ImportError:
    sys.path.insert(0, os.path.join(_HERE, os.pardir, "build", "python"))
    import statecache
from statecache.testing import Daemon
from statecache import _step
from statecache.v1 import statecache_pb2 as pb

BLOCK = 64
SLOTS = 4096
_clock = time.perf_counter_ns


class Scheduler:
    """rpc_bench's Scheduler: a pass of `ops` operations shaped like a real
    one, built through a StepBuilder."""

    def __init__(self, ops, seed):
        self.ops = ops
        self.rng = random.Random(seed)
        self.admits = max(1, ops // 32)
        self.batch = max(0, (ops - 1 - 2 * self.admits) // 2)
        self.convs = [[] for _ in range(256)]
        self.running = []  # (request id, conversation)
        self.next_id = 0

    def _next_turn(self, rng, convs):
        """A new turn of a random conversation: the conversation's index,
        the request id, its block hashes (the conversation's, one block
        longer; a long one trimmed) and the blocks the KV cache holds."""
        ci = rng.randrange(len(convs))
        hashes = convs[ci]
        if not hashes:
            hashes.append(rng.getrandbits(63))
        if len(hashes) > 32:
            del hashes[1:-8]
        kv_hit = len(hashes)
        hashes.append(rng.getrandbits(63))
        request_id = "r%d" % self.next_id
        self.next_id += 1
        return ci, request_id, hashes, kv_hit

    def build(self, step):
        step.begin_pass()
        if self.ops == 1:
            return step
        ops, rng, convs, running = self.ops, self.rng, self.convs, self.running
        to_release = min(self.admits,
                         max(0, len(running) + self.admits - self.batch))
        for _ in range(to_release):
            step.release(running.pop(0)[0])
        for request_id, ci in running:
            if len(step) + 2 > ops - self.admits:
                break
            step.consume_fork(request_id)
            hashes = convs[ci]
            hashes.append(((hashes[-1] * 1000003 + 17) % (1 << 64)) >> 1)
            step.checkpoint(request_id, len(hashes), hashes[-1])
        want = max(self.admits, self.batch - len(running))
        for _ in range(want):
            if len(step) >= ops:
                break
            ci, request_id, hashes, kv_hit = self._next_turn(rng, convs)
            step.admit(request_id, 1, len(hashes) * BLOCK + 7,
                       len(hashes) * BLOCK, hashes, kv_hit)
            running.append((request_id, ci))
        while len(step) < ops:
            hashes = convs[rng.randrange(len(convs))]
            step.resumable_hit(len(hashes) * BLOCK + 7, hashes, len(hashes))
        return step


class Recorder:
    """Stands in for a StepBuilder: records each method called and its
    arguments (the pass a Scheduler decides), to be issued later."""

    def __init__(self):
        self.calls = []

    def __len__(self):
        return len(self.calls)

    def __getattr__(self, name):
        method = getattr(statecache.StepBuilder, name)

        def record(*args):
            # As the builder would, take the lists' values now (a later
            # admit may trim a conversation's list).
            self.calls.append((method, tuple(
                a[:] if isinstance(a, list) else a for a in args)))
        return record


class ColumnarScheduler(Scheduler):
    """The same scheduler deciding the same kind of passes, holding each
    kind's operations as lists (ids, numbers, the admits' hash lists), as
    a scheduler using the columnar API builds them: plan() returns them,
    issue() makes the columnar calls. With `arrays`, the plan holds what
    a scheduler keeping its batch in arrays would: the running batch's ids
    encoded (RequestIds), every number column a numpy array; the admits'
    and queries' block hashes stay lists (an engine's prefix cache gives
    them so)."""

    def __init__(self, ops, seed, arrays=False):
        Scheduler.__init__(self, ops, seed)
        self.arrays = arrays

    def plan(self):
        ops, rng, convs, running = self.ops, self.rng, self.convs, self.running
        n = 1
        to_release = min(self.admits,
                         max(0, len(running) + self.admits - self.batch))
        released = [running.pop(0)[0] for _ in range(to_release)]
        n += to_release
        ids, blocks, boundary = [], [], []
        for request_id, ci in running:
            if n + 2 > ops - self.admits:
                break
            hashes = convs[ci]
            hashes.append(((hashes[-1] * 1000003 + 17) % (1 << 64)) >> 1)
            ids.append(request_id)
            blocks.append(len(hashes))
            boundary.append(hashes[-1])
            n += 2
        want = max(self.admits, self.batch - len(running))
        admit = ([], [], [], [], [])  # ids, tokens, anchors, hashes, hits
        for _ in range(want):
            if n >= ops:
                break
            ci, request_id, hashes, kv_hit = self._next_turn(rng, convs)
            for column, value in zip(admit, (
                    request_id, len(hashes) * BLOCK + 7, len(hashes) * BLOCK,
                    hashes[:], kv_hit)):  # a later admit may trim `hashes`
                column.append(value)
            running.append((request_id, ci))
            n += 1
        hit = ([], [], [])  # tokens, hashes, kv_hit_blocks
        while n < ops:
            hashes = convs[rng.randrange(len(convs))]
            for column, value in zip(hit, (len(hashes) * BLOCK + 7,
                                           hashes[:], len(hashes))):
                column.append(value)
            n += 1
        if self.arrays:
            ids = statecache.RequestIds(ids)
            blocks, boundary = np.array(blocks), np.array(boundary)
            admit = (admit[0], np.array(admit[1]), np.array(admit[2]),
                     admit[3], np.array(admit[4]))
            hit = (np.array(hit[0]), hit[1], np.array(hit[2]))
        return released, ids, blocks, boundary, admit, hit

    @staticmethod
    def issue(step, plan):
        """The columnar calls of `plan`: the batches a scheduler reads."""
        released, ids, blocks, boundary, admit, hit = plan
        step.begin_pass()
        step.release(released)
        running = (ids if isinstance(ids, statecache.RequestIds)
                   else statecache.RequestIds(ids))  # encoded once
        step.consume_fork(running)
        checkpoints = step.checkpoint(running, blocks, boundary)
        admits = step.admit(admit[0], 1, *admit[1:])
        queries = step.resumable_hit(*hit)
        return admits, checkpoints, queries


class PassTrip:
    """A scheduler's whole pass: its decisions off the clock (prepare(), as
    the reference's arguments are converted before its clock starts), then
    on the clock the API's calls building the pass (the per-operation
    builder's methods, or the columnar calls), the send over `transport`
    and the results read (every dataclass's code; the whole pass's codes
    and the arrays of the columnar batches a scheduler reads)."""

    def __init__(self, client, transport, columnar, ops=256, arrays=False):
        self.session = client.attach("bench", BLOCK, client_name="py-pass",
                                     keepalive=False, transport=transport)
        if self.session.transport != transport:
            raise SystemExit("no %s transport: %s" % (
                transport, self.session.transport_reason))
        self.columnar = columnar
        self.sched = (ColumnarScheduler(ops, 7, arrays) if columnar
                      else Scheduler(ops, 7))
        self.plan = None
        for _ in range(50):  # fill the running batch, untimed
            self.prepare()
            self.call()

    def prepare(self):
        if self.columnar:
            self.plan = self.sched.plan()
        else:
            self.plan = self.sched.build(Recorder()).calls

    def call(self):
        if not self.columnar:
            step = self.session.step()
            for method, args in self.plan:
                method(step, *args)
            for r in step.send():
                if r.code not in (0, 8):
                    raise SystemExit("refused: %d %s" % (r.code, r.message))
            return
        step = self.session.columns()
        admits, checkpoints, queries = self.sched.issue(step, self.plan)
        results = step.send()
        for i in results.refused:
            if results.codes[i] != 8:
                raise SystemExit("refused: %d" % results.codes[i])
        admit = results[admits]
        admit.slots, admit.fork_src, admit.blocks_resumed
        checkpoint = results[checkpoints]
        checkpoint.state_slot, checkpoint.fork_src, checkpoint.kept
        results[queries].blocks

    def close(self):
        self.session.close()


class ChannelPingTrip:
    """The step channel's bare round trip (kPing) from Python."""

    def __init__(self, client):
        self.session = client.attach("bench", BLOCK, client_name="py-ping",
                                     keepalive=False, transport="channel")
        self.plan = None

    def prepare(self):
        pass

    def call(self):
        self.session.ping()

    def close(self):
        self.session.close()


class StepTrip:
    """Steps of `ops` operations through a session (unary) or its stream,
    over gRPC."""

    def __init__(self, client, ops, streamed):
        self.session = client.attach("bench", BLOCK, client_name="py-bench",
                                     keepalive=False, transport="grpc")
        self.stream = self.session.stream() if streamed else None
        self.sched = Scheduler(ops, 7)
        self.builder = None
        self.build_ns = []
        for _ in range(50):  # fill the running batch, untimed
            self.prepare()
            self.call()

    def new_step(self):
        return (self.stream or self.session).step()

    def prepare(self):
        t0 = _clock()
        self.builder = self.sched.build(self.new_step())
        self.build_ns.append(_clock() - t0)

    def call(self):
        for r in self.builder.send():
            if r.code not in (0, 8):
                raise SystemExit("refused: %d %s" % (r.code, r.message))

    def close(self):
        if self.stream is not None:
            self.stream.close()
        self.session.close()


class BytesTrip(StepTrip):
    """The same passes, encoded off the clock and sent as bytes with no
    results decoded: what the gRPC Python call costs by itself."""

    def prepare(self):
        StepTrip.prepare(self)
        self.request = _step.step_request(self.session._request_prefix,
                                          self.builder.encode())

    def call(self):
        response = self.session._client._step_bytes(self.request, timeout=5)
        if response.error_code or len(response.packed_results.codes) == 0:
            raise SystemExit("bytes step refused")


class PingTrip:
    """A Ping from Python; with `ops`, prepare builds (and drops) a pass of
    that many operations first, as the Step row it is paired with."""

    def __init__(self, client, ops=0):
        self.client = client
        self.sched = Scheduler(ops, 13) if ops else None
        if self.sched is not None:
            for _ in range(50):
                self.prepare()

    def prepare(self):
        if self.sched is not None:
            self.sched.build(statecache.StepBuilder(None))

    def call(self):
        self.client.ping()

    def close(self):
        pass


def summarise(ns):
    ns = sorted(ns)
    return ns[len(ns) // 2] / 1000.0, ns[len(ns) * 99 // 100] / 1000.0


def timed(trip):
    trip.prepare()
    t0 = _clock()
    trip.call()
    return _clock() - t0


def measure(trip, n):
    return summarise([timed(trip) for _ in range(n)])


def measure_planned(trip, n):
    """As the reference's passes are timed: the `n` passes' decisions made
    first (trip.prepare(), off the clock), then the passes one after
    another, each on the clock."""
    plans = []
    for _ in range(n):
        trip.prepare()
        plans.append(trip.plan)
    ns = []
    for plan in plans:
        trip.plan = plan
        t0 = _clock()
        trip.call()
        ns.append(_clock() - t0)
    return summarise(ns)


def measure_paired(trip, ping, n, block=8):
    times = ([], [])
    done = 0
    while done < n:
        for k, t in enumerate((trip, ping)):
            for i in range(block):
                ns = timed(t)
                if i > 0:
                    times[k].append(ns)
        done += block - 1
    return summarise(times[0]), summarise(times[1])


ROWS = [  # name, ops, trip
    ("Step, 1 op", 1, "unary"),
    ("Step, 256 ops", 256, "unary"),
    ("  256 ops, gRPC only", 256, "bytes"),
    ("StepStream, 1 op", 1, "stream"),
    ("StepStream, 256 ops", 256, "stream"),
]


def make_trip(client, ops, kind):
    if kind == "bytes":
        return BytesTrip(client, ops, False)
    return StepTrip(client, ops, kind == "stream")


def protobuf_request(session_id, builder):
    """The StepRequest send() writes, serialised by protobuf's Python API
    from the builder's columns instead (for comparison)."""
    columns = builder.columns()
    return pb.StepRequest(session_id=session_id, packed=pb.PackedOperations(
        kinds=columns.kinds.tolist(), request_ids=columns.request_ids,
        request_id_lengths=columns.request_id_lengths.tolist(),
        args=columns.args.tolist(),
        hashes=columns.hashes.tolist())).SerializeToString()


def breakdown(client, n):
    """In-process, off the wire: the 256-op pass's encoding (send()'s
    bytes; and, for comparison, the same StepRequest through protobuf's
    Python API) and its results' decoding (PackedResults to
    dataclasses)."""
    trip = StepTrip(client, 256, False)
    try:
        encode, encode_protobuf, decode = [], [], []
        for _ in range(n):
            trip.prepare()
            kinds = list(trip.builder._kinds)
            t0 = _clock()
            packed = trip.builder.encode()
            t1 = _clock()
            protobuf_request(trip.session.session_id, trip.builder)
            encode_protobuf.append(_clock() - t1)
            trip.builder.clear()
            response = client._step_bytes(_step.step_request(
                trip.session._request_prefix, packed), timeout=5)
            t2 = _clock()
            _step.decode_results(kinds, response.packed_results)
            decode.append(_clock() - t2)
            encode.append(t1 - t0)
        return {"encode_p50_us": summarise(encode)[0],
                "encode_protobuf_p50_us": summarise(encode_protobuf)[0],
                "decode_p50_us": summarise(decode)[0],
                "build_p50_us": summarise(trip.build_ns[50:])[0]}
    finally:
        trip.close()


PASS_ROWS = [  # name, transport, columnar (None: the bare round trip;
    # "arrays": columnar, the batch held in arrays)
    ("per-op builder, gRPC", "grpc", False),
    ("columnar, gRPC", "grpc", True),
    ("per-op builder, channel", "channel", False),
    ("columnar, channel", "channel", True),
    ("columnar, batch in arrays, channel", "channel", "arrays"),
    ("channel bare round trip (kPing)", "channel", None),
]


class Reference:
    """The reference pool's calls for reference_bench's 256-op passes,
    timed pass by pass in a child process (bench/reference_timing.py
    --paced --passes) one repetition at a time; `why` says why not when
    the reference or reference_bench is missing."""

    def __init__(self, reference_dir, reference_bench, python, passes):
        self.why = None
        self.child = None
        self.note = ""
        self.dir = None
        script = os.path.join(_HERE, "reference_timing.py")
        if not os.path.isfile(os.path.join(reference_dir, "run_trace.py")):
            self.why = ("no run_trace.py in --reference-dir=%s (a clone has "
                        "no ../shared/reference beside it)" % reference_dir)
            return
        if not os.access(reference_bench, os.X_OK):
            self.why = "no reference_bench at %s (build it)" % reference_bench
            return
        self.dir = tempfile.mkdtemp(prefix="python-step-bench-")
        trace = os.path.join(self.dir, "pass.jsonl")
        # reference_bench records its passes' pool calls (the core's own,
        # checked on run_trace.py) and runs its rows once.
        done = subprocess.run(
            [reference_bench, "--pool_trace=" + trace,
             "--iterations=%d" % passes, "--reference_passes=%d" % passes,
             "--reps=1", "--reference_dir=" + reference_dir,
             "--python=" + python],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0 or not os.path.isfile(trace):
            self.why = "reference_bench failed:\n" + done.stdout
            return
        for line in done.stdout.splitlines():
            if line.startswith("reference:"):
                note = line.split("(", 1)[1].split(") on the")[0]
                # Its trace is a temporary file here.
                self.note = "; ".join(part for part in note.split("; ")
                                      if not part.startswith("trace "))
            if line.startswith("WARNING"):
                self.note += "; " + line
        self.child = subprocess.Popen(
            [python, script, "--paced", "--reference-dir", reference_dir,
             "--passes", trace + ".passes.json", trace],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run_once(self):
        """One repetition: (p50, p99) of a pass's pool calls, in us."""
        self.child.stdin.write("go\n")
        self.child.stdin.flush()
        line = self.child.stdout.readline()
        fields = dict(f.split("=") for f in line.split())
        try:
            return (int(fields["p50_ns"]) / 1000.0,
                    int(fields["p99_ns"]) / 1000.0)
        except KeyError:
            raise SystemExit("reference_timing.py said %r" % line) from None

    def close(self):
        if self.child is not None:
            self.child.stdin.close()
            self.child.wait()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)


def make_pass_trip(client, transport, columnar):
    if columnar is None:
        return ChannelPingTrip(client)
    if columnar == "arrays":
        return PassTrip(client, transport, True, arrays=True)
    return PassTrip(client, transport, columnar)


def run(address, iterations, reps, reference, daemon_flags=(),
        passes_only=False):
    rows = {name: {"b2b": [], "paired": [], "ping_paired": [], "build": []}
            for name, _, _ in ROWS}
    passes = {name: [] for name, _, _ in PASS_ROWS}
    references = []
    parts = []
    pings = []
    with statecache.Client.connect(address) as client:
        for _ in range(reps):
            if reference.child is not None:
                references.append(reference.run_once())
            for name, transport, columnar in PASS_ROWS:
                trip = make_pass_trip(client, transport, columnar)
                try:
                    measure_planned(trip, 200)  # warm up
                    passes[name].append(measure_planned(trip, iterations))
                finally:
                    trip.close()
            if passes_only:
                continue
            ping = PingTrip(client)
            measure(ping, 200)  # warm up
            pings.append(measure(ping, iterations))
            for name, ops, kind in ROWS:
                trip = make_trip(client, ops, kind)
                paired_ping = PingTrip(client, ops)
                try:
                    rows[name]["b2b"].append(measure(trip, iterations))
                    step, with_ping = measure_paired(trip, paired_ping,
                                                     iterations)
                    rows[name]["paired"].append(step)
                    rows[name]["ping_paired"].append(with_ping)
                    rows[name]["build"].append(
                        summarise(trip.build_ns[50:]))
                finally:
                    trip.close()
            parts.append(breakdown(client, iterations))
    ping_p50 = [p[0] for p in pings]
    if passes_only:
        ping_p50 = [0.0]
        pings = [(0.0, 0.0)]
    out = {
        "platform": {"python": platform.python_version(),
                     "cpus_online": os.cpu_count(),
                     "cpus_allowed": sorted(os.sched_getaffinity(0)),
                     "iterations": iterations, "reps": reps,
                     "daemon_flags": daemon_flags},
        "ping": {"p50_us": statistics.median(ping_p50),
                 "p99_us": statistics.median(p[1] for p in pings)},
        "rows": [],
    }
    out["breakdown_256"] = {
        key: statistics.median(p[key] for p in parts)
        for key in (parts[0] if parts else ())}
    ref_p50 = [r[0] for r in references]
    out["pass_256"] = {
        "reference": None if not references else {
            "p50_us": statistics.median(ref_p50),
            "p99_us": statistics.median(r[1] for r in references),
            "note": reference.note},
        "reference_not_run": reference.why,
        "rows": []}
    for name, transport, columnar in PASS_ROWS:
        runs = passes[name]
        out["pass_256"]["rows"].append({
            "name": name, "transport": transport,
            "api": ("ping" if columnar is None else
                    "columnar, arrays" if columnar == "arrays" else
                    "columnar" if columnar else "per-op"),
            "p50_us": statistics.median(x[0] for x in runs),
            "p99_us": statistics.median(x[1] for x in runs),
            "ratio_to_reference": None if not references else
            statistics.median(x[0] / r for x, r in zip(runs, ref_p50)),
        })
    for name, ops, kind in ([] if passes_only else ROWS):
        r = rows[name]
        out["rows"].append({
            "name": name.strip(), "ops": ops, "trip": kind,
            "p50_us": statistics.median(x[0] for x in r["b2b"]),
            "p99_us": statistics.median(x[1] for x in r["b2b"]),
            "ratio_to_ping": statistics.median(
                x[0] / p for x, p in zip(r["b2b"], ping_p50)),
            "paired_p50_us": statistics.median(x[0] for x in r["paired"]),
            "paired_ping_p50_us": statistics.median(
                x[0] for x in r["ping_paired"]),
            "paired_ratio": statistics.median(
                x[0] / p[0] for x, p in zip(r["paired"], r["ping_paired"])),
            "build_p50_us": statistics.median(x[0] for x in r["build"]),
        })
    return out


def print_table(result):
    p = result["platform"]
    print("platform: python %s, %d CPUs online, allowed %s; %d iterations, "
          "median of %d reps; extra daemon flags: %s" % (
              p["python"], p["cpus_online"],
              ",".join(map(str, p["cpus_allowed"])), p["iterations"],
              p["reps"], " ".join(p["daemon_flags"]) or "none"))
    if result["rows"]:
        print_step_rows(result)
    print_pass_rows(result)


def print_step_rows(result):
    print("%-22s %9s %9s %7s | %9s %9s %7s | %9s" % (
        "row", "p50 us", "p99 us", "x Ping", "paired", "its Ping", "ratio",
        "build us"))
    print("%-22s %9.1f %9.1f %7s | %9s %9s %7s | %9s" % (
        "Ping (Python)", result["ping"]["p50_us"], result["ping"]["p99_us"],
        "1.00", "", "", "", ""))
    for r, (name, _, _) in zip(result["rows"], ROWS):
        print("%-22s %9.1f %9.1f %7.2f | %9.1f %9.1f %7.2f | %9.1f" % (
            name, r["p50_us"], r["p99_us"], r["ratio_to_ping"],
            r["paired_p50_us"], r["paired_ping_p50_us"], r["paired_ratio"],
            r["build_p50_us"]))
    b = result["breakdown_256"]
    print("256-op pass in-process: build %.1f us (off the clock above), "
          "encode %.1f us (through protobuf's Python API: %.1f us), "
          "decode %.1f us" % (
              b["build_p50_us"], b["encode_p50_us"],
              b["encode_protobuf_p50_us"], b["decode_p50_us"]))
    print("p50/p99: back to back; paired: interleaved with Pings after the "
          "same client work; build: the builder's methods, off the clock; "
          "gRPC only: the same requests as bytes, results not decoded")
    print()


def print_pass_rows(result):
    p = result["pass_256"]
    print("A scheduler's whole 256-op pass: build + send + read results on "
          "the clock; x ref: p50 / the reference pool's p50 in the same "
          "repetition (median of the repetitions' ratios)")
    if p["reference"] is None:
        print("reference rows not run: %s" % p["reference_not_run"])
    print("  %-50s %9s %9s %7s" % ("256-op pass", "p50 us", "p99 us",
                                   "x ref"))
    if p["reference"] is not None:
        print("  %-50s %9.1f %9.1f %7s" % (
            "reference pool (Python, in process), its calls",
            p["reference"]["p50_us"], p["reference"]["p99_us"], "1.00"))
    for r in p["rows"]:
        ratio = r["ratio_to_reference"]
        print("  %-50s %9.1f %9.1f %7s" % (
            r["name"], r["p50_us"], r["p99_us"],
            "-" if ratio is None else "%.3f" % ratio))
    if p["reference"] is not None:
        print("  reference: %s" % p["reference"]["note"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statecached", default=os.environ.get(
        "STATECACHED", os.path.join(_HERE, os.pardir, "build", "bin",
                                    "statecached")))
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--reference-dir", default=os.path.join(
        _HERE, os.pardir, os.pardir, "shared", "reference"),
        help="the reference's run_trace.py (reference_bench's "
        "--reference_dir)")
    parser.add_argument("--reference-bench", default=os.path.join(
        _HERE, os.pardir, "build", "bin", "reference_bench"),
        help="reference_bench, which records the reference rows' trace")
    parser.add_argument("--reference-passes", type=int, default=300,
                        help="timed passes per run of the reference row")
    parser.add_argument("--daemon-flag", action="append", default=[],
                        help="an extra statecached flag (repeatable)")
    parser.add_argument("--passes-only", action="store_true",
                        help="only the whole-pass rows against the reference")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the table")
    args = parser.parse_args()
    reference = Reference(os.path.abspath(args.reference_dir),
                          args.reference_bench, sys.executable,
                          args.reference_passes)
    try:
        with Daemon(["--num_slots=%d" % SLOTS, "--model_id=bench",
                     "--lease_ttl=60s", "--metrics_address=127.0.0.1:0"]
                    + args.daemon_flag, binary=args.statecached) as daemon:
            result = run(daemon.address, args.iterations, args.reps,
                         reference, args.daemon_flag, args.passes_only)
    finally:
        reference.close()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

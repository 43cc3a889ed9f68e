#!/usr/bin/python3
"""python_step_bench: a pass through the Python package, against a Ping.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_step_bench.py \\
        [--statecached build/bin/statecached] [--iterations 2000] [--reps 3]
        [--json]

Starts its own statecached on a Unix socket in a temporary directory, as
rpc_bench does (--num_slots=4096 --model_id=bench --lease_ttl=60s, metrics
on as deployed), and times, on that socket in the same run:

  * Ping from Python (grpc's Python stub): the baseline;
  * Steps of 1 and 256 operations through the package (statecache.Session:
    always the packed form), unary and over StepStream. The passes are
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
    (PackedOperations(**builder.columns())) instead of the package's
    encoder.

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
import statistics
import sys
import time

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
            step.admit(request_id, 1, len(hashes) * BLOCK + 7,
                       len(hashes) * BLOCK, hashes, kv_hit)
            running.append((request_id, ci))
        while len(step) < ops:
            hashes = convs[rng.randrange(len(convs))]
            step.resumable_hit(len(hashes) * BLOCK + 7, hashes, len(hashes))
        return step


class StepTrip:
    """Steps of `ops` operations through a session (unary) or its stream."""

    def __init__(self, client, ops, streamed):
        self.session = client.attach("bench", BLOCK, client_name="py-bench",
                                     keepalive=False)
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
            self.sched.build(statecache.StepBuilder(None)).columns()

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


def run(address, iterations, reps):
    rows = {name: {"b2b": [], "paired": [], "ping_paired": [], "build": []}
            for name, _, _ in ROWS}
    parts = []
    pings = []
    with statecache.Client.connect(address) as client:
        for _ in range(reps):
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
    out = {
        "platform": {"python": platform.python_version(),
                     "cpus_online": os.cpu_count(),
                     "cpus_allowed": sorted(os.sched_getaffinity(0)),
                     "iterations": iterations, "reps": reps},
        "ping": {"p50_us": statistics.median(ping_p50),
                 "p99_us": statistics.median(p[1] for p in pings)},
        "rows": [],
    }
    out["breakdown_256"] = {
        key: statistics.median(p[key] for p in parts) for key in parts[0]}
    for name, ops, kind in ROWS:
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
          "median of %d reps" % (p["python"], p["cpus_online"],
                                 ",".join(map(str, p["cpus_allowed"])),
                                 p["iterations"], p["reps"]))
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statecached", default=os.environ.get(
        "STATECACHED", os.path.join(_HERE, os.pardir, "build", "bin",
                                    "statecached")))
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of the table")
    args = parser.parse_args()
    with Daemon(["--num_slots=%d" % SLOTS, "--model_id=bench",
                 "--lease_ttl=60s", "--metrics_address=127.0.0.1:0"],
                binary=args.statecached) as daemon:
        result = run(daemon.address, args.iterations, args.reps)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

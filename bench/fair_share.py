#!/usr/bin/python3
"""How long one session's heavy legal Steps delay another's begin_pass.

A victim session loops passes of begin_pass (one StepStream message each)
and times every round trip; a neighbour process loops unary Steps that
unindex as many hashes as the daemon lets one Step carry (hashes nobody
filed: the most lock time per byte sent), from one or several threads at
once (several Steps in flight on one session). Each scenario runs against
a fresh daemon:

  alone       the victim by itself (the baseline);
  uncapped    a neighbour sending 2,000,000 hashes a Step (16 MB, the
              message limit), with --max_hashes_per_step raised out of
              the way: what the daemon allowed before the cap;
  capped      a neighbour at the default cap (65536 hashes a Step);
  capped x8 unfair / capped x8
              the same neighbour with 8 Steps in flight, with
              --fair_share=false (whoever takes the lock first goes first)
              and with the default round-robin turns between sessions.

Prints p50 / p99 / max of the victim's begin_pass round trip per scenario
and the ratio of each to the baseline, and the time one neighbour Step's
unindex spends inside the core (the daemon's own operation histogram: the
lock hold that a waiting begin_pass sits behind); --runs repeats the lot
and reports medians. Run from the repository root after building:

    /usr/bin/python3 bench/fair_share.py --runs 3
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
sys.path.insert(0, os.path.join(REPO, "build", "python"))

import grpc  # noqa: E402

from statecache.testing import Daemon  # noqa: E402
from statecache.v1 import statecache_pb2 as pb  # noqa: E402
from statecache.v1 import statecache_pb2_grpc as pb_grpc  # noqa: E402

IDENTITY = pb.Identity(model_id="fair-share", hash_block_size=64)


def attach(channel, name):
    return pb_grpc.StateCacheStub(channel).Attach(
        pb.AttachRequest(identity=IDENTITY, client_name=name)).session_id


def neighbour(address, hashes, stop_path, streams):
    channel = grpc.insecure_channel(address, options=[
        ("grpc.max_send_message_length", 64 << 20)])
    stub = pb_grpc.StateCacheStub(channel)
    session = attach(channel, "neighbour")
    step = pb.StepRequest(session_id=session, operations=[pb.Operation(
        unindex=pb.Unindex(hashes=range(1 << 40, (1 << 40) + hashes)))])
    steps = [0] * streams

    def loop(i):
        while not os.path.exists(stop_path):
            stub.Step(step)
            steps[i] += 1

    threads = [threading.Thread(target=loop, args=(i,))
               for i in range(streams)]
    print("ready", flush=True)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(sum(steps), flush=True)


def percentile(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1,
                             int(p / 100.0 * len(sorted_values)))]


def scenario(binary, seconds, hashes, cap, streams, fair):
    flags = ["--model_id=fair-share", "--hash_block_size=64",
             "--num_slots=64", "--max_message_bytes=%d" % (64 << 20),
             "--max_hashes_per_step=%d" % cap, "--metrics_address=127.0.0.1:0",
             "--fair_share=%s" % ("true" if fair else "false"),
             # The neighbour's few heavy unindexes are the hold measured:
             # time every one, not a sample.
             "--operation_timing_interval=1"]
    with Daemon(flags, binary=binary) as daemon, \
            tempfile.TemporaryDirectory() as tmp:
        stop_path = os.path.join(tmp, "stop")
        other = None
        if hashes:
            other = subprocess.Popen(
                [sys.executable, __file__, "--neighbour", daemon.address,
                 str(hashes), stop_path, str(streams)], stdout=subprocess.PIPE, text=True)
            assert other.stdout.readline().strip() == "ready"
        channel = grpc.insecure_channel(daemon.address)
        session = attach(channel, "victim")
        stream_stub = pb_grpc.StateCacheStub(channel)
        begin = pb.StepRequest(session_id=session, operations=[
            pb.Operation(begin_pass=pb.BeginPass())])
        times = []
        deadline = time.monotonic() + seconds

        def requests():
            while time.monotonic() < deadline:
                sent = time.perf_counter()
                yield begin
                times.append(time.perf_counter() - sent)

        for reply in stream_stub.StepStream(requests()):
            assert not reply.error_code, reply.error_message
            # The generator measures from send to the next pull, which is
            # after this reply: close enough for a millisecond-scale delay.
        neighbour_steps = 0
        if other is not None:
            open(stop_path, "w").close()
            neighbour_steps = int(other.stdout.readline())
            other.wait()
        times.sort()
        port = re.search(r"metrics on http://\S+:(\d+)/", daemon.log())[1]
        text = urllib.request.urlopen(
            "http://127.0.0.1:%s/metrics" % port).read().decode()
        sums = counts = 0.0
        for line in text.splitlines():
            if "unindex" not in line:
                continue
            if line.startswith("statecache_step_operation_duration_seconds_sum"):
                sums += float(line.split()[-1])
            if line.startswith(
                    "statecache_step_operation_duration_seconds_count"):
                counts += float(line.split()[-1])
        return {"hold": sums / counts if counts else 0.0, "p50": percentile(times, 50), "p99": percentile(times, 99),
                "max": times[-1], "passes": len(times),
                "neighbour_steps": neighbour_steps}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--neighbour":
        neighbour(sys.argv[2], int(sys.argv[3]), sys.argv[4],
                  int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--binary",
                        default=os.path.join(REPO, "build/bin/statecached"))
    args = parser.parse_args()
    # name: (neighbour's hashes a Step, --max_hashes_per_step, Steps in
    # flight, --fair_share)
    scenarios = {"alone": (0, 65536, 1, True),
                 "uncapped": (2000000, 1 << 40, 1, True),
                 "capped": (65536, 65536, 1, True),
                 "capped x8 unfair": (65536, 65536, 8, False),
                 "capped x8": (65536, 65536, 8, True)}
    results = {name: [] for name in scenarios}
    for _ in range(args.runs):
        for name, params in scenarios.items():
            results[name].append(scenario(args.binary, args.seconds, *params))
    base = {k: statistics.median(r[k] for r in results["alone"])
            for k in ("p50", "p99", "max")}
    print("victim begin_pass round trip, medians of %d runs of %g s"
          % (args.runs, args.seconds))
    print("%-17s %9s %9s %9s %7s %7s %7s %9s %11s" % (
        "scenario", "p50 ms", "p99 ms", "max ms", "p50 x", "p99 x",
        "max x", "nb steps", "nb hold ms"))
    for name in scenarios:
        m = {k: statistics.median(r[k] for r in results[name])
             for k in ("p50", "p99", "max", "neighbour_steps", "hold")}
        print("%-17s %9.3f %9.3f %9.3f %7.1f %7.1f %7.1f %9d %11.3f" % (
            name, m["p50"] * 1e3, m["p99"] * 1e3, m["max"] * 1e3,
            m["p50"] / base["p50"], m["p99"] / base["p99"],
            m["max"] / base["max"], m["neighbour_steps"], m["hold"] * 1e3))


if __name__ == "__main__":
    main()

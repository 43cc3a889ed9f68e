#!/usr/bin/env python3
"""Times the reference pool's calls alone on a trace, for bench/pool_bench.

    reference_timing.py --reference-dir D TRACE.jsonl [--reps N] [--paced]

Arguments are converted (JSON parsed, seq objects built) before the clock
starts and `dump` lines are skipped, so what is timed is the pool calls and
nothing else -- the same thing statecache-replay --timing measures. Prints one
line per repetition: `calls=N ns=T`.

With --paced, each repetition waits for a line on stdin and there are as many
as lines arrive (--reps is ignored): pool_bench interleaves these with its
own repetitions, so the two sides are timed minutes apart at most, not in two
blocks a machine's drift can fall between.
"""
import argparse
import json
import os
import sys
import time

sys.dont_write_bytecode = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--reference-dir", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--paced", action="store_true",
                    help="one repetition per line read from stdin")
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.reference_dir))
    import run_trace  # noqa: E402  (the reference's own runner)

    with open(args.trace, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    reps = iter(sys.stdin.readline, "") if args.paced else range(args.reps)
    for _ in reps:
        runner = run_trace.TraceRunner()
        runner.run_obj(lines[0])  # config
        pool = runner.pool
        calls = []
        for obj in lines[1:]:
            op = obj["op"]
            if op == "dump":
                continue
            params, call = run_trace.OPS[op]
            # Seqs are rebuilt per call by the runner; build them up front
            # (checkpoint mutates its seq, so each call gets its own).
            converted = [conv(obj[name], name) for name, conv in params]
            calls.append((call, converted))
        start = time.perf_counter_ns()
        for call, converted in calls:
            call(pool, *converted)
        elapsed = time.perf_counter_ns() - start
        print(f"calls={len(calls)} ns={elapsed}", flush=True)


if __name__ == "__main__":
    main()

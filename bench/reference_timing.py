#!/usr/bin/env python3
"""Times the reference pool's calls alone on a trace, for bench/pool_bench
and bench/reference_bench.

    reference_timing.py --reference-dir D TRACE.jsonl [--reps N] [--paced]
                        [--passes PASSES.json]

Arguments are converted (JSON parsed, seq objects built) before the clock
starts and `dump` lines are skipped, so what is timed is the pool calls and
nothing else -- the same thing statecache-replay --timing measures. Prints one
line per repetition: `calls=N ns=T`.

With --paced, each repetition waits for a line on stdin and there are as many
as lines arrive (--reps is ignored): pool_bench interleaves these with its
own repetitions, so the two sides are timed minutes apart at most, not in two
blocks a machine's drift can fall between.

With --passes (reference_bench), the trace is a scheduler's passes one after
another and PASSES.json says where they start and end:
`{"untimed_calls": W, "pass_calls": [c1, c2, ...]}` -- the first W calls
bring the pool to its steady state, untimed, then each pass's calls are
timed as one (a pass of c1 calls, then one of c2, ...). A repetition then
prints `calls=N ns=T passes=K p50_ns=P p99_ns=Q`: the timed passes' calls
and nanoseconds together, and the median and 99th percentile of one pass.
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
    ap.add_argument("--passes", metavar="PASSES.json",
                    help="time pass by pass: untimed_calls, then pass_calls")
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.reference_dir))
    import run_trace  # noqa: E402  (the reference's own runner)

    with open(args.trace, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    passes = None
    if args.passes:
        with open(args.passes, encoding="utf-8") as f:
            passes = json.load(f)
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
        if passes is not None:
            time_passes(pool, calls, passes)
            continue
        start = time.perf_counter_ns()
        for call, converted in calls:
            call(pool, *converted)
        elapsed = time.perf_counter_ns() - start
        print(f"calls={len(calls)} ns={elapsed}", flush=True)


def time_passes(pool, calls, passes):
    """One repetition of --passes: the untimed calls, then pass by pass."""
    untimed = passes["untimed_calls"]
    sizes = passes["pass_calls"]
    if untimed + sum(sizes) != len(calls):
        sys.exit(f"reference_timing.py: {untimed} untimed and {sum(sizes)} "
                 f"pass calls, but the trace has {len(calls)}")
    for call, converted in calls[:untimed]:
        call(pool, *converted)
    ns = []
    at = untimed
    for size in sizes:
        block = calls[at:at + size]
        at += size
        start = time.perf_counter_ns()
        for call, converted in block:
            call(pool, *converted)
        ns.append(time.perf_counter_ns() - start)
    total = sum(ns)
    ns.sort()
    print(f"calls={sum(sizes)} ns={total} passes={len(ns)} "
          f"p50_ns={ns[len(ns) // 2]} p99_ns={ns[len(ns) * 99 // 100]}",
          flush=True)


if __name__ == "__main__":
    main()

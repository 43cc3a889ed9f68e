#!/usr/bin/env python3
"""Parity on traces nobody has seen before: generate a few traces with a
fresh seed and randomly drawn configurations, run them on the reference
(run_trace.py) and on the replay tool, and compare.

    run_fresh.py --replay BIN [--reference-dir D] [--seed N] [--count K]
                 [--calls N] [--keep]
    run_fresh.py --replay BIN [--long-config NAME] [--long-slots N]
                 [--calls N] ...

With --long-config or --long-slots, one long trace (no dumps) instead: of
gen_traces.py's configuration NAME (default: its long one), on a pool of N
slots if given. From 16385 slots up (64k index buckets) the pool's index
holds new entries' writes back, which the small pools of the random
configurations never reach; the long_h200 configuration runs a deployment's
batch (256 requests, 2048 slots), where resizes relocate hundreds of live
slots.

The seed is --seed, else $STATECACHE_PARITY_SEED, else derived from the
current time; it is printed first, so a failure can be reproduced with
--seed. On a failure the traces are kept (the directory is printed).
Standard library only.
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare  # noqa: E402
import gen_traces  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replay", required=True, help="the statecache-replay binary")
    ap.add_argument("--reference-dir", default=gen_traces.DEFAULT_REFERENCE_DIR)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--count", type=int, default=5, help="traces (default 5)")
    ap.add_argument("--calls", type=int, default=2500, help="calls per trace")
    ap.add_argument("--keep", action="store_true", help="keep the traces")
    ap.add_argument("--long-slots", type=int, metavar="N",
                    help="one long trace on a pool of N slots instead")
    ap.add_argument("--long-config", metavar="NAME",
                    help="one long trace of this gen_traces.py configuration "
                         "instead")
    args = ap.parse_args(argv)

    seed = args.seed
    if seed is None and os.environ.get("STATECACHE_PARITY_SEED"):
        seed = int(os.environ["STATECACHE_PARITY_SEED"])
    if seed is None:
        seed = int(time.time() * 1000) % 1_000_000_007
    print(f"parity.fresh: seed {seed} (rerun with --seed {seed} or "
          f"STATECACHE_PARITY_SEED={seed})", flush=True)

    out = tempfile.mkdtemp(prefix="statecache-parity-fresh-")
    # Expected files come from run_trace.py itself (a separate process), and
    # the generator checks they match what it saw in-process.
    try:
        if args.long_slots or args.long_config:
            name = args.long_config or "long"
            if args.long_slots:
                name += f"_{args.long_slots}_slots"
            long_trace = os.path.join(out, f"{name}.jsonl")
            gen_args = ["--long", long_trace, "--seed", str(seed),
                        "--calls", str(args.calls),
                        "--reference-dir", args.reference_dir, "-q"]
            if args.long_slots:
                gen_args += ["--long-slots", str(args.long_slots)]
            if args.long_config:
                gen_args += ["--long-config", args.long_config]
            rc = gen_traces.main(gen_args)
            if not rc:
                rc = subprocess.call([
                    sys.executable,
                    os.path.join(args.reference_dir, "run_trace.py"), long_trace,
                    "-o", long_trace[: -len(".jsonl")] + ".expected.jsonl",
                ])
        else:
            rc = gen_traces.main([
                "--out-dir", out, "--random", str(args.count), "--seed", str(seed),
                "--calls", str(args.calls), "--reference-dir", args.reference_dir,
                "-q",
            ])
    except Exception:  # a generator bug, or the reference refused a call
        traceback.print_exc()
        rc = 1
    if rc:
        print(f"parity.fresh: generator failed (seed {seed}); traces in {out}")
        return 1
    failed = 0
    traces = sorted(t for t in glob.glob(os.path.join(out, "*.jsonl"))
                    if not t.endswith(".expected.jsonl"))
    for trace in traces:
        expected = trace[: -len(".jsonl")] + ".expected.jsonl"
        ok, report = compare.compare(args.replay, trace, expected)
        print(report, flush=True)
        failed += not ok
    if failed or args.keep:
        print(f"parity.fresh: traces kept in {out}")
    else:
        shutil.rmtree(out, ignore_errors=True)
    if failed:
        print(f"parity.fresh: {failed} of {len(traces)} trace(s) differ (seed {seed})")
        return 1
    print(f"parity.fresh: {len(traces)} trace(s) identical (seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

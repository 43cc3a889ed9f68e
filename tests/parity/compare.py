#!/usr/bin/env python3
"""Run the replay tool on a trace and compare its output with the expected
results, line by line.

    compare.py REPLAY TRACE EXPECTED [--timeout SECONDS]

REPLAY reads TRACE on stdin and must print exactly the lines of EXPECTED
(the reference's `run_trace.py TRACE` output). On a mismatch this prints the
first differing line number, the trace line that produced it, both result
lines (for JSON objects, also which keys differ) and how many lines differ in
all, and exits 1. Standard library only.
"""

import argparse
import json
import os
import subprocess
import sys

MAX_SHOWN = 800  # characters of a long line shown around the first difference


def _clip(line, at):
    if len(line) <= MAX_SHOWN:
        return line
    lo = max(0, at - MAX_SHOWN // 2)
    hi = min(len(line), lo + MAX_SHOWN)
    return ("..." if lo else "") + line[lo:hi] + ("..." if hi < len(line) else "")


def _first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _key_diff(expected, actual):
    """For two JSON objects (or {"ret": object}), the keys whose values differ."""
    try:
        e, a = json.loads(expected), json.loads(actual)
    except ValueError:
        return None
    path = ""
    if isinstance(e, dict) and isinstance(a, dict) and set(e) == set(a) == {"ret"}:
        e, a, path = e["ret"], a["ret"], "ret."
    if not (isinstance(e, dict) and isinstance(a, dict)):
        return None
    out = []
    for k in sorted(set(e) | set(a)):
        if k not in a:
            out.append(f"{path}{k} (missing)")
        elif k not in e:
            out.append(f"{path}{k} (unexpected)")
        elif e[k] != a[k]:
            ev, av = json.dumps(e[k]), json.dumps(a[k])
            if len(ev) + len(av) < 300:
                out.append(f"{path}{k}: expected {ev}, got {av}")
            else:
                out.append(f"{path}{k}")
    return out


def compare(replay, trace, expected, timeout=600):
    """(ok, report) for one trace."""
    for path in (trace, expected):
        if not os.path.exists(path):
            return False, f"parity: missing file {path}"
    with open(trace, encoding="utf-8") as f:
        trace_lines = f.read().splitlines()
    with open(expected, encoding="utf-8") as f:
        want = f.read().splitlines()
    try:
        with open(trace, "rb") as stdin:
            proc = subprocess.run([replay], stdin=stdin, capture_output=True,
                                  timeout=timeout)
    except FileNotFoundError:
        return False, f"parity: cannot run {replay}"
    except subprocess.TimeoutExpired:
        return False, f"parity: {replay} < {trace} ran past {timeout}s"
    got = proc.stdout.decode("utf-8", errors="replace").splitlines()
    name = os.path.basename(trace)
    notes = []
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", errors="replace").strip().splitlines()
        notes.append(f"  replay exited with status {proc.returncode}")
        notes.extend("  stderr: " + line for line in err[-10:])
    ndiff = sum(1 for x, y in zip(want, got) if x != y) + abs(len(want) - len(got))
    if ndiff == 0 and proc.returncode == 0:
        return True, f"parity: {name}: {len(want)} lines identical"
    first = next((i for i, (x, y) in enumerate(zip(want, got)) if x != y),
                 min(len(want), len(got)))
    lines = [
        f"parity: MISMATCH in {name} at line {first + 1} "
        f"({ndiff} differing line(s); expected {len(want)} lines, got {len(got)})"
    ]
    if first < len(want) or first < len(got):
        tl = trace_lines[first] if first < len(trace_lines) else "<none>"
        exp = want[first] if first < len(want) else "<no line>"
        act = got[first] if first < len(got) else "<no line>"
        at = _first_diff(exp, act)
        for back in range(max(0, first - 3), first):
            lines.append(f"  trace {back + 1:>6}: {_clip(trace_lines[back], 0)}"
                         if back < len(trace_lines) else "")
        lines.append(f"  trace {first + 1:>6}: {_clip(tl, 0)}")
        lines.append(f"  expected    : {_clip(exp, at)}")
        lines.append(f"  actual      : {_clip(act, at)}")
        lines.append(f"  first difference at character {at + 1}")
        keys = _key_diff(exp, act)
        if keys:
            lines.append("  differing keys: " + "; ".join(keys))
    lines.extend(notes)
    lines.append(f"  reproduce: {replay} < {trace} | diff - {expected} | head")
    return False, "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("replay")
    ap.add_argument("trace")
    ap.add_argument("expected")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args(argv)
    ok, report = compare(args.replay, args.trace, args.expected, args.timeout)
    print(report)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

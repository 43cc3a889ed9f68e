#!/usr/bin/python3
"""Runs a benchmark's smoke configuration and judges it by more than a regex.

    smoke_check.py [--expect REGEX]... [--count REGEX=N]... [--reject REGEX]...
                   -- COMMAND [ARG...]

Passes only when COMMAND exits 0, its output (stdout and stderr together)
matches every --expect, matches each --count REGEX at least N times, and
matches no --reject. ctest's PASS_REGULAR_EXPRESSION alone ignores the exit
status, so a benchmark that printed its last heading and then failed used
to pass. The output is passed through, and the first unmet condition is
named on the last line.
"""

import argparse
import re
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expect", action="append", default=[])
    parser.add_argument("--count", action="append", default=[],
                        metavar="REGEX=N")
    parser.add_argument("--reject", action="append", default=[])
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (after --)")
    run = subprocess.run(command, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, errors="replace")
    sys.stdout.write(run.stdout)
    problems = []
    if run.returncode != 0:
        problems.append(f"exit status {run.returncode}")
    for regex in args.expect:
        if not re.search(regex, run.stdout, re.M):
            problems.append(f"no line matches {regex!r}")
    for spec in args.count:
        regex, _, n = spec.rpartition("=")
        found = len(re.findall(regex, run.stdout, re.M))
        if found < int(n):
            problems.append(f"{regex!r} matched {found} times, want >= {n}")
    for regex in args.reject:
        match = re.search(regex, run.stdout, re.M)
        if match:
            problems.append(f"output has {match.group(0)!r} ({regex!r})")
    if problems:
        print("smoke_check: FAILED: " + "; ".join(problems))
        return 1
    print("smoke_check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Runs every stage of the test suite and ends with a summary.

`make test` (the README's test command, through ./test.sh) runs this. Each
stage is a make target, run in order whether or not an earlier one failed,
its output shown as it comes and kept in BUILD/suite-logs/STAGE.log:

  main suite   make test-main   the main build's ctest suite (every label:
                                unit, parity, service, grpc, integration,
                                device, gpu, metrics, ctl, deploy, package,
                                bench, python, ...)
  sanitizers   make test-asan   the core, replay tool, daemon core and device
                                layer under ASan+UBSan
  tsan         make test-tsan   the daemon core and its concurrent stress
                                under ThreadSanitizer (any report fails)
  pool_fuzz    make test-fuzz-pool   libFuzzer, FUZZ_SECONDS each
  step_fuzz    make test-fuzz-step
  saved_state_fuzz  make test-fuzz-saved-state

Then one table a person reads at a glance: each stage's count and result
(the main suite broken down by ctest label), what was not run and why
(tests ctest skipped, with the reason they printed; what configure left out,
from BUILD/not-run.txt), and a closing line `N passed, N failed[, N
skipped]`. Exit status 0 when every stage passed, 1 otherwise.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree


# Tests cmake/NotRun.cmake registers for what configure left out.
NOT_RUN_PREFIX = "not run: "


class Stage:
    """One make target and what it produced."""

    def __init__(self, name, target, build_dir=None):
        self.name = name
        self.target = target
        # Where ctest wrote junit.xml (ctest stages only).
        self.build_dir = build_dir
        self.returncode = None
        self.seconds = 0.0
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self.runs = None  # fuzz stages: libFuzzer's executed units
        self.by_label = {}  # label -> Counter(passed=, failed=, skipped=)
        self.skips = []  # (test name, reason)
        self.failures = []  # test names
        self.note = ""


def run_stage(stage, make, make_vars, log_dir):
    """Runs the stage's make target, streaming and logging its output."""
    if stage.build_dir:
        junit = os.path.join(stage.build_dir, "junit.xml")
        if os.path.exists(junit):
            os.remove(junit)
    log_path = os.path.join(log_dir, stage.target + ".log")
    start = time.monotonic()
    with open(log_path, "w", encoding="utf-8", errors="replace") as log:
        process = subprocess.Popen(
            [make, "-s", stage.target] + make_vars,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for raw in process.stdout:
            line = raw.decode("utf-8", errors="replace")
            sys.stdout.write(line)
            sys.stdout.flush()
            log.write(line)
        stage.returncode = process.wait()
    stage.seconds = time.monotonic() - start
    return log_path


def ctest_labels(build_dir):
    """Test name -> its labels, from ctest's own listing of the build."""
    try:
        listing = subprocess.run(
            ["ctest", "--show-only=json-v1"], cwd=build_dir,
            capture_output=True, check=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    labels = {}
    for test in json.loads(listing).get("tests", []):
        names = []
        for prop in test.get("properties", []):
            if prop.get("name") == "LABELS":
                names = list(prop.get("value", []))
        labels[test["name"]] = names
    return labels


def skip_reason(output):
    """The reason a skipped test printed, as one short line."""
    lines = [line.strip() for line in output.splitlines()]
    for i, line in enumerate(lines):
        # GoogleTest: "file.cc:12: Skipped" then the GTEST_SKIP() message.
        if line.endswith(": Skipped") and i + 1 < len(lines) and lines[i + 1]:
            return lines[i + 1]
        match = re.search(r"\bskip(?:ped|ping)?\b[:\s-]+(.+)", line, re.I)
        if match and "[  SKIPPED ]" not in line:
            return match.group(1)
    return "skipped (no reason printed)"


def read_ctest(stage):
    """Fills the stage's counts from BUILD/junit.xml; False if there is none."""
    junit = os.path.join(stage.build_dir, "junit.xml")
    if not os.path.exists(junit):
        return False
    labels = ctest_labels(stage.build_dir)
    root = ElementTree.parse(junit).getroot()
    for case in root.iter("testcase"):
        name = case.get("name")
        status = case.get("status", "run")
        output = "".join(case.findtext("system-out") or "")
        if case.find("failure") is not None or status == "fail":
            outcome = "failed"
            stage.failures.append(name)
        elif case.find("skipped") is not None or status in ("notrun",
                                                            "disabled"):
            outcome = "skipped"
            stage.skips.append((name, skip_reason(output)))
        else:
            outcome = "passed"
        setattr(stage, outcome, getattr(stage, outcome) + 1)
        for label in labels.get(name) or ["(no label)"]:
            stage.by_label.setdefault(label, collections.Counter())[outcome] += 1
    return True


def read_fuzz(stage, log_path):
    """libFuzzer's executed units, from its final stats."""
    with open(log_path, encoding="utf-8", errors="replace") as log:
        text = log.read()
    match = None
    for match in re.finditer(r"stat::number_of_executed_units:\s*(\d+)", text):
        pass
    if match:
        stage.runs = int(match.group(1))
    if stage.returncode == 0:
        stage.passed = 1
    else:
        stage.failed = 1
        if stage.runs is None:
            stage.note = "did not start (build failed?)"


def name_group(tests):
    """`prefix.*` when the tests share a dotted prefix, else their names."""
    prefix = os.path.commonprefix(tests)
    if len(tests) > 1 and "." in prefix:
        return prefix[:prefix.rindex(".") + 1] + "*"
    return ", ".join(tests[:3]) + (
        f" and {len(tests) - 3} more" if len(tests) > 3 else "")


def duration(seconds):
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def print_summary(stages, not_run_file):
    out = sys.stdout
    out.write("\n" + "=" * 72 + "\nstatecache test summary\n\n")
    out.write(f"  {'stage':<26}{'count':>12}{'passed':>8}{'failed':>8}"
              f"{'skipped':>9}{'time':>8}  result\n")
    for stage in stages:
        result = "ok" if stage.returncode == 0 else "FAILED"
        if stage.build_dir is None:
            count = f"{stage.runs} runs" if stage.runs is not None else "-"
            out.write(f"  {stage.name:<26}{count:>12}{'':>8}{'':>8}{'':>9}"
                      f"{duration(stage.seconds):>8}  {result}"
                      f"{'  ' + stage.note if stage.note else ''}\n")
            continue
        total = stage.passed + stage.failed + stage.skipped
        if total == 0 and stage.returncode != 0:
            out.write(f"  {stage.name:<26}{'-':>12}{'':>8}{'':>8}{'':>9}"
                      f"{duration(stage.seconds):>8}  FAILED  (no tests ran:"
                      f" the build or configure failed; see its log)\n")
            continue
        out.write(f"  {stage.name:<26}{total:>12}{stage.passed:>8}"
                  f"{stage.failed:>8}{stage.skipped:>9}"
                  f"{duration(stage.seconds):>8}  {result}\n")
        for label in sorted(stage.by_label):
            counts = stage.by_label[label]
            n = sum(counts.values())
            out.write(f"    {label:<24}{n:>12}{counts['passed']:>8}"
                      f"{counts['failed']:>8}{counts['skipped']:>9}\n")
    failures = [(s.name, t) for s in stages for t in s.failures]
    if failures:
        out.write("\nfailed:\n")
        for stage_name, test in failures:
            out.write(f"  {test}  ({stage_name})\n")
    notes = []
    for stage in stages:
        grouped = collections.OrderedDict()
        for test, reason in stage.skips:
            grouped.setdefault(reason, []).append(test)
        for reason, tests in grouped.items():
            if all(t.startswith(NOT_RUN_PREFIX) for t in tests):
                # Configure's record: the test's name says what and why.
                notes += [t[len(NOT_RUN_PREFIX):] for t in tests]
                continue
            notes.append(f"{name_group(tests)} ({len(tests)} in"
                         f" {stage.name}): {reason}")
    # What configure left out is also a not_run test where tests were
    # registered (its skip, above); the file covers a build without them.
    registered = any("not_run" in s.by_label for s in stages)
    if os.path.exists(not_run_file) and not registered:
        with open(not_run_file, encoding="utf-8") as f:
            notes += ["not built: " + line.strip() for line in f
                      if line.strip()]
    if notes:
        out.write("\nnot run:\n")
        for note in notes:
            out.write(f"  {note}\n")
    passed = sum(s.passed for s in stages)
    failed = sum(s.failed for s in stages)
    failed += sum(1 for s in stages
                  if s.returncode != 0 and s.failed == 0)
    skipped = sum(s.skipped for s in stages)
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    out.write("\n" + line + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--make", default="make")
    parser.add_argument("--build", default="build")
    parser.add_argument("--asan-build", default="build-asan")
    parser.add_argument("--tsan-build", default="build-tsan")
    parser.add_argument("--fuzz-build", default="build-fuzz")
    parser.add_argument("--fuzz-seconds", default="45")
    parser.add_argument("--stages",
                        default="main,asan,tsan,pool_fuzz,step_fuzz,"
                        "saved_state_fuzz",
                        help="comma-separated subset, in this order")
    args = parser.parse_args()

    make_vars = [f"BUILD={args.build}", f"ASAN_BUILD={args.asan_build}",
                 f"TSAN_BUILD={args.tsan_build}",
                 f"FUZZ_BUILD={args.fuzz_build}",
                 f"FUZZ_SECONDS={args.fuzz_seconds}"]
    all_stages = {
        "main": Stage("main suite", "test-main", args.build),
        "asan": Stage("sanitizers (ASan+UBSan)", "test-asan", args.asan_build),
        "tsan": Stage("ThreadSanitizer", "test-tsan", args.tsan_build),
        "pool_fuzz": Stage(f"pool_fuzz ({args.fuzz_seconds} s)",
                           "test-fuzz-pool"),
        "step_fuzz": Stage(f"step_fuzz ({args.fuzz_seconds} s)",
                           "test-fuzz-step"),
        "saved_state_fuzz": Stage(
            f"saved_state_fuzz ({args.fuzz_seconds} s)",
            "test-fuzz-saved-state"),
    }
    stages = [all_stages[key] for key in args.stages.split(",")]
    log_dir = os.path.join(args.build, "suite-logs")
    os.makedirs(log_dir, exist_ok=True)
    for stage in stages:
        log_path = run_stage(stage, args.make, make_vars, log_dir)
        if stage.build_dir:
            read_ctest(stage)
        else:
            read_fuzz(stage, log_path)
    print_summary(stages, os.path.join(args.build, "not-run.txt"))
    return 0 if all(s.returncode == 0 for s in stages) else 1


if __name__ == "__main__":
    sys.exit(main())

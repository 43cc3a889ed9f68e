#!/usr/bin/python3
"""Runs every stage of the test suite and ends with a summary.

./test.sh (the README's test command) runs this, after .ci/install-deps.
Each stage is one workflow preset of CMakePresets.json, which says what it
configures, builds and tests:

  cmake --workflow --preset main   the main build's ctest suite (build/; every
                                   label: unit, parity, service, grpc,
                                   integration, device, gpu, metrics, ctl,
                                   deploy, package, bench, python, ...)
  cmake --workflow --preset asan   the core, replay tool, daemon core and
                                   device layer under ASan+UBSan (build-asan/)
  cmake --workflow --preset tsan   the daemon core and its concurrent stress
                                   under ThreadSanitizer (build-tsan/)
  cmake --workflow --preset fuzz   pool_fuzz, step_fuzz, saved_state_fuzz,
                                   step_channel_fuzz, FUZZ_SECONDS each
                                   (build-fuzz/)

run in order whether or not an earlier one failed, with --jobs as
CMAKE_BUILD_PARALLEL_LEVEL and CTEST_PARALLEL_LEVEL (the presets leave jobs
to them) and --fuzz-seconds as FUZZ_SECONDS; each stage's output is shown as
it comes and kept in build/suite-logs/STAGE.log. Every test preset writes
junit.xml into its build directory (the binaryDir of the configure preset of
the same name), which this reads.

Then one table a person reads at a glance: each stage's count and result
(broken down by ctest label; the fuzzers with libFuzzer's executed units),
what was not run and why (tests ctest skipped, with the reason they printed;
what configure left out, from build/not-run.txt), and a closing line `N
passed, N failed[, N skipped]`. Exit status 0 when every stage passed, 1
otherwise.
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

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESETS = os.path.join(SOURCE_DIR, "CMakePresets.json")
STAGES = ("main", "asan", "tsan", "fuzz")
TITLES = {"main": "main suite", "asan": "sanitizers (ASan+UBSan)",
          "tsan": "ThreadSanitizer", "fuzz": "fuzzers ({seconds} s each)"}

# Tests cmake/NotRun.cmake registers for what configure left out.
NOT_RUN_PREFIX = "not run: "


class Stage:
    """One workflow preset and what it produced."""

    def __init__(self, preset, title, build_dir):
        self.preset = preset
        self.name = title
        self.build_dir = build_dir  # the preset's binaryDir: junit.xml
        self.returncode = None
        self.seconds = 0.0
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self.runs = {}  # test -> libFuzzer's executed units, if printed
        self.by_label = {}  # label -> Counter(passed=, failed=, skipped=)
        self.skips = []  # (test name, reason)
        self.failures = []  # test names

    def command(self):
        return ["cmake", "--workflow", "--preset", self.preset]


def binary_dir(name):
    """The binaryDir of configure preset `name` (through its `inherits`)."""
    with open(PRESETS, encoding="utf-8") as f:
        presets = {p["name"]: p for p in json.load(f)["configurePresets"]}
    preset = presets[name]
    while "binaryDir" not in preset:
        parents = preset.get("inherits", [])
        preset = presets[parents if isinstance(parents, str) else parents[0]]
    return (preset["binaryDir"].replace("${sourceDir}", SOURCE_DIR)
            .replace("${presetName}", name))


def run_stage(stage, env, log_dir):
    """Runs the stage's workflow, streaming and logging its output."""
    junit = os.path.join(stage.build_dir, "junit.xml")
    if os.path.exists(junit):
        os.remove(junit)
    log_path = os.path.join(log_dir, stage.preset + ".log")
    start = time.monotonic()
    with open(log_path, "w", encoding="utf-8", errors="replace") as log:
        process = subprocess.Popen(
            stage.command(), cwd=SOURCE_DIR, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for raw in process.stdout:
            line = raw.decode("utf-8", errors="replace")
            sys.stdout.write(line)
            sys.stdout.flush()
            log.write(line)
        stage.returncode = process.wait()
    stage.seconds = time.monotonic() - start


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
        runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", output)
        if runs:
            stage.runs[name] = int(runs[-1])
        setattr(stage, outcome, getattr(stage, outcome) + 1)
        for label in labels.get(name) or ["(no label)"]:
            stage.by_label.setdefault(label, collections.Counter())[outcome] += 1
    return True


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
        total = stage.passed + stage.failed + stage.skipped
        if total == 0 and stage.returncode != 0:
            out.write(f"  {stage.name:<26}{'-':>12}{'':>8}{'':>8}{'':>9}"
                      f"{duration(stage.seconds):>8}  FAILED  (no tests ran:"
                      f" the build or configure failed; see its log)\n")
            continue
        out.write(f"  {stage.name:<26}{total:>12}{stage.passed:>8}"
                  f"{stage.failed:>8}{stage.skipped:>9}"
                  f"{duration(stage.seconds):>8}  {result}\n")
        if len(stage.by_label) > 1:
            for label in sorted(stage.by_label):
                counts = stage.by_label[label]
                n = sum(counts.values())
                out.write(f"    {label:<24}{n:>12}{counts['passed']:>8}"
                          f"{counts['failed']:>8}{counts['skipped']:>9}\n")
        for test, runs in sorted(stage.runs.items()):
            out.write(f"    {test:<24}{f'{runs} runs':>12}\n")
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
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Each stage is `cmake --workflow --preset STAGE`; "
        "CMakePresets.json says what it configures, builds and tests.")
    parser.add_argument(
        "--jobs", type=int,
        default=os.environ.get("JOBS") or str(len(os.sched_getaffinity(0))),
        help="parallel build and test jobs (default: $JOBS, else the CPUs)")
    parser.add_argument(
        "--fuzz-seconds", type=int,
        default=os.environ.get("FUZZ_SECONDS") or "45",
        help="seconds each fuzzer runs (default: $FUZZ_SECONDS, else 45)")
    parser.add_argument(
        "--stages", default=",".join(STAGES),
        help="comma-separated, run in the order given (default: %(default)s)")
    parser.add_argument(
        "--dry-run", action="store_true",
        help="print each stage's command and environment; run nothing")
    args = parser.parse_args()
    keys = args.stages.split(",")
    unknown = [key for key in keys if key not in STAGES]
    if unknown or args.jobs < 1 or args.fuzz_seconds < 1:
        parser.error(f"unknown stage {', '.join(unknown)}" if unknown else
                     "--jobs and --fuzz-seconds must be positive")

    settings = {"CMAKE_BUILD_PARALLEL_LEVEL": str(args.jobs),
                "CTEST_PARALLEL_LEVEL": str(args.jobs),
                "FUZZ_SECONDS": str(args.fuzz_seconds)}
    stages = [Stage(key, TITLES[key].format(seconds=args.fuzz_seconds),
                    binary_dir(key)) for key in keys]
    if args.dry_run:
        prefix = " ".join(f"{k}={v}" for k, v in settings.items())
        for stage in stages:
            print(f"{stage.name}: {prefix} {' '.join(stage.command())}"
                  f"  (junit: {os.path.join(stage.build_dir, 'junit.xml')})")
        return 0
    env = dict(os.environ, **settings)
    main_dir = binary_dir("main")
    log_dir = os.path.join(main_dir, "suite-logs")
    os.makedirs(log_dir, exist_ok=True)
    for stage in stages:
        run_stage(stage, env, log_dir)
        read_ctest(stage)
    print_summary(stages, os.path.join(main_dir, "not-run.txt"))
    return 0 if all(s.returncode == 0 for s in stages) else 1


if __name__ == "__main__":
    sys.exit(main())

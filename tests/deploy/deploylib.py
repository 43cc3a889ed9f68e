"""Helpers shared by the deploy/ checks (tests/deploy/check_*.py).

Nothing here replaces the real tools (promtool, yamllint, kubectl,
systemd-analyze); it adds what they cannot know: which metric names and
labels statecached exports, which flags it defines, and that the files agree
with each other.
"""

import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
METRICS_FILE = os.path.join(HERE, "statecache_metrics.txt")

# Labels Prometheus or relabeling adds to every statecache series.
SCRAPE_LABELS = {"instance", "job", "gpu", "node", "pod", "namespace",
                 "container", "service", "endpoint"}

# Flags the deploy files pass that the daemon does not define yet, with the
# issue that adds them. The flags check reports them instead of failing; drop
# an entry once the flag exists (the check then insists on it).
# Flags the deploy files may pass before the daemon defines them (none now).
PENDING_FLAGS = {}


class Failures:
    """Collects problems; `done()` prints them and exits non-zero if any."""

    def __init__(self, name):
        self.name = name
        self.problems = []
        self.notes = []

    def add(self, where, message):
        self.problems.append("%s: %s" % (where, message))

    def note(self, message):
        if message not in self.notes:
            self.notes.append(message)

    def check(self, condition, where, message):
        if not condition:
            self.add(where, message)
        return condition

    def done(self, summary=""):
        for note in self.notes:
            print("note: " + note)
        if self.problems:
            for problem in self.problems:
                print("FAIL " + problem)
            print("%s: %d problem(s)" % (self.name, len(self.problems)))
            sys.exit(1)
        print("%s: ok%s" % (self.name, (" (" + summary + ")") if summary else ""))
        sys.exit(0)


def run(cmd, **kwargs):
    """Runs a command, returns (exit status, stdout+stderr)."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, **kwargs)
    return proc.returncode, proc.stdout


# ------------------------------------------------------------------ metrics

def load_metrics(path=METRICS_FILE):
    """{name: (type, {label: set(values) or None})} from statecache_metrics.txt."""
    metrics = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            name, kind, labels = fields[0], fields[1], {}
            for spec in fields[2:]:
                if "=" in spec:
                    label, values = spec.split("=", 1)
                    labels[label] = set(values.split("|"))
                else:
                    labels[spec] = None
            metrics[name] = (kind, labels)
    return metrics


def series_names(metrics):
    """Every series name a scrape can carry, with its label spec."""
    names = {}
    for name, (kind, labels) in metrics.items():
        if kind == "histogram":
            names[name + "_bucket"] = dict(labels, le=None)
            names[name + "_sum"] = labels
            names[name + "_count"] = labels
        else:
            names[name] = labels
    return names


# ------------------------------------------------------------------ PromQL

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<duration>\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|0x[0-9a-fA-F]+)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=,(){}\[\]@])
""", re.VERBOSE)

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring",
            "group_left", "group_right", "bool", "offset", "inf", "nan",
            "start", "end"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar",
                "count", "count_values", "bottomk", "topk", "quantile",
                "limitk", "limit_ratio"}


def tokenize(expr):
    pos = 0
    tokens = []
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if not match:
            raise ValueError("cannot read PromQL at %r" % expr[pos:pos + 20])
        pos = match.end()
        kind = match.lastgroup
        if kind != "ws":
            tokens.append((kind, match.group()))
    return tokens


def _unquote(text):
    if text[0] == "`":
        return text[1:-1]
    return bytes(text[1:-1], "utf-8").decode("unicode_escape")


def promql_references(expr):
    """(selectors, grouping_labels) named by a PromQL expression.

    selectors: [(metric or None, [(label, op, value)])]; grouping_labels: the
    labels of by/without/on/ignoring/group_left/group_right clauses. A light
    reader, not a parser: promtool checks the syntax, this finds the names.
    """
    tokens = tokenize(expr)
    selectors, grouping = [], []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else (None, None)
        if kind == "ident" and text in GROUPING:
            i += 1
            if nxt == ("op", "("):
                i += 1
                while i < len(tokens) and tokens[i] != ("op", ")"):
                    if tokens[i][0] == "ident":
                        grouping.append(tokens[i][1])
                    i += 1
                i += 1
            continue
        if kind == "ident" and text == "offset":
            i += 2
            continue
        if kind == "ident" and text in KEYWORDS:
            i += 1
            continue
        if kind == "op" and text == "[":
            while i < len(tokens) and tokens[i] != ("op", "]"):
                i += 1
            i += 1
            continue
        if kind == "ident" and (nxt == ("op", "(") or text in AGGREGATIONS):
            i += 1  # a function or aggregation
            continue
        if (kind == "ident") or (kind == "op" and text == "{"):
            metric = text if kind == "ident" else None
            matchers = []
            if kind == "ident":
                i += 1
            if i < len(tokens) and tokens[i] == ("op", "{"):
                i += 1
                while i < len(tokens) and tokens[i] != ("op", "}"):
                    if tokens[i][0] == "ident" and i + 2 < len(tokens):
                        label, op, value = tokens[i][1], tokens[i + 1][1], tokens[i + 2]
                        if value[0] == "string":
                            matchers.append((label, op, _unquote(value[1])))
                        i += 3
                    else:
                        i += 1
                i += 1
            if metric is None:
                for label, op, value in matchers:
                    if label == "__name__" and op == "=":
                        metric = value
            selectors.append((metric, matchers))
            continue
        i += 1
    return selectors, grouping


_SIMPLE_ALTERNATION = re.compile(r"^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$")


def check_promql(expr, where, failures, names, extra_names=()):
    """Reports metrics, labels and label values the daemon does not export.

    names: series_names(load_metrics()); extra_names: recording rules, which
    carry the scrape labels and whatever labels their expression kept.
    """
    try:
        selectors, grouping = promql_references(expr)
    except ValueError as error:
        failures.add(where, str(error))
        return set()
    used = set()
    known_labels = set(SCRAPE_LABELS) | {"le", "__name__"}
    for metric, matchers in selectors:
        if metric is None:
            failures.add(where, "selector without a metric name")
            continue
        used.add(metric)
        if metric in extra_names:
            allowed = None  # a recording rule: labels depend on its expression
        elif metric in names:
            allowed = names[metric]
            known_labels |= set(allowed)
        else:
            failures.add(where, "unknown metric %r (not in tests/deploy/statecache_metrics.txt)" % metric)
            continue
        for label, op, value in matchers:
            if label == "__name__" or allowed is None:
                continue
            if label not in allowed and label not in SCRAPE_LABELS:
                failures.add(where, "%s has no label %r" % (metric, label))
                continue
            values = allowed.get(label)
            if values is None or label in SCRAPE_LABELS:
                continue
            if op in ("=", "!="):
                wanted = [value]
            elif _SIMPLE_ALTERNATION.match(value):
                wanted = value.split("|")
            else:
                wanted = []
            for v in wanted:
                if v not in values:
                    failures.add(where, "%s{%s} takes %s, not %r" % (
                        metric, label, "|".join(sorted(values)), v))
    all_labels = set(SCRAPE_LABELS) | {"le"}
    for spec in names.values():
        all_labels |= set(spec)
    for label in grouping:
        if label not in all_labels:
            failures.add(where, "grouping by unknown label %r" % label)
    return used


# ------------------------------------------------------------------ flags

def daemon_flags(repo):
    """Flag names statecached defines (ABSL_FLAG anywhere under daemon/)."""
    flags = set()
    pattern = re.compile(r"ABSL_FLAG\(\s*[^,]+,\s*([A-Za-z0-9_]+)\s*,")
    for root, _, files in os.walk(os.path.join(repo, "daemon")):
        for name in files:
            if name.endswith((".cc", ".h")):
                with open(os.path.join(root, name), errors="replace") as f:
                    flags.update(pattern.findall(f.read()))
    return flags


def check_flags(args, where, failures, defined):
    """Reports --flags in a statecached command line the daemon lacks."""
    for arg in args:
        if not arg.startswith("--"):
            continue
        name = arg[2:].split("=", 1)[0]
        if name.startswith("no") and name[2:] in defined:
            continue
        if name in defined:
            continue
        if name in PENDING_FLAGS:
            failures.note("--%s is passed but not defined by the daemon yet: %s" % (
                name, PENDING_FLAGS[name]))
            continue
        hint = ""
        if name.replace("-", "_") in defined:
            hint = " (Abseil flags are spelled with underscores: --%s)" % name.replace("-", "_")
        failures.add(where, "statecached has no flag --%s%s" % (name, hint))


def parse_duration_seconds(text):
    """'15s', '2m', '1m30s', '500ms', plain seconds -> float seconds."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    total = 0.0
    units = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "sec": 1}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|min|sec|s|m|h)", text)
    if not parts or "".join(a + b for a, b in parts) != text.replace(" ", ""):
        raise ValueError("cannot read duration %r" % text)
    for number, unit in parts:
        total += float(number) * units[unit]
    return total


# ------------------------------------------------------------------ shell

def shellcheck_program():
    """shellcheck, as the deploy checks' CMake passes it ($SHELLCHECK) or on PATH."""
    return shutil.which(os.environ.get("SHELLCHECK") or "shellcheck")


def check_shell(script, shell, where, failures):
    """shellcheck (severity warning and up, as deploy.shellcheck runs it) on
    a script embedded in a deploy file (a RUN line, a container command)."""
    program = shellcheck_program()
    if not failures.check(program, where, "shellcheck not found (.ci/install-deps): the "
                          "embedded %s script cannot be checked" % shell):
        return
    proc = subprocess.run([program, "--shell=" + shell, "--severity=warning", "--format=gcc",
                           "-"], input=script, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    if proc.returncode == 0:
        return
    lines = script.splitlines()
    findings = []
    for line in proc.stdout.splitlines():
        match = re.match(r"^-:(\d+):(\d+): (\w+): (.*)$", line)
        if not match:
            findings.append(line)
            continue
        row, col = int(match.group(1)), int(match.group(2))
        text = lines[row - 1] if row <= len(lines) else ""
        near = text[max(0, col - 25):col + 35].strip()
        findings.append("%s: %s (near %r)" % (match.group(3), match.group(4), near))
    failures.add(where, "shellcheck on the embedded %s script: %s" % (
        shell, "; ".join(findings) or "exit %d" % proc.returncode))

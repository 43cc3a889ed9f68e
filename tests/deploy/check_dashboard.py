#!/usr/bin/python3
"""Checks deploy/grafana/statecache.json, the Grafana dashboard.

    check_dashboard.py DEPLOY_DIR

- valid JSON with the datasource, instance and gpu variables;
- every panel has a unique id, a gridPos and (rows aside) PromQL targets on
  the ${datasource} variable;
- every expression parses: Grafana's variables are replaced ($__rate_interval
  by 5m, $instance and friends by .*) and each expression becomes one
  recording rule of a temporary rules file for `promtool check rules`;
- every metric, label and label value named exists (statecache_metrics.txt),
  and the panels cover checkpoint fates, occupancy, hit ratio, both latency
  histograms, copy throughput, the host tier and warm restart.

promtool is taken from $PROMTOOL, else PATH.
"""

import json
import os
import re
import shutil
import sys
import tempfile

import yaml

import deploylib

GRAFANA_INTERVALS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}

# Metrics the dashboard must chart (fates, occupancy, hit ratio,
# latency percentiles, copy throughput; plus sessions and lease expiries).
REQUIRED_METRICS = {
    "statecache_checkpoints_kept_total", "statecache_checkpoints_dropped_total",
    "statecache_checkpoints_evicted_total", "statecache_checkpoints_orphaned_total",
    "statecache_slots", "statecache_resume_blocks_resumed_total",
    "statecache_resume_blocks_wanted_total",
    "statecache_rpc_duration_seconds_bucket",
    "statecache_step_operation_duration_seconds_bucket",
    "statecache_copy_bytes_total", "statecache_sessions",
    "statecache_lease_expiries_total",
    # The host tier: its thrash signal, room and copy failures.
    "statecache_checkpoints_demoted_total", "statecache_host_tier_evicted_total",
    "statecache_host_tier_bytes", "statecache_host_tier_copy_failures_total",
    # Warm restart: this start's outcome and checkpoints, the index saves.
    "statecache_warm_restart_info", "statecache_warm_restart_checkpoints",
    "statecache_state_dir_last_save_timestamp_seconds",
    "statecache_state_dir_saved_checkpoints", "statecache_state_dir_save_failures_total",
}


def substitute(expr, variables):
    """Replaces Grafana's $var, ${var}, ${var:fmt} and [[var]]."""
    def value(name):
        if name in GRAFANA_INTERVALS:
            return GRAFANA_INTERVALS[name]
        if name not in variables:
            raise KeyError(name)
        return ".*"
    expr = re.sub(r"\$\{(\w+)(?::\w+)?\}", lambda m: value(m.group(1)), expr)
    expr = re.sub(r"\[\[(\w+)\]\]", lambda m: value(m.group(1)), expr)
    return re.sub(r"\$(\w+)", lambda m: value(m.group(1)), expr)


def walk_panels(panels):
    for panel in panels:
        yield panel
        yield from walk_panels(panel.get("panels", []))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    deploy = sys.argv[1]
    path = os.path.join(deploy, "grafana", "statecache.json")
    failures = deploylib.Failures("grafana dashboard")
    try:
        with open(path) as f:
            dash = json.load(f)
    except (OSError, ValueError) as error:
        failures.add(path, "not valid JSON: %s" % error)
        failures.done()

    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    for name in ("datasource", "instance", "gpu"):
        failures.check(name in variables, path, "no $%s variable" % name)
    if "datasource" in variables:
        failures.check(variables["datasource"].get("type") == "datasource"
                       and variables["datasource"].get("query") == "prometheus",
                       path, "$datasource must be a Prometheus datasource variable")
    failures.check(dash.get("uid"), path, "the dashboard needs a uid (stable links)")

    names = deploylib.series_names(deploylib.load_metrics())
    exprs = []  # (where, substituted expression)
    for name, variable in variables.items():
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query or "")
        where = "variable $%s" % name
        if failures.check(match, where, "query must be label_values(SELECTOR, LABEL): %r" % query):
            try:
                exprs.append((where, substitute(match.group(1), variables)))
            except KeyError as error:
                failures.add(where, "unknown variable $%s" % error.args[0])
            failures.check(match.group(2) in deploylib.SCRAPE_LABELS, where,
                           "label %r is not a scrape label" % match.group(2))
        failures.check(variable.get("datasource", {}).get("uid") == "${datasource}", where,
                       "must query ${datasource}")

    ids = set()
    used = set()
    for panel in walk_panels(dash.get("panels", [])):
        where = "panel %r" % panel.get("title")
        failures.check(panel.get("id") not in ids, where, "duplicate id %s" % panel.get("id"))
        ids.add(panel.get("id"))
        grid = panel.get("gridPos", {})
        failures.check(all(k in grid for k in ("x", "y", "w", "h")), where, "incomplete gridPos")
        failures.check(grid.get("x", 0) + grid.get("w", 0) <= 24, where, "wider than the grid")
        if panel.get("type") == "row":
            continue
        failures.check(panel.get("title"), where, "panel without a title")
        failures.check(panel.get("datasource", {}).get("uid") == "${datasource}", where,
                       "must use the ${datasource} variable")
        targets = panel.get("targets", [])
        failures.check(targets, where, "no targets")
        for target in targets:
            expr = target.get("expr", "")
            twhere = "%s target %s" % (where, target.get("refId"))
            if not failures.check(expr.strip(), twhere, "empty expression"):
                continue
            failures.check("$instance" in expr and "$gpu" in expr, twhere,
                           "does not follow the $instance and $gpu variables")
            try:
                exprs.append((twhere, substitute(expr, variables)))
            except KeyError as error:
                failures.add(twhere, "unknown variable $%s" % error.args[0])

    for where, expr in exprs:
        used |= deploylib.check_promql(expr, where, failures, names)
    missing = REQUIRED_METRICS - used
    failures.check(not missing, path, "no panel charts %s" % ", ".join(sorted(missing)))

    # Syntax: promtool parses every expression as a recording rule.
    tool = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if not tool:
        failures.add(path, "promtool not found: install Debian's prometheus package")
        failures.done()
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": "dashboard:expr%d:check" % i, "expr": expr}
        for i, (_, expr) in enumerate(exprs)]}]}
    with tempfile.TemporaryDirectory() as tmp:
        rules_path = os.path.join(tmp, "dashboard.rules.yml")
        with open(rules_path, "w") as f:
            yaml.safe_dump(rules, f)
        status, output = deploylib.run([tool, "check", "rules", rules_path])
    if status != 0:
        for line in output.splitlines():
            match = re.search(r"group \"dashboard\", rule (\d+)", line)
            index = int(match.group(1)) - 1 if match else None
            if index is not None and 0 <= index < len(exprs):
                failures.add(exprs[index][0], "promtool: " + line.strip())
        failures.add(path, "promtool check rules failed on the panel expressions:\n" + output)
    failures.done("%d expressions, %d panels" % (len(exprs), len(ids)))


if __name__ == "__main__":
    sys.exit(main())

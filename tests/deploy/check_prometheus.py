#!/usr/bin/python3
"""Checks deploy/prometheus/ with promtool, plus what promtool cannot know.

    check_prometheus.py config DEPLOY_DIR   promtool check config; the gpu
                                            relabeling; the commented
                                            Kubernetes example parses too
    check_prometheus.py rules DEPLOY_DIR    promtool check rules; every metric,
                                            label and value exists; every
                                            alert is documented and tested
    check_prometheus.py test DEPLOY_DIR     promtool test rules

promtool is taken from $PROMTOOL, else PATH.
"""

import os
import re
import shutil
import sys
import tempfile

import yaml

import deploylib

REQUIRED_ALERTS = {"StatecachePoolThrashing", "StatecacheOrphansRising",
                   "StatecacheSlotsExhausted", "StatecacheSessionsExpiring",
                   "StatecacheDown", "StatecacheHostTierCopyFailures",
                   "StatecacheHostTierThrashing", "StatecacheStateDirSaveFailing",
                   "StatecacheWarmRestartDroppedCorrupt", "StatecacheWarmRestartLost"}


def promtool():
    tool = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if not tool:
        print("promtool not found: install Debian's prometheus package (.ci/install-deps)")
        sys.exit(1)
    return tool


def check_config(deploy, failures):
    path = os.path.join(deploy, "prometheus", "prometheus.yml")
    status, output = deploylib.run([promtool(), "check", "config", path])
    print(output.rstrip())
    failures.check(status == 0 and "SUCCESS" in output, path,
                   "promtool check config failed")
    with open(path) as f:
        text = f.read()
    config = yaml.safe_load(text)
    jobs = {job.get("job_name"): job for job in config.get("scrape_configs", [])}
    job = jobs.get("statecache")
    if failures.check(job is not None, path, "no scrape job named statecache"):
        targets = [t for sc in job.get("static_configs", []) for t in sc.get("targets", [])]
        failures.check("127.0.0.1:9400" in targets, path,
                       "the default target 127.0.0.1:9400 is not scraped")
        relabel = [r for r in job.get("relabel_configs", []) if r.get("target_label") == "gpu"]
        if failures.check(len(relabel) == 1, path, "no relabeling that sets gpu"):
            rule = relabel[0]
            regex = re.compile("^(?:%s)$" % rule["regex"])  # Prometheus anchors it
            for port, gpu in ((9400, "0"), (9401, "1"), (9407, "7"), (9410, "10"), (9415, "15")):
                match = regex.match("127.0.0.1:%d" % port)
                got = match.expand(rule.get("replacement", "$1").replace("$1", r"\1")) if match else None
                failures.check(got == gpu, path,
                               "port %d relabels to gpu=%r, want %r" % (port, got, gpu))
    failures.check("statecache.rules.yml" in config.get("rule_files", []), path,
                   "rule_files does not load statecache.rules.yml")

    # The commented Kubernetes example must stay a valid scrape config.
    block = []
    for line in text.splitlines():
        if re.match(r"^  # - job_name:", line) or (block and re.match(r"^  #   ", line)):
            block.append("  " + line[len("  # "):])
        elif block:
            break
    if failures.check(block, path, "the commented kubernetes_sd_configs example is missing"):
        with tempfile.TemporaryDirectory() as tmp:
            example = os.path.join(tmp, "k8s.yml")
            with open(example, "w") as f:
                f.write("scrape_configs:\n" + "\n".join(block) + "\n")
            status, output = deploylib.run([promtool(), "check", "config", example])
            if status != 0 and "field kubernetes_sd_configs not found" in output:
                # Debian builds Prometheus without Kubernetes discovery: check
                # everything but the discovery block itself.
                failures.note("this promtool has no kubernetes_sd_configs (Debian builds it "
                              "without); the example's relabel_configs were checked with a "
                              "static target in its place")
                parsed = yaml.safe_load(open(example))
                del parsed["scrape_configs"][0]["kubernetes_sd_configs"]
                parsed["scrape_configs"][0]["static_configs"] = [{"targets": ["127.0.0.1:9400"]}]
                with open(example, "w") as f:
                    yaml.safe_dump(parsed, f)
                status, output = deploylib.run([promtool(), "check", "config", example])
            failures.check(status == 0, path,
                           "the commented Kubernetes example does not parse:\n" + output)
            parsed = yaml.safe_load(open(example))
            for rule in parsed["scrape_configs"][0].get("relabel_configs", []):
                for label in rule.get("source_labels", []):
                    failures.check(label.startswith("__meta_kubernetes_pod_"), path,
                                   "k8s example relabels from %s (not a pod-role label)" % label)


def check_rules(deploy, failures):
    path = os.path.join(deploy, "prometheus", "statecache.rules.yml")
    status, output = deploylib.run([promtool(), "check", "rules", path])
    print(output.rstrip())
    failures.check(status == 0 and "SUCCESS" in output, path, "promtool check rules failed")
    with open(path) as f:
        doc = yaml.safe_load(f)
    names = deploylib.series_names(deploylib.load_metrics())
    records = {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}
    alerts = {}
    for group in doc["groups"]:
        for rule in group["rules"]:
            what = rule.get("record") or rule.get("alert")
            where = "%s: %s" % (os.path.basename(path), what)
            deploylib.check_promql(rule["expr"], where, failures, names, records)
            if "record" in rule:
                failures.check(re.match(r"^[a-z_]+:[a-z0-9_]+:[a-z0-9_]+$", rule["record"]),
                               where, "recording rule names follow level:metric:operations")
                continue
            alerts[rule["alert"]] = rule
            severity = rule.get("labels", {}).get("severity")
            failures.check(severity in ("warning", "critical"), where,
                           "severity label must be warning or critical, not %r" % severity)
            annotations = rule.get("annotations", {})
            for key in ("summary", "description"):
                failures.check(len(annotations.get(key, "").split()) >= 5, where,
                               "needs a %s annotation an operator can act on" % key)
            failures.check("first" in annotations.get("description", "").lower(), where,
                           "the description must say what to do first ('First: ...')")
    missing = REQUIRED_ALERTS - set(alerts)
    failures.check(not missing, path, "missing alerts: %s" % ", ".join(sorted(missing)))

    # Every alert has a test where it fires and one where it stays quiet.
    test_path = os.path.join(deploy, "prometheus", "statecache.rules.test.yml")
    with open(test_path) as f:
        tests = yaml.safe_load(f)
    fires, quiet = set(), set()
    for test in tests.get("tests", []):
        for case in test.get("alert_rule_test", []) or []:
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    for alert in sorted(alerts):
        failures.check(alert in fires, test_path, "no test where %s fires" % alert)
        failures.check(alert in quiet, test_path, "no test where %s stays quiet" % alert)


def check_test(deploy, failures):
    path = os.path.join(deploy, "prometheus", "statecache.rules.test.yml")
    status, output = deploylib.run([promtool(), "test", "rules", path])
    print(output.rstrip())
    failures.check(status == 0 and "SUCCESS" in output, path, "promtool test rules failed")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("config", "rules", "test"):
        print(__doc__)
        return 2
    mode, deploy = sys.argv[1], sys.argv[2]
    failures = deploylib.Failures("prometheus " + mode)
    {"config": check_config, "rules": check_rules, "test": check_test}[mode](deploy, failures)
    failures.done()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Proves the deploy checks fail when a deploy/ file is broken.

    check_breakage.py DEPLOY_DIR REPO

Each case copies deploy/ to a temporary directory, breaks one file in one
specific way (the text it replaces must be found, so a case cannot silently
stop applying when the file changes), runs the check that owns that file and
expects it to fail with its own report of that breakage: a failure line of
the check (deploylib's "FAIL ...", yamllint's "error") matching the case's
pattern. A non-zero exit alone is not enough: a check that crashes (a Python
traceback), or fails for another reason, has not caught the breakage. An
unbroken copy must pass every check first, so a failure is the breakage's
and not the copy's.
"""

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable


def checks(deploy, repo):
    """{name: argv} of every check, against a deploy directory."""
    def script(name, *args):
        return [PY, os.path.join(HERE, name)] + list(args)
    return {
        "systemd": script("check_systemd.py", deploy, repo),
        "container": script("check_container.py", deploy, repo),
        "yamllint": [shutil.which("yamllint") or "yamllint", "--strict", "-c",
                     os.path.join(deploy, ".yamllint"), deploy],
        "kubernetes": script("check_kubernetes.py", deploy, repo),
        "prometheus-config": script("check_prometheus.py", "config", deploy),
        "prometheus-rules": script("check_prometheus.py", "rules", deploy),
        "prometheus-test": script("check_prometheus.py", "test", deploy),
        "grafana": script("check_dashboard.py", deploy),
        "health": script("check_health_probe.py", deploy, repo),
    }


# (check, file under deploy/, old text, new text, what the breakage is, the
# check's failure line that says so: a regular expression)
CASES = [
    ("prometheus-test", "prometheus/statecache.rules.yml",
     "          ) > 0.9\n", "          ) > 1.9\n",
     "thrashing threshold no pool can reach: the alert never fires",
     r"statecache\.rules\.test\.yml: promtool test rules failed"),
    ("prometheus-test", "prometheus/statecache.rules.yml",
     "expr: increase(statecache_lease_expiries_total[15m]) > 0",
     "expr: increase(statecache_lease_expiries_total[15m]) > 5",
     "sessions-expiring alert that ignores a single expiry",
     r"statecache\.rules\.test\.yml: promtool test rules failed"),
    ("prometheus-test", "prometheus/statecache.rules.yml",
     "          and\n          sum without (state) (statecache_host_tier_bytes{state=\"capacity\"}) > 0\n",
     "",
     "host-tier thrashing alert that fires for a tier turned off",
     r"statecache\.rules\.test\.yml: promtool test rules failed"),
    ("prometheus-test", "prometheus/statecache.rules.yml",
     "expr: increase(statecache_host_tier_copy_failures_total[10m]) > 0\n",
     "expr: increase(statecache_host_tier_copy_failures_total[10m]) > 1\n",
     "copy-failure alert that ignores a single device fault",
     r"statecache\.rules\.test\.yml: promtool test rules failed"),
    ("prometheus-test", "prometheus/statecache.rules.yml",
     "expr: increase(statecache_state_dir_save_failures_total[10m]) > 0\n",
     "expr: increase(statecache_state_dir_save_failures_total[10m]) > 1\n",
     "save-failure alert that ignores a single failed index write",
     r"statecache\.rules\.test\.yml: promtool test rules failed"),
    ("prometheus-test", "prometheus/statecache.rules.yml",
     "          time() - statecache_start_time_seconds < 3600\n        labels:\n"
     "          severity: warning\n        annotations:\n          summary: >-\n"
     "            statecache {{ $labels.instance }}{{ with $labels.gpu }} (gpu {{ . }}){{ end }}:\n"
     "            the warm restart dropped",
     "          time() - statecache_start_time_seconds > 0\n        labels:\n"
     "          severity: warning\n        annotations:\n          summary: >-\n"
     "            statecache {{ $labels.instance }}{{ with $labels.gpu }} (gpu {{ . }}){{ end }}:\n"
     "            the warm restart dropped",
     "dropped-checkpoints alert that fires for the life of the process",
     r"statecache\.rules\.test\.yml: promtool test rules failed"),
    ("prometheus-rules", "prometheus/statecache.rules.yml",
     "rate(statecache_checkpoints_orphaned_total[30m])\n              / rate",
     "rate(statecache_checkpoint_orphaned_total[30m])\n              / rate",
     "misspelt metric name (promtool alone would accept it)",
     r"unknown metric 'statecache_checkpoint_orphaned_total'"),
    ("prometheus-rules", "prometheus/statecache.rules.yml",
     'op="admit",code="RESOURCE_EXHAUSTED"}[5m])\n          ) > 0',
     'op="admit",code="RESOURCE_EXHAUSTED"}[5m]\n          ) > 0',
     "PromQL syntax error",
     r"statecache\.rules\.yml: promtool check rules failed"),
    ("prometheus-rules", "prometheus/statecache.rules.yml",
     "        labels:\n          severity: critical\n        annotations:\n          summary: >-\n"
     "            statecache {{ $labels.instance }}{{ with $labels.gpu }} (gpu {{ . }}){{ end }}:\n"
     "            admissions",
     "        labels:\n          severity: page\n        annotations:\n          summary: >-\n"
     "            statecache {{ $labels.instance }}{{ with $labels.gpu }} (gpu {{ . }}){{ end }}:\n"
     "            admissions",
     "unknown severity",
     r"severity label must be warning or critical, not 'page'"),
    ("prometheus-config", "prometheus/prometheus.yml",
     "scrape_interval: 15s", "scrape_interval: 15",
     "invalid duration",
     r"prometheus\.yml: promtool check config failed"),
    ("prometheus-config", "prometheus/prometheus.yml",
     "regex: '.+:94(?:0?)([0-9]+)'", "regex: '.+:94([0-9]+)'",
     "gpu relabeling that turns port 9403 into gpu 03",
     r"port 940\d relabels to gpu='0\d', want '\d'"),
    ("grafana", "grafana/statecache.json",
     "statecache_copy_bytes_total{", "statecache_copy_byte_total{",
     "misspelt metric in a panel",
     r"unknown metric 'statecache_copy_byte_total'"),
    ("grafana", "grafana/statecache.json",
     'state=\\"vacant\\"', 'state=\\"free\\"',
     "label value the daemon never exports",
     r"statecache_slots\{state\} takes .*not 'free'"),
    ("grafana", "grafana/statecache.json",
     "[$__rate_interval])) / (sum by (instance, gpu) (rate(statecache_resume_blocks_wanted_total",
     "[$__rate_interval]) / (sum by (instance, gpu) (rate(statecache_resume_blocks_wanted_total",
     "unbalanced parenthesis in a panel query",
     r"'Block hit ratio'.*unclosed left parenthesis"),
    ("grafana", "grafana/statecache.json",
     'gpu=~\\"$gpu\\", outcome=\\"tier\\"}', 'gpu=~\\"$gpu\\", outcome=\\"host\\"}',
     "resume outcome the daemon never exports (host tier panel)",
     r"statecache_resumes_total\{outcome\} takes .*not 'host'"),
    ("grafana", "grafana/statecache.json",
     '"templating": {', '"templating": {,',
     "invalid JSON",
     r"statecache\.json: not valid JSON"),
    ("systemd", "systemd/statecached.service",
     "NoNewPrivileges=yes", "NoNewPrivilege=yes",
     "misspelt directive (systemd-analyze verify warns but exits 0)",
     r"NoNewPrivileges=yes expected"),
    ("systemd", "systemd/statecached.service",
     "Restart=on-failure", "Restart=sometimes",
     "invalid Restart= value",
     r"Restart=on-failure expected, found 'sometimes'"),
    ("systemd", "systemd/statecached@.service",
     "TimeoutStopSec=15s", "TimeoutStopSec=6s",
     "stop timeout shorter than the shutdown grace plus teardown",
     r"TimeoutStopSec=6s leaves under 5s"),
    ("systemd", "systemd/statecached@.service",
     "--listen=unix:/run/statecache/gpu%i/statecached.sock",
     "--listen=unix:/run/statecache/statecached.sock",
     "every instance on the same socket",
     r"missing --listen=unix:/run/statecache/gpu\d/statecached\.sock"),
    ("systemd", "systemd/statecached@.service",
     "--shutdown_grace=5s $$STATECACHED_ARGS", "--shutdown_grace=5s --num-slots=8 $$STATECACHED_ARGS",
     "flag the daemon does not define (dash-spelled)",
     r"has no flag --num-slots"),
    ("systemd", "systemd/statecache.sysusers.conf",
     "u statecache -", "x statecache -",
     "invalid sysusers line",
     r"systemd-sysusers does not accept it"),
    ("container", "container/Containerfile",
     "COPY . .\n", "COPY daemons daemons\n",
     "COPY of a directory the repository does not have",
     r"COPY source 'daemons' is not in the repository"),
    ("container", "container/Containerfile",
     "COPY . .\n", "COPY daemon daemon\nCOPY client client\n",
     "build stage missing directories CMake configures",
     r"the build stage does not copy kernels, which CMakeLists\.txt needs"),
    ("container", "container/Containerfile.dockerignore",
     "build-*\n", "build-*\nkernels\n",
     "context excluding a directory CMake configures",
     r"kernels, which CMakeLists\.txt needs, is excluded by the \.dockerignore"),
    ("container", "container/Containerfile",
     "USER 10001:10001", "USER root",
     "runtime image running as root",
     r"the final stage must run as a non-root USER"),
    ("container", "container/Containerfile",
     'ENTRYPOINT ["/usr/local/bin/statecached"]', "ENTRYPOINT /usr/local/bin/statecached",
     "shell-form ENTRYPOINT (signals go to sh)",
     r"ENTRYPOINT in shell form"),
    ("container", "container/Containerfile",
     "python3 python3-grpcio", "python3 python3-grpc",
     "package apt does not have",
     r"apt does not know the package python3-grpc$"),
    ("container", "container/Containerfile",
     "COPY --from=build /out/runtime-packages.txt", "COPY --from=builder /out/runtime-packages.txt",
     "COPY --from a stage that does not exist",
     r"COPY --from=builder names no earlier stage"),
    ("container", "container/Containerfile",
     "    for lib in $libs; do", '    for lib in "$libs"; do',
     "RUN loop over a quoted list (runs once; shellcheck SC2066)",
     r"Containerfile:\d+: RUN: shellcheck .*SC2066"),
    ("yamllint", "kubernetes/base/service.yaml",
     "  clusterIP: None\n", "  clusterIP: None   \n",
     "trailing spaces",
     r"error +trailing spaces"),
    ("yamllint", "prometheus/statecache.rules.test.yml",
     "rule_files:\n  - statecache.rules.yml", "rule_files:\n    - statecache.rules.yml",
     "inconsistent indentation",
     r"error +wrong indentation"),
    ("kubernetes", "kubernetes/base/daemonset.yaml",
     "            readOnlyRootFilesystem: true\n            capabilities:\n              drop: [ALL]\n"
     "          volumeMounts:",
     "            readOnlyRootFileSystem: true\n            capabilities:\n              drop: [ALL]\n"
     "          volumeMounts:",
     "misspelt field (unknown to the API)",
     r"unknown field 'readOnlyRootFileSystem'"),
    ("kubernetes", "kubernetes/base/daemonset.yaml",
     "containerPort: 9403", "containerPort: 9404",
     "daemon 3's port is not 9403",
     r"want one port metrics-gpu3 = 9403"),
    ("kubernetes", "kubernetes/base/daemonset.yaml",
     "                - --address=unix:/run/statecache/gpu5/statecached.sock",
     "                - --address=unix:/run/statecache/gpu4/statecached.sock",
     "a probe asking the neighbour's socket",
     r"container gpu5: \w+Probe asks another socket"),
    ("kubernetes", "kubernetes/base/daemonset.yaml",
     "terminationGracePeriodSeconds: 15", 'terminationGracePeriodSeconds: "15"',
     "string where the API wants an integer",
     r"terminationGracePeriodSeconds: must be an integer, not '15'"),
    ("kubernetes", "kubernetes/base/kustomization.yaml",
     "      - LEASE_TTL=10s\n", "",
     "a $(VAR) the ConfigMap no longer defines",
     r"uses \$\(LEASE_TTL\), which the ConfigMap does not define"),
    ("kubernetes", "kubernetes/overlays/4-gpu/kustomization.yaml",
     "path: /spec/template/spec/containers/7\n", "path: /spec/template/spec/containers/9\n",
     "overlay patch that does not apply",
     r"overlays/4-gpu: kubectl kustomize failed"),
    ("kubernetes", "kubernetes/base/daemonset.yaml",
     "for gpu in $STATECACHE_GPUS; do", 'for gpu in "$STATECACHE_GPUS"; do',
     "init script looping over a quoted list (one directory; SC2066)",
     r"container socket-dirs: shellcheck .*SC2066"),
    ("kubernetes", "kubernetes/base/servicemonitor.yaml",
     "  jobLabel: app.kubernetes.io/name", "  jobLabel: app.kubernetes.io/component",
     "job label that is not statecache",
     r"jobLabel must name a Service label"),
    ("health", "health/statecache-health",
     "    if status == 1:\n        return EXIT_SERVING",
     "    if status >= 1:\n        return EXIT_SERVING",
     "probe that calls a draining daemon healthy",
     r"service 'draining': exit 0, want 1"),
]


def run(argv):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=120,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return proc.returncode, proc.stdout


# A check's own failure lines: deploylib.Failures' and yamllint's.
OWN_FAILURE = re.compile(r"^FAIL |^\s+\d+:\d+\s+error\s")


def caught(output, expect):
    """The check's failure line matching `expect`, or None with why not."""
    if "Traceback (most recent call last)" in output:
        return None, "it crashed instead of reporting the breakage"
    own = [l for l in output.splitlines() if OWN_FAILURE.match(l)]
    for line in own:
        if re.search(expect, line):
            return line.strip(), None
    return None, "its failure does not say %r (its failure lines: %s)" % (
        expect, own[:3] or "none")


def run_case(deploy, repo, case):
    """Returns (ok, line to print)."""
    check, relpath, old, new, what, expect = case
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "deploy")
        shutil.copytree(deploy, copy)
        path = os.path.join(copy, relpath)
        with open(path) as f:
            text = f.read()
        if old not in text:
            return False, "FAIL %s: the text this case breaks is gone from %s; update the case" % (
                what, relpath)
        with open(path, "w") as f:
            f.write(text.replace(old, new, 1))
        status, output = run(checks(copy, repo)[check])
    if status == 0:
        return False, "FAIL %s check accepts %s: %s\n%s" % (check, relpath, what, output)
    line, why = caught(output, expect)
    if line is None:
        return False, "FAIL %s check exits %d on %s (%s), but %s:\n%s" % (
            check, status, relpath, what, why, output)
    return True, "ok   %-17s %-45s %s -> %s" % (check, relpath, what, line[:100])


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    deploy, repo = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    workers = max(2, os.cpu_count() or 2)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "deploy")
            shutil.copytree(deploy, copy)
            baseline = dict(zip(checks(copy, repo), pool.map(run, checks(copy, repo).values())))
        unbroken = [name for name, (status, _) in baseline.items() if status != 0]
        for name in unbroken:
            print("FAIL the unbroken copy fails the %s check:\n%s" % (name, baseline[name][1]))
        if unbroken:
            print("0 passed, %d failed" % len(unbroken))
            return 1
        results = list(pool.map(lambda case: run_case(deploy, repo, case), CASES))
    for _, line in results:
        print(line)
    passed = sum(1 for ok, _ in results if ok)
    print("%d passed, %d failed" % (passed, len(results) - passed))
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())

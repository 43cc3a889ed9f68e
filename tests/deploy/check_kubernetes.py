#!/usr/bin/python3
"""Checks deploy/kubernetes/ offline.

    check_kubernetes.py DEPLOY_DIR REPO

What kubectl can do without a cluster, it does: `kubectl kustomize` renders
deploy/kubernetes, base/ and every overlay (a broken kustomization, patch or
manifest fails here). Directory resources and inline `patches` need
kustomize v4+ (kubectl 1.21+); Debian 12's kubernetes-client is kubectl
1.20, whose kustomize v2.0 reads neither. So each kustomization is also
translated into what v2 reads (directory resources as `bases`, inline JSON
patches as `patchesJson6902` files): an old kubectl renders the translation
(anything the translation cannot express fails), and a new one renders both
and requires the same objects from each, so the translation an old kubectl
relies on is itself checked wherever a new one runs. Every kubectl validation mode needs an API server
(`kubectl apply|create --dry-run=client` still asks the server for its API
groups, with or without --validate=false), so the rendered objects are
validated against the Kubernetes API types of Debian's python3-kubernetes
(the OpenAPI models of the client library: unknown fields, wrong types and
missing required fields are errors), and the ServiceMonitor against the
fields of monitoring.coreos.com/v1 that it uses.

The init container's shell script is shellchecked as its shell will get it.

Then what no schema knows: per-GPU container i really is daemon i (device,
socket, metrics port, probe address), the init container prepares exactly
those socket directories, the Service and ServiceMonitor ports line up with
the containers', selectors select, job="statecache", flags exist in the
daemon, and the grace period outlasts --shutdown_grace.
"""

import json
import os
import re
import shutil
import sys
import tempfile

import yaml

import deploylib

try:
    import kubernetes.client as k8s
except ImportError:  # pragma: no cover
    k8s = None

MODELS = {("v1", "Namespace"): "V1Namespace", ("v1", "Service"): "V1Service",
          ("v1", "ConfigMap"): "V1ConfigMap", ("apps/v1", "DaemonSet"): "V1DaemonSet"}

# monitoring.coreos.com/v1 ServiceMonitor, the fields this project may use.
RELABEL = {"sourceLabels": ["str"], "separator": "str", "targetLabel": "str", "regex": "str",
           "modulus": "int", "replacement": "str", "action": "str"}
SERVICE_MONITOR = {
    "apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
    "spec": {
        "jobLabel": "str", "targetLabels": ["str"], "podTargetLabels": ["str"],
        "sampleLimit": "int", "selector": "V1LabelSelector",
        "namespaceSelector": {"any": "bool", "matchNames": ["str"]},
        "endpoints": [{
            "port": "str", "targetPort": "object", "path": "str", "scheme": "str",
            "params": "object", "interval": "str", "scrapeTimeout": "str",
            "honorLabels": "bool", "honorTimestamps": "bool",
            "relabelings": [RELABEL], "metricRelabelings": [RELABEL],
        }],
    },
}


class Validator:
    def __init__(self, failures):
        self.failures = failures

    def model(self, value, type_name, where, quantity=False):
        if type_name.startswith("list["):
            if self.failures.check(isinstance(value, list), where, "must be a list"):
                for i, item in enumerate(value):
                    self.model(item, type_name[5:-1], "%s[%d]" % (where, i))
            return
        if type_name.startswith("dict("):
            inner = type_name[type_name.index(",") + 1:-1].strip()
            if self.failures.check(isinstance(value, dict), where, "must be a map"):
                for key, item in value.items():
                    self.model(item, inner, "%s.%s" % (where, key), quantity)
            return
        if type_name == "str":
            ok = isinstance(value, str) or (quantity and isinstance(value, (int, float))
                                            and not isinstance(value, bool))
            self.failures.check(ok, where, "must be a string, not %r" % (value,))
            return
        if type_name == "int":
            self.failures.check(isinstance(value, int) and not isinstance(value, bool), where,
                                "must be an integer, not %r" % (value,))
            return
        if type_name == "bool":
            self.failures.check(isinstance(value, bool), where, "must be true or false, not %r" % (value,))
            return
        if type_name in ("object", "datetime", "float"):
            return
        cls = getattr(k8s, type_name)
        if not self.failures.check(isinstance(value, dict), where, "must be a map (%s)" % type_name):
            return
        by_json = {json_name: attr for attr, json_name in cls.attribute_map.items()}
        for key, item in value.items():
            if key not in by_json:
                self.failures.add(where, "unknown field %r in %s" % (key, type_name))
                continue
            self.model(item, cls.openapi_types[by_json[key]], "%s.%s" % (where, key),
                       quantity=(type_name == "V1ResourceRequirements"))

    def shape(self, value, spec, where):
        if isinstance(spec, str):
            if spec.startswith("V1"):
                self.model(value, spec, where)
            else:
                self.model(value, spec, where)
            return
        if isinstance(spec, list):
            if self.failures.check(isinstance(value, list), where, "must be a list"):
                for i, item in enumerate(value):
                    self.shape(item, spec[0], "%s[%d]" % (where, i))
            return
        if self.failures.check(isinstance(value, dict), where, "must be a map"):
            for key, item in value.items():
                if key not in spec:
                    self.failures.add(where, "unknown field %r" % key)
                else:
                    self.shape(item, spec[key], "%s.%s" % (where, key))

    def object(self, obj, where):
        api, kind = obj.get("apiVersion"), obj.get("kind")
        if (api, kind) == ("monitoring.coreos.com/v1", "ServiceMonitor"):
            self.shape(obj, SERVICE_MONITOR, where)
            return
        name = MODELS.get((api, kind))
        if not self.failures.check(name, where, "unexpected object %s %s" % (api, kind)):
            return
        self.model(obj, name, where)
        try:  # required fields: the client's models refuse to be built without them
            k8s.ApiClient()._ApiClient__deserialize(obj, name)
        except (ValueError, TypeError) as error:
            self.failures.add(where, "not a valid %s: %s" % (kind, error))


def render(kubectl, directory, failures):
    status, output = deploylib.run([kubectl, "kustomize", directory])
    if not failures.check(status == 0, directory, "kubectl kustomize failed:\n" + output):
        return []
    # kubectl may print warnings (deprecations) before the YAML on stderr,
    # which run() merges: keep only the documents.
    start = output.find("apiVersion:")
    return [d for d in yaml.safe_load_all(output[start:]) if d]


# The kustomization fields kustomize v2.0 (kubectl 1.20) knows.
KUSTOMIZE_V2_FIELDS = {
    "apiVersion", "kind", "resources", "bases", "namespace", "namePrefix", "nameSuffix",
    "commonLabels", "commonAnnotations", "patchesStrategicMerge", "patchesJson6902",
    "configMapGenerator", "secretGenerator", "generatorOptions", "images", "vars", "crds",
    "configurations"}


def translate_for_kustomize_v2(root, out, api_versions, failures):
    """Copies the kustomization tree `root` to `out`, in what kustomize v2 reads.

    `api_versions` maps (kind, name) to the apiVersion of every object a patch
    may target (v2's patchesJson6902 targets name group and version too).
    """
    shutil.copytree(root, out)
    for directory, _, files in os.walk(out):
        if "kustomization.yaml" not in files:
            continue
        path = os.path.join(directory, "kustomization.yaml")
        where = os.path.join("kubernetes", os.path.relpath(path, out))
        with open(path) as f:
            k = yaml.safe_load(f)
        resources = k.get("resources") or []
        bases = [r for r in resources if os.path.isdir(os.path.join(directory, r))]
        if bases:
            k["resources"] = [r for r in resources if r not in bases]
            if not k["resources"]:
                del k["resources"]
            k["bases"] = (k.get("bases") or []) + bases
        json_patches = []
        for i, patch in enumerate(k.pop("patches", None) or []):
            target = patch.get("target") or {}
            ops = yaml.safe_load(patch["patch"]) if isinstance(patch.get("patch"), str) else None
            if (set(patch) != {"target", "patch"} or set(target) != {"kind", "name"}
                    or not isinstance(ops, list)):
                failures.add(where, "patch %d cannot be translated for kustomize v2 (only inline "
                             "JSON patches with a kind and name target can): render it with "
                             "kubectl 1.21 or later" % i)
                continue
            api = api_versions.get((target["kind"], target["name"]))
            if not failures.check(api, where, "patch %d targets %s %s, which base/ does not "
                                  "define" % (i, target["kind"], target["name"])):
                continue
            group, _, version = api.rpartition("/")
            v2_target = {"version": version, "kind": target["kind"], "name": target["name"]}
            if group:
                v2_target["group"] = group
            name = "patch-%d.json" % i
            with open(os.path.join(directory, name), "w") as f:
                json.dump(ops, f)
            json_patches.append({"target": v2_target, "path": name})
        if json_patches:
            k["patchesJson6902"] = (k.get("patchesJson6902") or []) + json_patches
        for field in sorted(set(k) - KUSTOMIZE_V2_FIELDS):
            failures.add(where, "field %r is not one kustomize v2 knows: render it with "
                         "kubectl 1.21 or later" % field)
        with open(path, "w") as f:
            yaml.safe_dump(k, f)


SHELLS = {"/bin/sh": "sh", "sh": "sh", "/bin/bash": "bash", "bash": "bash"}


def check_scripts(objects, where, failures, checked):
    """shellcheck on every `sh -c SCRIPT` a container (or init container)
    runs, as the shell gets it: after Kubernetes expands $(VAR) from the
    container's env ($$ is a literal $). `checked` holds the scripts already
    checked (the same init script renders in every kustomization)."""
    for obj in objects:
        spec = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in spec.get("initContainers", []) + spec.get("containers", []):
            argv = list(container.get("command") or []) + list(container.get("args") or [])
            if len(argv) < 3 or argv[0] not in SHELLS or argv[1] != "-c":
                continue
            env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
            script = re.sub(r"\$\$|\$\((\w+)\)",
                            lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
                            argv[2])
            if (script, argv[0]) in checked:
                continue
            checked.add((script, argv[0]))
            deploylib.check_shell(script, SHELLS[argv[0]], "%s: %s %s: container %s" % (
                where, obj["kind"], obj["metadata"]["name"], container["name"]), failures)


def check_deployment(objects, where, failures, flags, device_of):
    """The cross-object consistency of one rendered deployment."""
    by_kind = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    for kind in ("Namespace", "DaemonSet", "Service", "ServiceMonitor", "ConfigMap"):
        failures.check(len(by_kind.get(kind, [])) == 1, where, "want one %s" % kind)
    if any(len(by_kind.get(k, [])) != 1 for k in ("DaemonSet", "Service", "ServiceMonitor", "ConfigMap")):
        return
    ds, svc = by_kind["DaemonSet"][0], by_kind["Service"][0]
    monitor, config = by_kind["ServiceMonitor"][0], by_kind["ConfigMap"][0]
    namespace = by_kind["Namespace"][0]["metadata"]["name"] if "Namespace" in by_kind else None
    for obj in objects:
        if obj["kind"] != "Namespace":
            failures.check(obj["metadata"].get("namespace") == namespace, where,
                           "%s %s is not in namespace %s" % (obj["kind"], obj["metadata"]["name"], namespace))
    pod = ds["spec"]["template"]
    spec = pod["spec"]
    pod_labels = pod["metadata"].get("labels", {})
    selector = ds["spec"]["selector"]["matchLabels"]
    failures.check(all(pod_labels.get(k) == v for k, v in selector.items()), where,
                   "the DaemonSet selector does not select its own pods")
    failures.check(spec.get("hostIPC") is True, where, "hostIPC must be true (shared state region)")
    failures.check(spec.get("nodeSelector") or spec.get("affinity"), where, "no node selection")
    failures.check(any(t.get("key") in ("amd.com/gpu", "nvidia.com/gpu") for t in spec.get("tolerations", [])),
                   where, "no toleration for GPU node taints")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    sockets = [n for n, v in volumes.items() if v.get("hostPath", {}).get("path") == "/run/statecache"]
    failures.check(len(sockets) == 1, where, "want one hostPath volume for /run/statecache")

    containers = spec["containers"]
    gpus = []
    ports = {}
    max_grace = 0.0
    for container in containers:
        name = container["name"]
        cwhere = "%s: container %s" % (where, name)
        match = re.fullmatch(r"gpu(\d+)", name)
        if not failures.check(match, cwhere, "containers are named gpu<N>"):
            continue
        gpu = int(match.group(1))
        gpus.append(gpu)
        args = container.get("args", [])
        failures.check(container.get("command", [""])[0].endswith("/statecached"), cwhere,
                       "command must run statecached")
        deploylib.check_flags(args, cwhere, failures, flags)
        sock = "unix:/run/statecache/gpu%d/statecached.sock" % gpu
        for want in ("--listen=" + sock, "--device=%d" % device_of(gpu),
                     "--metrics_address=0.0.0.0:%d" % (9400 + gpu)):
            failures.check(want in args, cwhere, "missing %s" % want)
        for arg in args:
            for var in re.findall(r"\$\((\w+)\)", arg):
                failures.check(var in config.get("data", {}), cwhere,
                               "%s uses $(%s), which the ConfigMap does not define" % (arg, var))
        grace = [a.split("=", 1)[1] for a in args if a.startswith("--shutdown_grace=")]
        if failures.check(grace, cwhere, "set --shutdown_grace explicitly"):
            max_grace = max(max_grace, deploylib.parse_duration_seconds(grace[0]))
        cports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        failures.check(cports == {"metrics-gpu%d" % gpu: 9400 + gpu}, cwhere,
                       "want one port metrics-gpu%d = %d, got %s" % (gpu, 9400 + gpu, cports))
        ports.update(cports)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = container.get(probe, {}).get("exec", {}).get("command", [])
            if failures.check(command and command[0].endswith("/statecache-health"), cwhere,
                              "%s must exec statecache-health (the gRPC health service)" % probe):
                failures.check("--address=" + sock in command, cwhere,
                               "%s asks another socket than the daemon's" % probe)
        resources = container.get("resources", {})
        for kind in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                failures.check(resource in resources.get(kind, {}), cwhere,
                               "no %s %s" % (resource, kind))
        security = container.get("securityContext", {})
        failures.check(security.get("runAsNonRoot") is True and security.get("allowPrivilegeEscalation") is False
                       and security.get("readOnlyRootFilesystem") is True, cwhere,
                       "runAsNonRoot, readOnlyRootFilesystem, no privilege escalation")
        mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
        failures.check(sockets and mounts.get(sockets[0]) == "/run/statecache", cwhere,
                       "the socket directory is not mounted at /run/statecache")
    failures.check(sorted(gpus) == list(range(len(gpus))) and gpus, where,
                   "containers must be gpu0..gpuN-1, got %s" % gpus)
    grace_period = spec.get("terminationGracePeriodSeconds", 30)
    failures.check(isinstance(grace_period, int) and grace_period >= max_grace + 5, where,
                   "terminationGracePeriodSeconds %s leaves under 5s after --shutdown_grace" % grace_period)
    inits = spec.get("initContainers", [])
    env = {e["name"]: e.get("value") for c in inits for e in c.get("env", [])}
    failures.check(sorted(int(g) for g in (env.get("STATECACHE_GPUS") or "").split()) == sorted(gpus),
                   where, "the init container prepares socket directories for %r, containers are %s" % (
                       env.get("STATECACHE_GPUS"), gpus))
    node_gpus = spec.get("nodeSelector", {}).get("statecache/gpus")
    failures.check(node_gpus == str(len(gpus)), where,
                   "nodeSelector statecache/gpus=%s but %d daemons" % (node_gpus, len(gpus)))

    # Service: selects the pods, one port per daemon, targeting its name.
    failures.check(all(pod_labels.get(k) == v for k, v in svc["spec"].get("selector", {}).items()), where,
                   "the Service does not select the DaemonSet's pods")
    sports = {p["name"]: p for p in svc["spec"].get("ports", [])}
    failures.check(set(sports) == set(ports), where,
                   "Service ports %s differ from container ports %s" % (sorted(sports), sorted(ports)))
    for name, port in sports.items():
        failures.check(port.get("targetPort") == name and port.get("port") == ports.get(name), where,
                       "Service port %s must target the container port of that name" % name)

    # ServiceMonitor: selects the Service, scrapes each port, job=statecache, gpu label.
    mspec = monitor["spec"]
    svc_labels = svc["metadata"].get("labels", {})
    failures.check(all(svc_labels.get(k) == v for k, v in mspec["selector"].get("matchLabels", {}).items()),
                   where, "the ServiceMonitor does not select the Service")
    failures.check(namespace in mspec.get("namespaceSelector", {}).get("matchNames", []), where,
                   "the ServiceMonitor does not look in namespace %s" % namespace)
    failures.check(svc_labels.get(mspec.get("jobLabel")) == "statecache", where,
                   "jobLabel must name a Service label whose value is statecache (job=\"statecache\")")
    endpoints = [e.get("port") for e in mspec.get("endpoints", [])]
    failures.check(sorted(endpoints) == sorted(sports), where,
                   "ServiceMonitor endpoints %s differ from Service ports %s" % (endpoints, sorted(sports)))
    for endpoint in mspec.get("endpoints", []):
        gpu_rules = [r for r in endpoint.get("relabelings", []) if r.get("targetLabel") == "gpu"]
        ok = False
        for rule in gpu_rules:
            match = re.fullmatch(rule.get("regex", "(.*)"), endpoint.get("port", ""))
            if rule.get("sourceLabels") == ["__meta_kubernetes_endpoint_port_name"] and match:
                got = match.expand(rule.get("replacement", "$1").replace("$1", r"\1"))
                ok = "metrics-gpu" + got == endpoint.get("port")
        failures.check(ok, where, "endpoint %s does not get gpu=<N> from its port name" % endpoint.get("port"))
    return len(gpus)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    deploy, repo = sys.argv[1], sys.argv[2]
    root = os.path.join(deploy, "kubernetes")
    failures = deploylib.Failures("kubernetes manifests")
    kubectl = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if not kubectl:
        failures.add(root, "kubectl not found: install Debian's kubernetes-client (.ci/install-deps)")
    if k8s is None:
        failures.add(root, "python3-kubernetes not found (.ci/install-deps)")
    if failures.problems:
        failures.done()
    flags = deploylib.daemon_flags(repo)
    validator = Validator(failures)
    overlays = sorted(os.path.join(root, "overlays", d) for d in os.listdir(os.path.join(root, "overlays")))
    targets = [root, os.path.join(root, "base")] + overlays
    # kubectl 1.20 prints no kustomize version; 1.21+ prints v4 or later.
    _, version = deploylib.run([kubectl, "version", "--client"])
    match = re.search(r"Kustomize Version: v(\d+)", version)
    old_kustomize = not match or int(match.group(1)) < 4
    # base/ itself is what both kustomize generations read.
    base_objects = render(kubectl, os.path.join(root, "base"), failures)
    api_versions = {(o.get("kind"), o.get("metadata", {}).get("name")): o.get("apiVersion")
                    for o in base_objects}
    tmp = tempfile.mkdtemp(prefix="check-kubernetes-")
    try:
        translated = os.path.join(tmp, "kubernetes")
        translate_for_kustomize_v2(root, translated, api_versions, failures)
        def in_translation(target):
            return os.path.join(translated, os.path.relpath(target, root))
        rendered = {}
        if old_kustomize:
            failures.note("this kubectl embeds kustomize older than v4 (%s): every kustomization "
                          "rendered through its kustomize-v2 translation" %
                          (version.strip().splitlines() or ["?"])[0][:80])
            for target in targets:
                rendered[target] = render(kubectl, in_translation(target), failures)
        else:
            for target in targets:
                rendered[target] = render(kubectl, target, failures)
                # What an old kubectl would render instead must be the same.
                as_v2 = render(kubectl, in_translation(target), failures)
                key = lambda o: (o.get("kind"), o.get("metadata", {}).get("name"))
                failures.check(sorted(as_v2, key=key) == sorted(rendered[target], key=key),
                               os.path.relpath(target, deploy),
                               "its kustomize-v2 translation (what kubectl 1.20 renders) gives "
                               "other objects")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = []
    scripts = set()
    for target in targets:
        objects = rendered[target]
        where = os.path.relpath(target, deploy)
        check_scripts(objects, where, failures, scripts)
        for obj in objects:
            validator.object(obj, "%s: %s %s" % (where, obj.get("kind"), obj.get("metadata", {}).get("name")))
        if not objects:
            continue
        shared = target.endswith("gpu-resource")
        count = check_deployment(objects, where, failures, flags,
                                 (lambda gpu: 0) if shared else (lambda gpu: gpu))
        if shared:
            for container in [o for o in objects if o["kind"] == "DaemonSet"][0]["spec"]["template"]["spec"]["containers"]:
                limits = container.get("resources", {}).get("limits", {})
                failures.check("amd.com/gpu" in limits or "nvidia.com/gpu" in limits, where,
                               "container %s requests no GPU" % container["name"])
        summary.append("%s: %d objects, %s daemons" % (where, len(objects), count))
    print("\n".join(summary))
    failures.done("%d kustomizations rendered and validated, %s" % (
        len(targets), "through their kustomize-v2 translation" if old_kustomize
        else "each also through its kustomize-v2 translation, the same objects"))


if __name__ == "__main__":
    sys.exit(main())

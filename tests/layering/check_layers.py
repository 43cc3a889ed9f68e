#!/usr/bin/env python3
"""Checks that the project's include graph runs one way.

    check_layers.py [SOURCE_ROOT]

Each production file belongs to a layer, named by its directory (the gRPC
adapter's is daemon/grpc/). A file may include its own layer and the
layers listed for it below; anything else is an arrow running back up. The
graph of project headers must also have no cycle. Exit 0 when both hold;
otherwise one line per offending include, naming file, line and rule, and
exit 1. Tests and benchmarks are not layered: they may include anything.
"""
import os
import re
import sys

# layer -> the layers its files may include (besides its own).
ALLOWED = {
    # What the daemon and its clients share (vocabulary/): includes nothing.
    "vocabulary": set(),
    "common": {"vocabulary"},
    "kernels": {"vocabulary", "common"},
    "device": {"vocabulary", "common", "kernels"},
    # The pool's verbs (slot_memory) own the Device seam beside the core.
    "core": {"vocabulary", "common", "device", "kernels"},
    "replay": {"vocabulary", "common", "core"},
    "proto": {"vocabulary", "common"},
    "service": {"vocabulary", "common", "core", "device", "kernels", "proto"},
    "adapter": {"vocabulary", "common", "core", "device", "kernels", "proto",
                "service"},
    # Metrics observes the RPCs through the adapter's RpcObserver.
    "metrics": {"vocabulary", "common", "core", "device", "kernels", "proto",
                "service", "adapter"},
    "main": {"vocabulary", "common", "core", "device", "kernels", "proto",
             "service", "adapter", "metrics"},
    # The clients include nothing of the daemon's: what they share with it
    # is in vocabulary/ and proto/.
    "client": {"vocabulary", "proto"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_SUFFIXES = (".h", ".cc", ".hip")


def layer_of(path):
    """The layer of a project path, or None for files outside the layers."""
    if path.startswith("daemon/") and path.count("/") == 1:
        return "main"  # main.cc and the pieces of the executable beside it
    for prefix, layer in (("vocabulary/", "vocabulary"),
                          ("daemon/common/", "common"),
                          ("kernels/", "kernels"),
                          ("daemon/device/", "device"),
                          ("daemon/core/", "core"),
                          ("daemon/replay/", "replay"),
                          ("proto/", "proto"),
                          ("daemon/service/", "service"),
                          ("daemon/grpc/", "adapter"),
                          # The step channel: a transport beside gRPC's.
                          ("daemon/channel/", "adapter"),
                          ("daemon/metrics/", "metrics"),
                          ("client/", "client")):
        if path.startswith(prefix):
            return layer
    return None


def project_files(root):
    for top in ("vocabulary", "daemon", "kernels", "proto", "client"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if d not in ("python",)]
            for name in filenames:
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def includes(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield number, m.group(1)


def find_cycle(graph):
    """One cycle in `graph` (node -> set of nodes) as a list, or None."""
    state = {}  # node -> 1 visiting, 2 done
    stack = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def check(root):
    problems = []
    graph = {}
    for path in sorted(project_files(root)):
        layer = layer_of(path)
        if layer is None:
            continue
        for number, target in includes(root, path):
            target_layer = layer_of(target)
            if target_layer is None:
                # Generated protobuf headers live under proto/ too.
                continue
            if os.path.exists(os.path.join(root, target)):
                graph.setdefault(path, set()).add(target)
            if target_layer != layer and target_layer not in ALLOWED[layer]:
                problems.append(
                    f"{path}:{number}: includes {target}: the {layer} layer "
                    f"may include only {sorted(ALLOWED[layer] | {layer})}")
    cycle = find_cycle(graph)
    if cycle:
        problems.append("include cycle: " + " -> ".join(cycle))
    return problems


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("include graph: one way, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())

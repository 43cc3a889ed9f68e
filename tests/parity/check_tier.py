#!/usr/bin/env python3
"""The host tier against the committed traces: the pool decides the same
with a tier beside it, and the tier's own order is an LRU's.

    check_tier.py REPLAY DATA_DIR

For every DATA_DIR/<name>.jsonl and each tier size (1, 4 and 64 entries)
this runs REPLAY --host_tier=N and checks

  * its results equal <name>.expected.jsonl (the reference's) line for
    line: with the tier on, the device pool's own decisions are unchanged;
  * the tier's log (statecache-replay's --tier_log) against a model written
    here independently: each demoted hash files at the tail (at the head
    when it was a guess), refiling moves it, a full tier spends its head
    first, unindex and clear_index erase. Every eviction the log reports
    must be the model's, in order, and the final dump the model's order;
  * every tier hit the log reports (resumable_hit deeper than the pool)
    names a depth only beyond the pool's answer, and the model holds a hash
    the trace could resume from (the tier adds hits, never removes one).

Exits 1 naming the trace, size and line of the first disagreement.
Standard library only.
"""

import json
import os
import subprocess
import sys
import tempfile

SIZES = (1, 4, 64)


class Model:
    def __init__(self, capacity):
        self.capacity = capacity
        self.order = []  # head (spent first) first

    def insert(self, hash_, guess):
        evicted = None
        if self.capacity == 0:
            return None
        if hash_ in self.order:
            self.order.remove(hash_)
        elif len(self.order) == self.capacity:
            evicted = self.order.pop(0)
        if guess:
            self.order.insert(0, hash_)
        else:
            self.order.append(hash_)
        return evicted


def check(replay, trace, expected_path, size):
    with open(trace, "rb") as f:
        trace_bytes = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "tier.jsonl")
        out = subprocess.run(
            [replay, "--host_tier=%d" % size, "--tier_log=" + log],
            input=trace_bytes, capture_output=True, check=True,
            timeout=300).stdout.decode().splitlines()
        with open(log) as f:
            events = [json.loads(line) for line in f]
    with open(expected_path) as f:
        expected = f.read().splitlines()
    for i, (got, want) in enumerate(zip(out, expected)):
        if got != want:
            return "line %d: %s, the reference %s" % (i, got, want)
    if len(out) != len(expected):
        return "%d result lines, the reference %d" % (len(out), len(expected))
    lines = trace_bytes.decode().splitlines()
    model = Model(size)
    for event in events[:-1]:
        where = "line %d" % event["line"]
        evicted = []
        for hash_, guess in event["demoted"]:
            e = model.insert(hash_, guess)
            if e is not None:
                evicted.append(e)
        if evicted != event["evicted"]:
            return "%s: the tier evicted %s, an LRU %s" % (
                where, event["evicted"], evicted)
        call = json.loads(lines[event["line"]])
        if call.get("op") == "clear_index":
            if sorted(event["erased"]) != sorted(model.order):
                return "%s: clear_index erased %s, the tier held %s" % (
                    where, event["erased"], model.order)
            model.order = []
        for hash_ in event["erased"] if call.get("op") != "clear_index" else ():
            if hash_ not in model.order:
                return "%s: erased %d, not held" % (where, hash_)
            model.order.remove(hash_)
        if event["tier_hit"]:
            hashes = call["block_hashes"]
            depth = event["tier_hit"]
            if not 0 < depth <= call["hit"] or hashes[depth - 1] not in \
                    model.order:
                return "%s: a tier hit at %d the tier cannot give" % (
                    where, depth)
    if events[-1]["dump"] != model.order:
        return "final tier %s, an LRU %s" % (events[-1]["dump"], model.order)
    return None


def main():
    replay, data = sys.argv[1], sys.argv[2]
    traces = sorted(n for n in os.listdir(data)
                    if n.endswith(".jsonl") and
                    not n.endswith(".expected.jsonl"))
    for name in traces:
        trace = os.path.join(data, name)
        expected = trace[:-len(".jsonl")] + ".expected.jsonl"
        for size in SIZES:
            problem = check(replay, trace, expected, size)
            if problem:
                print("%s, tier of %d: %s" % (name, size, problem))
                return 1
    print("%d traces x tier sizes %s: the pool decides as the reference; "
          "the tier is an LRU" % (len(traces), list(SIZES)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

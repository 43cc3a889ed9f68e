"""bench.loadgen: the workload generator and statecache-loadgen, for real.

    loadgen_test.py --generator=gen_workload.py --loadgen=statecache-loadgen
                    --statecached=statecached [unittest args]

1. gen_workload.py with the same seed and arguments writes byte-identical
   files (and another seed a different one).
2. statecache-loadgen replays a small workload against a real statecached
   on a Unix socket in a fresh temporary directory (readiness from
   --ready_fd; no sleeps), once per policy, against one daemon: each run
   exits 0, prints one JSON object, and its daemon run decides exactly as
   its in-process run (the same hit ratio and the same digest of every
   answer), and the policies order as they should on this workload:
   statecache saves more tokens than prompt-end, which saves more than none
   (which saves none).

/usr/bin/python3 with the statecache package on PYTHONPATH (build/python):
its test daemon, statecache.testing.Daemon, runs statecached.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from statecache.testing import Daemon
from statecache.v1 import statecache_pb2 as pb2


def stats_counters():
    """GetStatsResponse's counters by path, as the proto's MetricExport
    options mark them: the run's JSON carries each one."""
    names = []

    def walk(message, prefix):
        for field in message.fields:
            if field.message_type is not None:
                walk(field.message_type, prefix + field.name + ".")
            elif (field.GetOptions().Extensions[pb2.metric].kind
                  == pb2.MetricExport.COUNTER):
                names.append(prefix + field.name)

    walk(pb2.GetStatsResponse.DESCRIPTOR, "")
    return names

ARGS = None

# A small workload the three policies tell apart: sessions sharing two
# system prompts (the ladder resumes new sessions inside them; prompt ends
# never do), prompts up to 12k tokens.
GEN_ARGS = ["--sessions=24", "--agent-types=2", "--max-prompt-tokens=12288",
            "--system-max-tokens=4096", "--task-max-tokens=1024"]
NUM_SLOTS = 256
LOADGEN_ARGS = ["--concurrency=4", "--kv_blocks=2048"]
DEADLINE_S = 30.0


def generate(path, seed):
    subprocess.run([sys.executable, ARGS.generator, "--seed=%d" % seed,
                    "-o", path] + GEN_ARGS, check=True, timeout=DEADLINE_S)
    with open(path, "rb") as f:
        return f.read()


class GeneratorTest(unittest.TestCase):
    def test_same_seed_same_bytes(self):
        d = tempfile.mkdtemp(prefix="lg.")
        try:
            a = generate(os.path.join(d, "a.jsonl"), 7)
            b = generate(os.path.join(d, "b.jsonl"), 7)
            c = generate(os.path.join(d, "c.jsonl"), 8)
            self.assertEqual(a, b, "same seed, different bytes")
            self.assertNotEqual(a, c, "another seed, the same bytes")
            lines = a.decode().splitlines()
            header = json.loads(lines[0])
            self.assertEqual(header["format"], "statecache-workload")
            self.assertEqual(header["hash_block_size"], 64)
            self.assertEqual(header["requests"], len(lines) - 1)
            first = json.loads(lines[1])
            self.assertEqual(len(first["blocks"]),
                             first["prompt_tokens"] // 64)
            self.assertTrue(all(0 <= h < 2**63 for h in first["blocks"]))
        finally:
            shutil.rmtree(d)


class LoadgenTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="lg.")
        self.workload = os.path.join(self.dir, "w.jsonl")
        generate(self.workload, 1)
        self.daemon = Daemon(["--num_slots=%d" % NUM_SLOTS,
                              "--metrics_address=127.0.0.1:0"],
                             binary=ARGS.statecached, directory=self.dir,
                             ready_timeout=DEADLINE_S)

    def tearDown(self):
        self.daemon.stop()
        shutil.rmtree(self.dir)

    def run_loadgen(self, policy):
        started = time.monotonic()
        out = subprocess.run(
            [ARGS.loadgen, "--workload=" + self.workload,
             "--address=" + self.daemon.address, "--policy=" + policy,
             "--json"] + LOADGEN_ARGS,
            capture_output=True, text=True, timeout=DEADLINE_S)
        self.assertEqual(out.returncode, 0,
                         "policy %s: exit %d\nstderr:\n%s\ndaemon log:\n%s"
                         % (policy, out.returncode, out.stderr,
                            self.daemon.log()))
        report = json.loads(out.stdout)
        print("policy %-10s  %.1f s  daemon hit %.4f saved %d  in-process "
              "hit %.4f saved %d  p50 %.0f / %.1f us"
              % (policy, time.monotonic() - started,
                 report["daemon"]["hit_ratio"],
                 report["daemon"]["tokens"]["resumed"],
                 report["in_process"]["hit_ratio"],
                 report["in_process"]["tokens"]["resumed"],
                 report["daemon"]["step_latency_us"]["p50"],
                 report["in_process"]["step_latency_us"]["p50"]))
        return report

    def test_policies_against_a_daemon(self):
        saved = {}
        for policy in ("statecache", "prompt-end", "none"):
            r = self.run_loadgen(policy)
            daemon, local = r["daemon"], r["in_process"]
            self.assertEqual(r["pool"]["num_slots"], NUM_SLOTS)
            self.assertEqual(daemon["hit_ratio"], local["hit_ratio"], policy)
            self.assertEqual(daemon["tokens"], local["tokens"], policy)
            self.assertEqual(daemon["digest"], local["digest"], policy)
            self.assertEqual(daemon["daemon_counters"], local["daemon_counters"],
                             policy)
            self.assertEqual(sorted(daemon["daemon_counters"]),
                             sorted(stats_counters()))
            self.assertTrue(r["identical"]["hit_ratio"], policy)
            self.assertTrue(r["identical"]["decisions"], policy)
            self.assertEqual(daemon["requests"], r["workload"]["requests"])
            self.assertGreater(daemon["passes"], 0)
            saved[policy] = daemon["tokens"]["resumed"]
        self.assertEqual(saved["none"], 0)
        self.assertGreater(saved["prompt-end"], saved["none"])
        self.assertGreater(saved["statecache"], saved["prompt-end"])


def main():
    global ARGS
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--generator", required=True)
    parser.add_argument("--loadgen", required=True)
    parser.add_argument("--statecached", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()

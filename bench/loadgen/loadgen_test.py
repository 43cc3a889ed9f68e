"""bench.loadgen: the workload generator and statecache-loadgen, for real.

    loadgen_test.py --generator=gen_workload.py --loadgen=statecache-loadgen
                    --statecached=statecached [unittest args]

1. gen_workload.py with the same shape, seed and arguments writes
   byte-identical files (and another seed a different one), for every
   shape; the agentic shape writes today's requests for a seed (pinned by a
   digest); a reply's full blocks are the hashes the session's next prompt
   carries; fan-out prompts never end on their shared prefix; long-replies
   replies lie in their range.
2. statecache-loadgen replays small workloads of every shape against a real
   statecached on a Unix socket in a fresh temporary directory (readiness
   from --ready_fd; no sleeps), once per policy, against one daemon: each
   run exits 0, prints one JSON object, and its daemon run decides exactly
   as its in-process run (the same hit ratio and the same digest of every
   answer). On the agentic workload the policies order as they should:
   statecache saves more tokens than prompt-end, which saves more than none
   (which saves none).
3. In-process runs (--daemon=false): with decode caching, a long-replies
   workload's KV hits run past the previous prompt's end (more tokens asked
   for than with --kv_cache_decode=false); on fan-out at a small pool,
   junction resumes shared prefixes and prompt-end resumes nothing;
   statecache, following the daemon's advice, resumes fan-out's at least
   as well as junction and long replies' through the reply.

/usr/bin/python3 with the statecache package on PYTHONPATH (build/python):
its test daemon, statecache.testing.Daemon, runs statecached.
"""

import argparse
import hashlib
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

SHAPES = ("agentic", "fan-out", "long-replies", "mix")
POLICIES = ("statecache", "ladder", "prompt-end", "junction", "every-block",
            "none")
# Small workloads of each shape, for runs of a few seconds against a
# daemon. agentic: sessions sharing two system prompts (the ladder resumes
# new sessions inside them; prompt ends never do), prompts up to 12k tokens.
SMALL = ["--max-prompt-tokens=12288", "--system-max-tokens=4096",
         "--task-max-tokens=1024", "--agent-types=2"]
GEN_ARGS = {
    "agentic": ["--sessions=24"] + SMALL,
    "fan-out": ["--sessions=48", "--prefixes=3"],
    "long-replies": ["--sessions=6", "--mean-turns=3",
                     "--reply-max-tokens=1500"] + SMALL,
    "mix": ["--sessions=20", "--fanout-burst=4", "--prefixes=2",
            "--mean-turns=3", "--reply-max-tokens=1500"] + SMALL,
}
# sha256 of the agentic GEN_ARGS file's request lines at seed 1, without
# output_blocks, as the generator wrote them before it had shapes.
AGENTIC_SEED1_DIGEST = (
    "ab88594892a7e7e74f90d9b1a257241a88ff903e65ebc64693f060892e00729d")
NUM_SLOTS = 256
LOADGEN_ARGS = ["--concurrency=4", "--kv_blocks=2048"]
DEADLINE_S = 60.0


def generate(path, seed, shape="agentic"):
    subprocess.run([sys.executable, ARGS.generator, "--shape=" + shape,
                    "--seed=%d" % seed, "-o", path] + GEN_ARGS[shape],
                   check=True, timeout=DEADLINE_S)
    with open(path, "rb") as f:
        return f.read()


def requests(data):
    return [json.loads(line) for line in data.decode().splitlines()[1:]]


class GeneratorTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="lg.")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def generate(self, shape, seed, name):
        return generate(os.path.join(self.dir, name), seed, shape)

    def test_same_seed_same_bytes(self):
        for shape in SHAPES:
            with self.subTest(shape=shape):
                a = self.generate(shape, 7, "a.jsonl")
                b = self.generate(shape, 7, "b.jsonl")
                c = self.generate(shape, 8, "c.jsonl")
                self.assertEqual(a, b, "same seed, different bytes")
                self.assertNotEqual(a, c, "another seed, the same bytes")
                lines = a.decode().splitlines()
                header = json.loads(lines[0])
                self.assertEqual(header["format"], "statecache-workload")
                self.assertEqual(header["hash_block_size"], 64)
                self.assertEqual(header["params"]["shape"], shape)
                self.assertEqual(header["requests"], len(lines) - 1)
                for r in requests(a):
                    p, o = r["prompt_tokens"], r["output_tokens"]
                    self.assertEqual(len(r["blocks"]), p // 64)
                    self.assertEqual(len(r["output_blocks"]),
                                     (p + o) // 64 - p // 64)
                    self.assertTrue(all(0 <= h < 2**63 for h in
                                        r["blocks"] + r["output_blocks"]))

    def test_agentic_unchanged(self):
        h = hashlib.sha256()
        for r in requests(self.generate("agentic", 1, "a.jsonl")):
            del r["output_blocks"]
            h.update(json.dumps(r, separators=(",", ":")).encode() + b"\n")
        self.assertEqual(h.hexdigest(), AGENTIC_SEED1_DIGEST)

    def test_next_prompt_carries_the_reply(self):
        for shape in ("agentic", "long-replies", "mix"):
            with self.subTest(shape=shape):
                reqs = requests(self.generate(shape, 3, "w.jsonl"))
                turns = {(r["session"], r["turn"]): r for r in reqs}
                continued = 0
                for r in reqs:
                    following = [turns.get((r["session"], r["turn"] + 1))]
                    following += [c for c in reqs if c["turn"] == 0 and
                                  c["parent"] == r["session"] and
                                  c["parent_turn"] == r["turn"]]
                    done = r["blocks"] + r["output_blocks"]
                    for n in following:
                        if n is None:
                            continue
                        continued += bool(r["output_blocks"])
                        self.assertEqual(n["blocks"][:len(done)], done)
                self.assertGreater(continued, 0)

    def test_fan_out_prompt_ends_unshared(self):
        reqs = requests(self.generate("fan-out", 1, "f.jsonl"))
        self.assertTrue(all(r["turn"] == 0 for r in reqs))
        by_prefix = {}
        for r in reqs:
            by_prefix.setdefault(r["agent"], []).append(r["blocks"])
        self.assertEqual(len(by_prefix), 3)
        ends = [b[-1] for b in sum(by_prefix.values(), [])]
        self.assertEqual(len(ends), len(set(ends)),
                         "two prompts share their last full block")
        for blocks in by_prefix.values():
            self.assertGreater(len(blocks), 1)
            shared = 0
            while all(len(b) > shared and b[shared] == blocks[0][shared]
                      for b in blocks):
                shared += 1
            self.assertGreaterEqual(shared, 1000 // 64)
            self.assertTrue(all(len(b) > shared for b in blocks))

    def test_long_replies(self):
        reqs = requests(self.generate("long-replies", 1, "l.jsonl"))
        self.assertTrue(all(500 <= r["output_tokens"] <= 1500 for r in reqs))
        self.assertTrue(any(r["turn"] > 0 for r in reqs))


def run_loadgen(workload, *flags):
    """statecache-loadgen --json on `workload`: (exit code, report or None,
    stderr)."""
    out = subprocess.run(
        [ARGS.loadgen, "--workload=" + workload, "--json"] + LOADGEN_ARGS
        + list(flags), capture_output=True, text=True, timeout=DEADLINE_S)
    report = json.loads(out.stdout) if out.returncode == 0 else None
    return out.returncode, report, out.stderr


class LoadgenTest(unittest.TestCase):
    """Every policy on every shape against one daemon."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="lg.")
        cls.workloads = {}
        for shape in SHAPES:
            cls.workloads[shape] = os.path.join(cls.dir, shape + ".jsonl")
            generate(cls.workloads[shape], 1, shape)
        cls.daemon = Daemon(["--num_slots=%d" % NUM_SLOTS,
                             "--metrics_address=127.0.0.1:0"],
                            binary=ARGS.statecached, directory=cls.dir,
                            ready_timeout=DEADLINE_S)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        shutil.rmtree(cls.dir)

    def run_policy(self, shape, policy):
        started = time.monotonic()
        code, report, stderr = run_loadgen(
            self.workloads[shape], "--address=" + self.daemon.address,
            "--policy=" + policy)
        self.assertEqual(code, 0, "%s, policy %s: exit %d\nstderr:\n%s\n"
                         "daemon log:\n%s" % (shape, policy, code, stderr,
                                              self.daemon.log()))
        print("%-12s %-11s %.1f s  daemon hit %.4f saved %d  in-process "
              "hit %.4f saved %d  p50 %.0f / %.1f us"
              % (shape, policy, time.monotonic() - started,
                 report["daemon"]["hit_ratio"],
                 report["daemon"]["tokens"]["resumed"],
                 report["in_process"]["hit_ratio"],
                 report["in_process"]["tokens"]["resumed"],
                 report["daemon"]["step_latency_us"]["p50"],
                 report["in_process"]["step_latency_us"]["p50"]))
        return report

    def check_identical(self, r, what):
        daemon, local = r["daemon"], r["in_process"]
        self.assertEqual(r["pool"]["num_slots"], NUM_SLOTS)
        self.assertEqual(daemon["hit_ratio"], local["hit_ratio"], what)
        self.assertEqual(daemon["tokens"], local["tokens"], what)
        self.assertEqual(daemon["digest"], local["digest"], what)
        self.assertEqual(daemon["daemon_counters"], local["daemon_counters"],
                         what)
        self.assertEqual(sorted(daemon["daemon_counters"]),
                         sorted(stats_counters()))
        self.assertTrue(r["identical"]["hit_ratio"], what)
        self.assertTrue(r["identical"]["decisions"], what)
        self.assertEqual(daemon["requests"], r["workload"]["requests"])
        self.assertGreater(daemon["passes"], 0)
        self.assertTrue(r["config"]["kv_cache_decode"])

    def test_policies_against_a_daemon(self):
        for shape in SHAPES:
            saved = {}
            for policy in POLICIES:
                with self.subTest(shape=shape, policy=policy):
                    r = self.run_policy(shape, policy)
                    self.check_identical(r, "%s, %s" % (shape, policy))
                    saved[policy] = r["daemon"]["tokens"]["resumed"]
                    if policy in ("junction", "every-block"):
                        # Filed as known: the checkpoints carry their
                        # positions, the publishes keep_all.
                        self.assertGreater(
                            r["daemon"]["checkpoints"]["kept"]
                            + r["daemon"]["midstep"]["published"], 0)
            self.assertEqual(saved["none"], 0, shape)
            if shape == "agentic":
                self.assertGreater(saved["prompt-end"], saved["none"])
                self.assertGreater(saved["statecache"], saved["prompt-end"])


class InProcessTest(unittest.TestCase):
    """What the simulation says about the shapes, in-process only."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="lg.")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def run_in_process(self, shape, *flags):
        path = os.path.join(self.dir, shape + ".jsonl")
        if not os.path.exists(path):
            generate(path, 1, shape)
        code, report, stderr = run_loadgen(path, "--daemon=false", *flags)
        self.assertEqual(code, 0, "%s %s: exit %d\n%s"
                         % (shape, " ".join(flags), code, stderr))
        return report["in_process"]

    def test_decode_caching_hits_through_replies(self):
        on = self.run_in_process("long-replies", "--num_slots=64")
        off = self.run_in_process("long-replies", "--num_slots=64",
                                  "--kv_cache_decode=false")
        print("long-replies asked %d tokens with decode caching, %d without"
              % (on["tokens"]["asked"], off["tokens"]["asked"]))
        # Without decode caching a continuing turn's hit ends at the
        # previous prompt's last full block; with it, it runs through the
        # reply (500+ tokens a turn).
        self.assertGreater(on["tokens"]["asked"], off["tokens"]["asked"])
        self.assertEqual(on["tokens"]["prompt"], off["tokens"]["prompt"])

    def test_old_workload_needs_the_flag(self):
        path = os.path.join(self.dir, "old.jsonl")
        lines = generate(path, 1, "fan-out").decode().splitlines()
        with open(path, "w") as out:
            for line in lines:
                j = json.loads(line)
                j.pop("output_blocks", None)
                out.write(json.dumps(j) + "\n")
        code, _, stderr = run_loadgen(path, "--daemon=false")
        self.assertEqual(code, 2, stderr)
        self.assertIn("--kv_cache_decode=false", stderr)
        code, _, stderr = run_loadgen(path, "--daemon=false",
                                      "--kv_cache_decode=false")
        self.assertEqual(code, 0, stderr)

    def test_junction_resumes_fan_out(self):
        saved = {}
        for policy in ("prompt-end", "junction"):
            saved[policy] = self.run_in_process(
                "fan-out", "--num_slots=8",
                "--policy=" + policy)["tokens"]["resumed"]
        print("fan-out at 8 slots: resumed %s" % saved)
        # A fan-out prompt's end lies past its shared prefix, so prompt-end
        # never resumes one; junction checkpoints the shared prefix.
        self.assertEqual(saved["prompt-end"], 0)
        self.assertGreater(saved["junction"], saved["prompt-end"])

    def test_statecache_follows_the_advice(self):
        """The advised placement: fan-out's shared prefixes resumed at their
        branch points (as junction's), long replies' next turns resumed
        through the reply (past any prompt-end checkpoint)."""
        fan_out = {}
        for policy in ("junction", "statecache"):
            fan_out[policy] = self.run_in_process(
                "fan-out", "--num_slots=48", "--eviction=second-chance",
                "--policy=" + policy)
        advised = fan_out["statecache"]["daemon_counters"]
        self.assertGreater(advised["branch_points_advised"], 0)
        self.assertGreaterEqual(fan_out["statecache"]["tokens"]["resumed"],
                                fan_out["junction"]["tokens"]["resumed"])
        replies = {}
        for policy in ("prompt-end", "statecache"):
            replies[policy] = self.run_in_process(
                "long-replies", "--num_slots=256", "--policy=" + policy)
        print("resumed: fan-out %s, long-replies %s" % (
            {p: r["tokens"]["resumed"] for p, r in fan_out.items()},
            {p: r["tokens"]["resumed"] for p, r in replies.items()}))
        self.assertGreater(
            replies["statecache"]["daemon_counters"]["checkpoints_superseded"],
            0)
        self.assertGreater(replies["statecache"]["tokens"]["resumed"],
                           replies["prompt-end"]["tokens"]["resumed"])


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

#!/usr/bin/python3
"""statecached's Prometheus metrics, checked with the real tools.

    ScrapeTest       /metrics over HTTP is what `promtool check metrics`
                     accepts without a word, fresh and after traffic
    ScenarioTest     a scenario whose every counter and gauge is worked out
                     by hand below, asserted exactly
    LabelTest        every family the operators' guide's metrics table (docs/operators.md) documents is
                     exported with its type and exactly its label names, and
                     each documented label value is exported and moves when
                     the thing it names happens
    PrometheusTest   a real Prometheus server, configured from
                     deploy/prometheus/prometheus.yml, scrapes the daemon
    StepChannelTest  Steps through a step channel (the statecache package's
                     client, in a child process) counted as method
                     StepChannel, and the channels open and opened

Run by ctest (ctest -L metrics); see harness.py for the arguments.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import socket
import sys
import tempfile
import time
import unittest
import urllib.parse

import harness
from harness import Daemon, Driver, wait_for

OK = 0
RESOURCE_EXHAUSTED = 8


class ScrapeTest(unittest.TestCase):
    def setUp(self):
        self.daemon = Daemon(["--num_slots=16"])

    def tearDown(self):
        self.daemon.stop()

    def check_promtool(self, text, when):
        status, output = harness.promtool_check_metrics(text)
        self.assertEqual(output, "", "promtool check metrics (%s) said:\n%s" % (when, output))
        self.assertEqual(status, 0, "promtool check metrics (%s) exited %d" % (when, status))

    def test_idle_and_half_sent_requests_do_not_block_a_scrape(self):
        # A scraper that connects and says nothing, and one that sends half
        # a request and stalls: each holds a worker at most until the
        # request deadline, and a real scrape meanwhile is answered.
        idle = socket.create_connection(("127.0.0.1", self.daemon.metrics_port))
        half = socket.create_connection(("127.0.0.1", self.daemon.metrics_port))
        try:
            half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            started = time.monotonic()
            text = self.daemon.scrape()  # urllib's own 5 s timeout
            self.assertIn("statecache_sessions", text)
            self.assertLess(time.monotonic() - started, 2.0,
                            "a scrape waited behind the stalled requests")
            # The stalled request is dropped at its deadline, not kept
            # forever: the daemon closes it (recv sees EOF or a reset).
            half.settimeout(20)
            try:
                while half.recv(4096):
                    pass
            except ConnectionResetError:
                pass
        finally:
            idle.close()
            half.close()

    def test_promtool_is_silent_on_a_live_scrape(self):
        text = self.daemon.scrape()
        self.check_promtool(text, "fresh daemon")

        # Traffic: observations in the histograms, refusals by code, fates.
        driver = Driver(self.daemon)
        try:
            session = driver.attach()
            results = driver.step(session, driver.begin_pass(),
                                  driver.admit("a", anchor_pos=8),
                                  driver.checkpoint("a", 2, 4242, anchor_pos=8),
                                  driver.admit("a"),  # ALREADY_EXISTS
                                  driver.release("a"),
                                  driver.unindex(4242))
            self.assertEqual([r.code for r in results], [0, 0, 0, 6, 0, 0])
            with self.assertRaises(driver.grpc.RpcError) as refused:
                driver.step("no-such-session", driver.begin_pass())
            self.assertEqual(refused.exception.code(), driver.grpc.StatusCode.NOT_FOUND)
            driver.resize(20)
            driver.resize(12)
            driver.detach(session)
        finally:
            driver.close()
        m = wait_for("the refused Step in statecache_rpc_refusals_total",
                     lambda: (lambda m: m if m.value(
                         "statecache_rpc_refusals_total", method="Step",
                         code="NOT_FOUND") == 1 else None)(self.daemon.metrics()))
        self.check_promtool(m.text, "after traffic")
        self.assertEqual(m.value("statecache_checkpoints_kept_total"), 1)
        self.assertEqual(m.value("statecache_checkpoints_orphaned_total"), 1)
        self.assertEqual(m.value("statecache_step_operation_refusals_total",
                                 op="admit", code="ALREADY_EXISTS"), 1)
        self.assertEqual(m.value("statecache_step_operations_total", op="admit"), 2)

        # Every statecache_ family says what it is and how to read it.
        helps, types = {}, {}
        for line in m.text.splitlines():
            parts = line.split(" ", 3)
            if line.startswith("# HELP "):
                helps[parts[2]] = parts[3] if len(parts) > 3 else ""
            elif line.startswith("# TYPE "):
                types[parts[2]] = parts[3]
        families = {n for n in types if n.startswith("statecache_")}
        for name in ["statecache_checkpoints_kept_total", "statecache_checkpoints_dropped_total",
                     "statecache_checkpoints_evicted_total",
                     "statecache_checkpoints_orphaned_total", "statecache_slots",
                     "statecache_slots_capacity", "statecache_state_bytes",
                     "statecache_resumes_total", "statecache_resume_blocks_wanted_total",
                     "statecache_resume_blocks_resumed_total",
                     "statecache_rpc_duration_seconds", "statecache_rpc_refusals_total",
                     "statecache_step_operation_duration_seconds",
                     "statecache_step_operation_refusals_total",
                     "statecache_step_operations_total",
                     "statecache_copy_bytes_total", "statecache_copy_seconds_total",
                     "statecache_sessions", "statecache_lease_expiries_total",
                     "statecache_session_evictions_total", "statecache_resizes_total",
                     "statecache_build_info", "statecache_start_time_seconds"]:
            self.assertIn(name, families)
        for name in families:
            self.assertGreater(len(helps.get(name, "")), 10, "%s has no real help text" % name)
        self.assertIn("kept minus capacity", helps["statecache_checkpoints_kept_total"])
        self.assertIn("KV pool", helps["statecache_checkpoints_orphaned_total"])
        self.assertEqual(m.value("statecache_resizes_total", direction="grow"), 1)
        self.assertEqual(m.value("statecache_resizes_total", direction="shrink"), 1)
        # Every Step operation has its latency series and refusal counters,
        # built up front (none appear on first use).
        ops = {dict(labels)["op"] for labels in
               m.series("statecache_step_operation_duration_seconds_count")}
        self.assertEqual(ops, {"begin_pass", "admit", "resumable_hit", "lookup", "reserve",
                               "publish", "cancel", "checkpoint", "consume_fork",
                               "adopt_fork_source", "release", "unindex", "clear_index",
                               "copy", "snapshot"})

        # What deploy/ builds on (tests/deploy/statecache_metrics.txt: the
        # families its rules and dashboard may name) is really exported.
        listed = os.path.join(harness.ARGS.source_dir, "tests", "deploy",
                              "statecache_metrics.txt")
        checked = 0
        with open(listed) as f:  # missing: deploy/ would be checked against nothing
            for line in f:
                fields = line.split("#", 1)[0].split()
                if fields and fields[0].startswith("statecache_"):
                    self.assertEqual(types.get(fields[0]), fields[1],
                                     "%s: %s" % (listed, line.strip()))
                    checked += 1
        self.assertGreaterEqual(checked, 20, "%s lists almost nothing" % listed)


class OperationTimingTest(unittest.TestCase):
    """At the default --operation_timing_interval (16) the daemon times a
    random sample of the Step operations and counts every one."""

    def setUp(self):
        self.daemon = Daemon(["--num_slots=16"])

    def tearDown(self):
        self.daemon.stop()

    def test_a_sample_is_timed_and_every_operation_counted(self):
        passes, pairs = 100, 20
        driver = Driver(self.daemon)
        try:
            session = driver.attach()
            for _ in range(passes):
                ops = [driver.begin_pass()]
                for _ in range(pairs):
                    ops += [driver.lookup(7), driver.unindex(7)]
                results = driver.step(session, *ops)
                self.assertEqual([r.code for r in results], [OK] * len(ops))
            driver.detach(session)
        finally:
            driver.close()
        m = self.daemon.metrics()
        ran = passes * (2 * pairs + 1)
        self.assertEqual(sum(m.series("statecache_step_operations_total").values()), ran)
        self.assertEqual(m.value("statecache_step_operations_total", op="lookup"), passes * pairs)
        self.assertEqual(m.value("statecache_step_operations_total", op="unindex"), passes * pairs)
        self.assertEqual(m.value("statecache_step_operations_total", op="begin_pass"), passes)
        counts = m.series("statecache_step_operation_duration_seconds_count")
        timed = sum(counts.values())
        # Gaps uniform in [1, 31]: about ran / 16 (256), within a few dozen;
        # every operation timed would give 4100.
        self.assertGreater(timed, ran // 16 * 7 // 10)
        self.assertLess(timed, ran // 16 * 13 // 10)
        # The two alternating kinds both timed, in like measure (a fixed
        # stride of 16 would time only one of them).
        lookups = counts[frozenset({("op", "lookup")})]
        unindexes = counts[frozenset({("op", "unindex")})]
        self.assertGreater(lookups, timed * 3 // 10)
        self.assertGreater(unindexes, timed * 3 // 10)
        self.assertGreater(m.value("statecache_step_operation_duration_seconds_sum",
                                   op="lookup"), 0)


class ScenarioTest(unittest.TestCase):
    """A known scenario; every expected value is derived in the comments.

    Pool: 8 slots, transfer fork (1 token), hash_block_size 4, width 1, and
    a 3 s lease so one session can lapse inside the test. Requests have 20
    tokens and anchor 8 = 2 blocks, the boundary every checkpoint is taken
    at, so no checkpoint is a guess and the LRU is plain release order.
    """

    LEASE_MS = 3000

    def setUp(self):
        # --quarantine=0: the scenario's hand-worked occupancy has an
        # evicted session's slots back at once (fencing is tested in
        # tests/service and tests/integration).
        # --operation_timing_interval=1: every operation timed, so the
        # histograms' counts are exact too.
        self.daemon = Daemon(["--num_slots=8", "--hash_block_size=4", "--transfer=fork",
                              "--fork_tokens=1", "--lease_ttl=%dms" % self.LEASE_MS,
                              "--quarantine=0", "--operation_timing_interval=1"])
        self.driver = Driver(self.daemon)

    def tearDown(self):
        self.driver.close()
        self.daemon.stop()

    def ok(self, results, expected_codes=None):
        codes = [r.code for r in results]
        expected = expected_codes or [OK] * len(results)
        self.assertEqual(codes, expected, [r.message for r in results])
        return results

    def slots(self, m):
        return (m.value("statecache_slots", state="used"),
                m.value("statecache_slots", state="held"),
                m.value("statecache_slots", state="vacant"))

    def test_exact_values(self):
        d = self.driver
        H0, H1, H2, K0, K1 = 1000, 1001, 1002, 2000, 2001
        a = d.attach("scenario-a", hash_block_size=4)
        steps = 0

        # Step 1: four cold admits take slots 0..3; checkpoints of a0..a2 at
        # 2 blocks move each to a fresh slot (4, 5, 6) and file 0, 1, 2 under
        # H0, H1, H2, pinned.                               kept = 3
        r = self.ok(d.step(a, d.begin_pass(),
                           *[d.admit("a%d" % i, anchor_pos=8) for i in range(4)],
                           d.checkpoint("a0", 2, H0), d.checkpoint("a1", 2, H1),
                           d.checkpoint("a2", 2, H2)))
        steps += 1
        self.assertEqual([list(x.admit.slots) for x in r[1:5]], [[0], [1], [2], [3]])
        self.assertEqual([x.checkpoint.state_slot for x in r[5:8]], [4, 5, 6])
        m = self.daemon.metrics()
        self.assertEqual(self.slots(m), (7, 0, 1))  # 4 live + 3 pinned, slot 7
        self.assertEqual(m.value("statecache_checkpoints_kept_total"), 3)

        # Step 2: releasing all four drops each as the reader of its source:
        # 0, 1, 2 become held checkpoints (LRU 0, 1, 2), 3..7 vacant.
        self.ok(d.step(a, *[d.release("a%d" % i) for i in range(4)]))
        steps += 1
        m = self.daemon.metrics()
        self.assertEqual(self.slots(m), (0, 3, 5))
        self.assertEqual(m.value("statecache_indexed_checkpoints"), 3)

        # Step 3: resumes, 20 tokens, kv hits as given (wanted = kv_hit):
        #   r0 [x, H0] hit 2 -> fork from 0 into slot 3    wanted 2 resumed 2
        #   r1 [x, H1] hit 2 -> fork from 1 into slot 4    wanted 2 resumed 2
        #   r2 [x, y]  hit 2 -> miss, slot 5               wanted 2 resumed 0
        #   r3 [x, H2, z] hit 3 -> z unknown, H2 at 2 blocks: fork from 2
        #                      into slot 6                 wanted 3 resumed 2
        #   r4 cold (kv hit 0: not a resume) -> slot 7, the last free slot
        #   r5 cold -> RESOURCE_EXHAUSTED (0 free)         refusals{admit} = 1
        r = self.ok(d.step(a, d.admit("r0", anchor_pos=8, hashes=[11, H0], kv_hit=2),
                           d.admit("r1", anchor_pos=8, hashes=[12, H1], kv_hit=2),
                           d.admit("r2", anchor_pos=8, hashes=[13, 14], kv_hit=2),
                           d.admit("r3", anchor_pos=8, hashes=[15, H2, 16], kv_hit=3),
                           d.admit("r4", anchor_pos=8),
                           d.admit("r5", anchor_pos=8)),
                    [OK] * 5 + [RESOURCE_EXHAUSTED])
        steps += 1
        self.assertEqual([x.admit.fork_src for x in r[:5]], [0, 1, -1, 2, -1])
        self.assertEqual([x.admit.blocks_resumed for x in r[:5]], [2, 2, 0, 2, 0])
        m = self.daemon.metrics()
        self.assertEqual(self.slots(m), (8, 0, 0))  # vacant 0: no shortage yet
        self.assertEqual(m.value("statecache_step_operation_refusals_total",
                                 op="admit", code="RESOURCE_EXHAUSTED"), 1)

        # Step 4: begin_pass returns the three fork-source pins: 0, 1, 2 are
        # held again (LRU 0, 1, 2). Then
        #   r5 cold -> no vacant slot: evicts LRU head 0 (H0)     evicted 1
        #   r6 cold -> evicts 1 (H1)                              evicted 2
        #   r7 [x, H2] hit 2 -> claims 2; nothing left free to fork into:
        #      adopt (H2 leaves the index)           wanted 2 resumed 2
        #   r8 cold -> RESOURCE_EXHAUSTED                  refusals{admit} = 2
        r = self.ok(d.step(a, d.begin_pass(),
                           d.admit("r5", anchor_pos=8), d.admit("r6", anchor_pos=8),
                           d.admit("r7", anchor_pos=8, hashes=[17, H2], kv_hit=2),
                           d.admit("r8", anchor_pos=8)),
                    [OK] * 4 + [RESOURCE_EXHAUSTED])
        steps += 1
        self.assertEqual(r[0].begin_pass.pins_released, 3)
        self.assertEqual([list(x.admit.slots) for x in r[1:4]], [[0], [1], [2]])
        self.assertTrue(r[3].admit.adopted)

        # Step 5: checkpoint r0 with nothing free: dropped 1 (kept stays 3).
        # Release r4 (slot 7), checkpoint r0 at K0: r0 -> 7, 3 filed.  kept 4
        # Release r5 (slot 0), checkpoint r1 at K1: r1 -> 0, 4 filed.  kept 5
        r = self.ok(d.step(a, d.checkpoint("r0", 2, K0), d.release("r4"),
                           d.checkpoint("r0", 2, K0), d.release("r5"),
                           d.checkpoint("r1", 2, K1)))
        steps += 1
        self.assertEqual([r[0].checkpoint.kept, r[2].checkpoint.kept, r[4].checkpoint.kept],
                         [False, True, True])

        # Step 6: release the rest: 3 (K0) and 4 (K1) held, the other six
        # vacant (r7's adopted slot lost its hash when adopted).
        self.ok(d.step(a, *[d.release(x) for x in ["r0", "r1", "r2", "r3", "r6", "r7"]]))
        steps += 1
        m = self.daemon.metrics()
        self.assertEqual(self.slots(m), (0, 2, 6))

        # Step 7: the KV side evicted K0 and a block never checkpointed.
        #                                                    orphaned 1
        r = self.ok(d.step(a, d.unindex(K0, 999999)))
        steps += 1
        self.assertEqual(r[0].unindex.orphaned, 1)

        # Resize 8 -> 12 (grow: immediate), then 12 -> 4 (shrink): 11..5 are
        # vacant and simply go; 4 holds K1 and moves to the lowest vacant
        # slot, 0.                              relocated 1, evicted 0
        grown = d.resize(12)
        self.assertEqual((grown.num_slots, grown.relocated, grown.evicted), (12, 0, 0))
        shrunk = d.resize(4)
        self.assertEqual((shrunk.num_slots, shrunk.relocated, shrunk.evicted), (4, 1, 0))
        d.detach(a)

        # A second scheduler admits one request (slot 1) and goes silent: its
        # lease lapses, the request is released.        lease expiries 1
        b = d.attach("scenario-b", hash_block_size=4)
        r = self.ok(d.step(b, d.begin_pass(), d.admit("b0", anchor_pos=8)))
        steps += 1
        self.assertEqual(list(r[1].admit.slots), [1])
        m = self.daemon.metrics()
        self.assertEqual(m.value("statecache_sessions"), 1)
        self.assertEqual(m.value("statecache_requests"), 1)
        m = wait_for("the silent session's lease to lapse",
                     lambda: (lambda m: m if m.value("statecache_lease_expiries_total") == 1
                              else None)(self.daemon.metrics()),
                     deadline_s=self.LEASE_MS / 1000 + 10)

        # The unary RPC's observation may land just after its reply: wait
        # for it, then assert exactly (never more).
        m = wait_for("%d Step calls in statecache_rpc_duration_seconds_count" % steps,
                     lambda: (lambda m: m if m.value("statecache_rpc_duration_seconds_count",
                                                     method="Step") >= steps
                              else None)(self.daemon.metrics()),
                     deadline_s=5)
        expected = {
            ("statecache_checkpoints_kept_total", ()): 5,
            ("statecache_checkpoints_dropped_total", ()): 1,
            ("statecache_checkpoints_evicted_total", ()): 2,
            ("statecache_checkpoints_orphaned_total", ()): 1,
            ("statecache_resumes_total", (("outcome", "fork"),)): 3,
            ("statecache_resumes_total", (("outcome", "adopt"),)): 1,
            ("statecache_resumes_total", (("outcome", "miss"),)): 1,
            ("statecache_resume_blocks_wanted_total", ()): 11,
            ("statecache_resume_blocks_resumed_total", ()): 8,
            ("statecache_slots", (("state", "used"),)): 0,
            ("statecache_slots", (("state", "held"),)): 1,   # K1, now in slot 0
            ("statecache_slots", (("state", "vacant"),)): 3,
            ("statecache_slots_capacity", ()): 4,
            ("statecache_indexed_checkpoints", ()): 1,
            ("statecache_sessions", ()): 0,
            ("statecache_requests", ()): 0,
            ("statecache_lease_expiries_total", ()): 1,
            ("statecache_session_evictions_total", ()): 0,
            ("statecache_resizes_total", (("direction", "grow"),)): 1,
            ("statecache_resizes_total", (("direction", "shrink"),)): 1,
            ("statecache_step_operation_refusals_total",
             (("code", "RESOURCE_EXHAUSTED"), ("op", "admit"))): 2,
            ("statecache_rpc_duration_seconds_count", (("method", "Step"),)): steps,
            ("statecache_rpc_duration_seconds_count", (("method", "Attach"),)): 2,
            ("statecache_rpc_duration_seconds_count", (("method", "Resize"),)): 2,
            ("statecache_draining", ()): 0,
        }
        got = {key: m.value(key[0], **dict(key[1])) for key in expected}
        self.assertEqual(got, expected)
        # Nothing else was refused.
        self.assertEqual(m.total("statecache_step_operation_refusals_total"), 2)
        self.assertEqual(m.total("statecache_rpc_refusals_total"), 0)
        # One observation per operation: 8 + 4 + 6 + 5 + 5 + 6 + 1 + 2.
        self.assertEqual(sum(m.series("statecache_step_operation_duration_seconds_count")
                             .values()), 37)
        self.assertEqual(m.value("statecache_step_operation_duration_seconds_count",
                                 op="admit"), 4 + 6 + 4 + 1)
        self.assertEqual(sum(m.series("statecache_step_operations_total").values()), 37)
        self.assertEqual(m.value("statecache_step_operations_total", op="admit"),
                         4 + 6 + 4 + 1)
        status, output = harness.promtool_check_metrics(m.text)
        self.assertEqual((status, output), (0, ""))


def config_rule_files(config):
    """The rule files a Prometheus config (as written by config_from_deploy) loads."""
    import yaml
    with open(config) as f:
        return yaml.safe_load(f).get("rule_files") or []


def documented_metrics():
    """{family: (type, {label: set of documented values, or None})} from the
    metrics table of docs/operators.md (| `name`[, `name`] | type | labels | meaning |).
    `..._x_total` after a name is that name with its last words replaced."""
    path = os.path.join(harness.ARGS.source_dir, "docs", "operators.md")
    families = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("| `statecache_"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            names = re.findall(r"`([^`]+)`", cells[0])
            kind = cells[1].split()[0]
            labels = {}
            if "=" in cells[2]:
                label, _, values = cells[2].partition("=")
                labels[re.findall(r"`([^`]+)`", label)[0]] = set(re.findall(r"`([^`]+)`", values))
            else:
                labels = {name: None for name in re.findall(r"`([^`]+)`", cells[2])}
            first = names[0]
            for name in names:
                if name.startswith("..._"):
                    suffix = name[4:].split("_")
                    name = "_".join(first.split("_")[:-len(suffix)] + suffix)
                families[name] = (kind, labels)
    return families


class LabelTest(unittest.TestCase):
    """The operators' metrics table against what the daemon exports.

    Every documented family is exported with its documented type and exactly
    its documented label names, and no statecache_ family goes undocumented.
    A label the table lists values for (state, outcome, direction, reason)
    is exported with exactly those values, each of which moves when the
    scenario below makes the thing it names happen; op, method and code take
    the values the proto and gRPC define.

    The daemon has state memory (a tiny --layout), so copy and snapshot run
    and a shrink moves slot content: reason=copy|snapshot|relocation.
    """

    LAYOUT = {"format": "statecache-layout/v1", "name": "tiny", "num_layers": 1,
              "tensors": [{"name": "ssm", "dtype": "f32", "shape": [256]}]}

    def setUp(self):
        self.daemon = Daemon(["--num_slots=4", "--max_slots=8", "--hash_block_size=4",
                              "--transfer=fork", "--fork_tokens=1"],
                             layout=self.LAYOUT)
        self.driver = Driver(self.daemon)

    def tearDown(self):
        self.driver.close()
        self.daemon.stop()

    def ok(self, results, expected_codes=None):
        codes = [r.code for r in results]
        self.assertEqual(codes, expected_codes or [OK] * len(results),
                         [r.message for r in results])
        return results

    def warm_restart_labels(self, documented):
        """Daemons started one after another on one --state_dir so that
        every warm-restart outcome and fate happens, each start scraped;
        returns the (family, label, value) that moved."""
        moved = set()
        families = ("statecache_warm_restart_info",
                    "statecache_warm_restart_checkpoints")
        state = tempfile.mkdtemp(prefix="scm-state-")
        image = self.driver.stats().bytes_per_slot
        daemons = []

        def start(*extra, slots=4):
            daemons.append(Daemon(["--num_slots=%d" % slots, "--max_slots=8", "--hash_block_size=4",
                           "--transfer=fork", "--fork_tokens=1",
                           "--host_tier_bytes=%d" % (2 * image), "--state_dir=" + state,
                           "--state_save_interval=5ms"] + list(extra),
                           layout=self.LAYOUT))
            return daemons[-1]

        def note(daemon):
            m = daemon.metrics()
            for name in families:
                for label, values in documented[name][1].items():
                    for value in values or ():
                        if m.value(name, **{label: value}) > 0:
                            moved.add((name, label, value))
            return harness.stubs()[0]

        def publish(daemon, hashes):
            driver = Driver(daemon)
            s = driver.attach("warm", hash_block_size=4)
            for h in hashes:
                self.ok(driver.step(s, driver.begin_pass(), driver.admit("c", anchor_pos=8),
                                    driver.checkpoint("c", 2, h, anchor_pos=8),
                                    driver.release("c")))
            self.ok(driver.step(s, driver.begin_pass()))
            self.ok(driver.step(s, driver.begin_pass()))
            return driver

        def warm(driver):
            return driver.stats().warm_restart

        try:
            first = start()
            note(first)  # cold
            driver = publish(first, range(100, 106))  # 6 into 4 slots: 2 demoted
            self.assertEqual(driver.stats().host_tier_entries, 2)
            driver.close()
            first.stop()
            tier_images = [f for f in os.listdir(state) if f.startswith("tier-")]
            self.assertEqual(len(tier_images), 1, os.listdir(state))
            with open(os.path.join(state, tier_images[0]), "r+b") as f:
                f.write(b"\xff")  # the first tier image's first byte
            # 2 slots for the 4 device checkpoints (no_room), one tier image
            # corrupted (bad_checksum), the other restored (restored_tier).
            second = start(slots=2)
            note(second)
            driver = Driver(second)
            w = warm(driver)
            self.assertEqual((w.outcome, w.restored_checkpoints, w.restored_tier_entries,
                              w.dropped_bad_checksum), ("restored", 2, 1, 1), w)
            self.assertGreaterEqual(w.dropped_no_room, 1, w)
            driver.close()
            second.stop()
            index = os.path.join(state, "index")
            os.truncate(index, os.path.getsize(index) // 2)
            third = start()
            note(third)  # unreadable
            self.assertEqual(warm(Driver(third)).outcome, "unreadable")
            driver = publish(third, [200])
            harness.wait_for("the index to name one checkpoint",
                             lambda: warm(driver).saved_checkpoints == 1)
            driver.close()
            third.kill()  # a crash; then the region it kept goes (a reboot)
            regions = set(re.findall(r"handle=/(\S+-kept)", third.log()))
            self.assertEqual(len(regions), 1, third.log())
            os.unlink("/dev/shm/" + regions.pop())
            fourth = start()
            note(fourth)  # restored, its one checkpoint unreadable
            self.assertEqual(warm(Driver(fourth)).dropped_unreadable, 1)
            fourth.stop()
            fifth = start("--model_id=another")
            note(fifth)  # mismatch
            fifth.stop()
        finally:
            for daemon in daemons:  # a failed check leaves none running...
                daemon.kill()
                try:
                    log = daemon.log()
                except FileNotFoundError:  # stopped cleanly: nothing kept
                    continue
                for region in re.findall(r"handle=/(\S+-kept)", log):
                    if os.path.exists("/dev/shm/" + region):  # ...or kept
                        os.unlink("/dev/shm/" + region)
            shutil.rmtree(state, ignore_errors=True)
        return moved

    def test_documented_families_labels_and_values(self):
        documented = documented_metrics()
        self.assertGreaterEqual(len(documented), 25, "the operators' guide's metrics table (docs/operators.md) was not read")
        m = self.daemon.metrics()
        types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", m.text, re.M))
        exported = {n for n in types if n.startswith("statecache_")}
        self.assertEqual(exported - set(documented), set(), "exported, not in docs/operators.md")
        self.assertEqual(set(documented) - exported, set(), "in docs/operators.md, not exported")

        # Type and label names, on every series of the family.
        for name, (kind, labels) in sorted(documented.items()):
            self.assertEqual(types[name], kind, name)
            series = {"": m.series(name)} if kind != "histogram" else {
                suffix: m.series(name + suffix) for suffix in ("_bucket", "_sum", "_count")}
            for suffix, by_labels in series.items():
                self.assertTrue(by_labels, "%s%s has no series" % (name, suffix))
                for label_set in by_labels:
                    names = {k for k, _ in label_set} - ({"le"} if suffix == "_bucket" else set())
                    self.assertEqual(names, set(labels), "%s%s%s" % (name, suffix,
                                                                     dict(label_set)))

        # Label values: documented lists exactly; the others from their source.
        pb2 = harness.stubs()[0]
        operations = {f.name for f in pb2.Operation.DESCRIPTOR.oneofs_by_name["kind"].fields}
        # The proto's RPCs, and StepChannel: the Steps served on step
        # channels (docs/operators.md), counted beside the RPCs.
        methods = {method.name for service in ("StateCache", "StateCacheAdmin")
                   for method in pb2.DESCRIPTOR.services_by_name[service].methods}
        methods.add("StepChannel")
        codes = {c.name for c in self.driver.grpc.StatusCode}
        with open(os.path.join(harness.ARGS.source_dir, "CMakeLists.txt")) as f:
            version = re.search(r"project\(statecache VERSION (\S+)", f.read()).group(1)
        from_source = {"op": lambda v: self.assertEqual(v, operations),
                       "method": lambda v: self.assertEqual(v, methods),
                       "code": lambda v: self.assertLessEqual(v, codes),
                       "version": lambda v: self.assertEqual(v, {version}),
                       "backend": lambda v: self.assertEqual(v, {self.driver.stats().backend})}
        for name, (kind, labels) in sorted(documented.items()):
            family = name + ("_count" if kind == "histogram" else "")
            for label, values in labels.items():
                exported_values = {dict(ls)[label] for ls in m.series(family)}
                with self.subTest(family=name, label=label):
                    if values is not None:
                        self.assertEqual(exported_values, values)
                    else:
                        self.assertIn(label, from_source, "%s: no source for %s's values"
                                      % (name, label))
                        from_source[label](exported_values)

        # Each documented value moves when what it names happens.
        moved = set()  # (family, label, value) seen above zero

        def scrape():
            now = self.daemon.metrics()
            for name, (_, labels) in documented.items():
                for label, values in labels.items():
                    for value in values or ():
                        if now.value(name, **{label: value}) > 0:
                            moved.add((name, label, value))
            return now

        d, pb = self.driver, self.driver.pb2
        H = 4242
        s = d.attach("labels", hash_block_size=4)
        scrape()  # vacant
        # c0 checkpointed at 2 blocks and released: slot 0 is held (H).
        self.ok(d.step(s, d.begin_pass(), d.admit("c0", anchor_pos=8),
                       d.checkpoint("c0", 2, H, anchor_pos=8), d.release("c0")))
        scrape()  # held
        # A miss, and a fork from H into a free slot (pins 0).
        r = self.ok(d.step(s, d.begin_pass(),
                           d.admit("m", anchor_pos=8, hashes=[91, 92], kv_hit=2),
                           d.admit("f", anchor_pos=8, hashes=[93, H], kv_hit=2)))
        self.assertEqual([x.admit.fork_src for x in r[1:]], [-1, 0])
        scrape()  # used, miss, fork
        # Pin returned; x takes the last vacant slot, so a claims 0 itself.
        r = self.ok(d.step(s, d.begin_pass(), d.admit("x", anchor_pos=8),
                           d.admit("a", anchor_pos=8, hashes=[94, H], kv_hit=2)))
        self.assertTrue(r[2].admit.adopted, r[2])
        scrape()  # adopt
        self.ok(d.step(s, *[d.release(x) for x in ("m", "f", "x", "a")]))
        # copy between a request's two slots, and a snapshot of its state.
        self.ok(d.step(s, d.begin_pass(), d.admit("w", anchor_pos=8, width=2),
                       pb.Operation(copy=pb.Copy(request_id="w", from_index=0, to_index=1)),
                       pb.Operation(snapshot=pb.Snapshot(request_id="w", position=8, hash=77)),
                       d.release("w")))
        scrape()  # copy, snapshot
        # grow, then a shrink that moves the one live request down.
        d.resize(6)
        r = self.ok(d.step(s, d.begin_pass(),
                           *[d.admit("p%d" % i, anchor_pos=8) for i in range(4)]))
        top = max(range(4), key=lambda i: r[1 + i].admit.slots[0])
        self.ok(d.step(s, *[d.release("p%d" % i) for i in range(4) if i != top]))
        shrunk, moves = d.resize_while_passing(s, 1)
        self.assertEqual([m.request_id for m in moves], ["p%d" % top])
        self.assertEqual(shrunk.num_slots, 1)
        self.assertGreaterEqual(shrunk.relocated, 1)  # the live request, at least
        scrape()  # grow, shrink, relocation
        # The host tier: on (Resize's host_tier_bytes), a checkpoint T the
        # pool spends goes there (demotion), and a resume comes back from it
        # (promotion, outcome tier).
        self.ok(d.step(s, d.release("p%d" % top)))
        d.resize(4)
        image = d.stats().bytes_per_slot
        self.assertEqual(d.admin.Resize(pb.ResizeRequest(host_tier_bytes=4 * image),
                                        timeout=5).host_tier_bytes, 4 * image)
        T = 5151
        self.ok(d.step(s, d.begin_pass(), d.admit("t", anchor_pos=8),
                       d.checkpoint("t", 2, T, anchor_pos=8), d.release("t")))
        self.ok(d.step(s, d.begin_pass()))
        self.ok(d.step(s, d.begin_pass()))
        self.ok(d.step(s, *[d.admit("e%d" % i, anchor_pos=8) for i in range(4)]))
        self.ok(d.step(s, *[d.release("e%d" % i) for i in range(4)]))
        r = self.ok(d.step(s, d.admit("r", anchor_pos=8, hashes=[95, T], kv_hit=2)))
        self.assertTrue(r[0].admit.from_tier, r[0])
        scrape()  # tier: capacity, held, demotion, promotion, outcome tier
        # A copy into or out of the tier fails only on a failing device, which
        # a real daemon cannot be made into: tests/metrics/
        # families_built_once_test.cc fails one through FaultInjectingDevice
        # and reads these series.
        moved |= {("statecache_host_tier_copy_failures_total", "direction", v)
                  for v in ("demotion", "promotion")}
        moved |= self.warm_restart_labels(documented)
        every = {(name, label, value) for name, (_, labels) in documented.items()
                 for label, values in labels.items() for value in values or ()}
        self.assertGreaterEqual(len(every), 14)  # state 3, outcome 3, direction 2, reason 3 x 2
        self.assertEqual(every - moved, set(), "documented values that never moved")


class StepChannelTest(unittest.TestCase):
    """A client's Steps through a step channel, seen in /metrics: counted as
    RPCs of method StepChannel (and not as Step), the channel in
    statecache_step_channels while open and in the opened counter after."""

    STEPS = 7
    CLIENT = """
import sys
import statecache
client = statecache.Client.connect(sys.argv[1])
session = client.attach("", 64, transport="channel")
assert session.transport == "channel", session.transport_reason
for _ in range(int(sys.argv[2])):
    session.step().begin_pass().send()
print("stepped", flush=True)
sys.stdin.readline()
session.close()
print("closed", flush=True)
"""

    def setUp(self):
        self.daemon = Daemon(["--num_slots=16"])

    def tearDown(self):
        self.daemon.stop()

    def test_channel_steps_and_channels_are_counted(self):
        self.assertTrue(harness.ARGS.python_package,
                        "--python-package (build/python) not given")
        env = dict(os.environ, PYTHONPATH=harness.ARGS.python_package)
        client = subprocess.Popen(
            [sys.executable, "-c", self.CLIENT, self.daemon.address, str(self.STEPS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        try:
            self.assertEqual(client.stdout.readline(), "stepped\n")
            m = self.daemon.metrics()
            self.assertEqual(m.value("statecache_rpc_duration_seconds_count",
                                     method="StepChannel"), self.STEPS)
            self.assertEqual(m.value("statecache_rpc_duration_seconds_count",
                                     method="OpenStepChannel"), 1)
            self.assertEqual(m.series("statecache_rpc_duration_seconds_count").get(
                frozenset({("method", "Step")}), 0), 0)
            self.assertEqual(m.value("statecache_step_channels"), 1)
            self.assertEqual(m.value("statecache_step_channels_opened_total"), 1)
            # Operations through the channel are counted as any Step's.
            self.assertEqual(m.value("statecache_step_operations_total", op="begin_pass"),
                             self.STEPS)
            client.stdin.write("\n")
            client.stdin.flush()
            self.assertEqual(client.stdout.readline(), "closed\n")
            wait_for("the closed channel to leave statecache_step_channels",
                     lambda: self.daemon.metrics().value("statecache_step_channels") == 0)
            self.assertEqual(
                self.daemon.metrics().value("statecache_step_channels_opened_total"), 1)
        finally:
            client.kill()
            client.wait()


class PrometheusTest(unittest.TestCase):
    """A real Prometheus server scrapes the daemon, configured from deploy/."""

    DEADLINE_S = 20

    def setUp(self):
        self.daemon = Daemon(["--num_slots=48"])
        self.dir = tempfile.mkdtemp(prefix="scm-prom-")
        self.prometheus = None

    def tearDown(self):
        if self.prometheus is not None and self.prometheus.poll() is None:
            self.prometheus.send_signal(signal.SIGTERM)
            try:
                self.prometheus.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.prometheus.kill()
                self.prometheus.wait()
        self.daemon.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def config_from_deploy(self):
        """deploy/prometheus/prometheus.yml, pointed at this test's daemon."""
        import yaml
        deploy = os.path.abspath(os.path.join(harness.ARGS.source_dir, "deploy", "prometheus"))
        path = os.path.join(deploy, "prometheus.yml")
        if not os.path.exists(path):
            self.fail("%s is missing: the Prometheus test configures the server from it"
                      % path)
        with open(path) as f:
            config = yaml.safe_load(f)
        jobs = [j for j in config.get("scrape_configs") or [] if j.get("job_name") == "statecache"]
        self.assertEqual(len(jobs), 1, "%s: no scrape job named statecache" % path)
        job = jobs[0]
        self.assertTrue(job.get("static_configs"), "%s: the statecache job has no "
                        "static_configs to point at the test daemon" % path)
        job["static_configs"] = [{"targets": ["127.0.0.1:%d" % self.daemon.metrics_port]}]
        for key in ("scrape_interval", "scrape_timeout"):
            job.pop(key, None)
        config.setdefault("global", {})
        config["global"].update({"scrape_interval": "1s", "scrape_timeout": "1s",
                                 "evaluation_interval": "1s"})
        # Rule files are relative to the deploy config: keep them, so the
        # server loads the deploy rules too.
        config["rule_files"] = [os.path.join(deploy, r) for r in config.get("rule_files") or []]
        out = os.path.join(self.dir, "prometheus.yml")
        with open(out, "w") as f:
            yaml.safe_dump(config, f)
        return out, len(config["rule_files"])

    def query(self, port, promql):
        """The query's result (a list, empty when nothing matched yet). The
        server is ready when this is called: any other answer fails."""
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (
            port, urllib.parse.urlencode({"query": promql}))
        status, body = harness.http_get(url)
        self.assertEqual(status, 200, "%s: %s" % (promql, body))
        reply = json.loads(body)
        self.assertEqual(reply["status"], "success", body)
        return reply["data"]["result"]

    def start_prometheus(self, config):
        """Starts the server on a free loopback port; returns the port."""
        for attempt in range(3):
            port = harness.free_port()
            log = open(os.path.join(self.dir, "prometheus.log"), "wb")
            self.prometheus = subprocess.Popen(
                [harness.ARGS.prometheus, "--config.file=" + config,
                 "--storage.tsdb.path=" + os.path.join(self.dir, "data-%d" % attempt),
                 "--web.listen-address=127.0.0.1:%d" % port],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            log.close()
            ready = wait_for("prometheus to be ready or exit",
                             lambda: self.prometheus.poll() is not None or
                             harness.http_get("http://127.0.0.1:%d/-/ready" % port)[0] == 200,
                             deadline_s=self.DEADLINE_S, interval_s=0.1)
            if self.prometheus.poll() is None and ready:
                return port
            # Exited: most likely someone took the port between bind and use.
        with open(os.path.join(self.dir, "prometheus.log")) as f:
            self.fail("prometheus did not start:\n" + f.read())

    def test_prometheus_scrapes_the_daemon(self):
        config, num_rule_files = self.config_from_deploy()
        port = self.start_prometheus(config)

        result = wait_for(
            "statecache_slots_capacity in Prometheus",
            lambda: self.query(port, "statecache_slots_capacity"),
            deadline_s=self.DEADLINE_S, interval_s=0.2)
        self.assertEqual(len(result), 1, result)
        series = result[0]
        self.assertEqual(series["metric"]["job"], "statecache")
        self.assertEqual(series["metric"]["instance"], "127.0.0.1:%d" % self.daemon.metrics_port)
        self.assertEqual(float(series["value"][1]), 48)

        up = self.query(port, 'up{job="statecache"} == 1')
        self.assertEqual(len(up or []), 1, up)

        # The operators' queries (docs/operators.md) evaluate to the
        # series they are meant to give (an empty result would say nothing):
        # rates need two scrapes, so wait for them. (query, labels each
        # series has, how many series)
        methods = len(harness.stubs()[0].DESCRIPTOR.services_by_name["StateCache"].methods) + \
            len(harness.stubs()[0].DESCRIPTOR.services_by_name["StateCacheAdmin"].methods) + \
            1  # StepChannel
        for promql, labels, count in [
                ("sum(rate(statecache_resume_blocks_resumed_total[5m])) / "
                 "sum(rate(statecache_resume_blocks_wanted_total[5m]))", set(), 1),
                ("rate(statecache_checkpoints_evicted_total[5m])", {"job", "instance"}, 1),
                ('statecache_slots{state="vacant"}', {"__name__", "job", "instance", "state"}, 1),
                ("histogram_quantile(0.99, sum by (le, method) "
                 "(rate(statecache_rpc_duration_seconds_bucket[5m])))", {"method"}, methods)]:
            result = wait_for("a result for %s" % promql,
                              lambda: self.query(port, promql),
                              deadline_s=self.DEADLINE_S, interval_s=0.2)
            self.assertEqual(len(result), count, (promql, result))
            for series in result:
                self.assertEqual(set(series["metric"]), labels, (promql, series))
                float(series["value"][1])  # a number (NaN for 0/0 is one)
        vacant = self.query(port, 'statecache_slots{state="vacant"}')
        self.assertEqual(float(vacant[0]["value"][1]), 48)

        # The deploy rules were loaded with the config: every group of every
        # rule file, by name.
        self.assertGreater(num_rule_files, 0, "deploy/prometheus/prometheus.yml loads no "
                           "rule files; the alerts would never be evaluated")
        import yaml
        wanted = set()
        for path in config_rule_files(config):
            with open(path) as f:
                wanted.update(g["name"] for g in yaml.safe_load(f)["groups"])
        status, body = harness.http_get("http://127.0.0.1:%d/api/v1/rules" % port)
        self.assertEqual(status, 200, body)
        loaded = {g["name"] for g in json.loads(body)["data"]["groups"]}
        self.assertTrue(wanted, "the deploy rule files define no rule group")
        self.assertEqual(loaded, wanted, body)


if __name__ == "__main__":
    harness.main()

#!/usr/bin/python3
"""statecachectl's operator commands against a real daemon (ctest -L ctl).

    CommandsTest    over a daemon with two requests and a fork checkpoint:
                    status, stats and sessions (tables and --json, against
                    GetStats and the proto's every field), resize grows and
                    shrinks the pool, evict ends the session, drain --json
                    and a pass while draining
    ResizeTest      a shrink blocked by live requests prints progress as they
                    are released, then the report (before/after, relocated,
                    evicted, memory n/a without state memory); a deadline
                    that passes exits 3
    ResizeMemoryTest with state memory (--layout), the report's memory line
                    and JSON, statecache_state_bytes and status agree
    DrainTest       drain refuses Attach and admit with UNAVAILABLE; drain
                    --wait times out with 3 while a request is admitted and
                    returns 0 once it is released; drain --resume admits again
    ExitCodeTest    4 when nothing listens, 2 for bad usage (naming what
                    was wrong), 1 for a refusal, and --help documents them
    StatsWatchTest  stats --watch --count N prints N frames (tables and JSON
                    lines with rates); Ctrl-C ends it with 0
    TlsTest         --tls_ca/--tls_cert/--tls_key against a daemon serving
                    127.0.0.1 with mutual TLS: status, stats and sessions
                    (the operator by its certificate, sessions shown as
                    x509:NAME); a wrong CA, no client certificate or no TLS
                    exit 4 naming the address and why; bad TLS flags exit 2

The daemon, the gRPC driver and the paths come from tests/metrics/harness.py
(shared with the metrics tests; see it for the arguments), imported from
there.
"""

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir, "metrics"))
import harness  # noqa: E402 (tests/metrics/harness.py, by the path above)
from harness import Daemon, Driver  # noqa: E402

OK = 0
UNAVAILABLE = 14


class Ctl:
    """Runs statecachectl against one daemon."""

    def __init__(self, daemon):
        self.daemon = daemon

    def argv(self, args):
        return [harness.ARGS.statecachectl, "--address=" + self.daemon.address] + list(args)

    def run(self, *args, timeout=30):
        return subprocess.run(self.argv(args), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, text=True)

    def start(self, *args):
        return Background(self.argv(args))


class Background:
    """A statecachectl left running; its stdout is read line by line."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines = []
        self._partial = b""

    def _read_available(self, wait_s):
        readable, _, _ = select.select([self.proc.stdout], [], [], wait_s)
        if not readable:
            return False
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            return False
        self._partial += chunk
        *complete, self._partial = self._partial.split(b"\n")
        self.lines.extend(line.decode() for line in complete)
        return True

    def wait_line(self, pattern, deadline_s=harness.DEFAULT_DEADLINE_S):
        """Reads until a line matches `pattern`; returns its match."""
        regex = re.compile(pattern)
        seen = 0
        give_up = time.monotonic() + deadline_s
        while True:
            for line in self.lines[seen:]:
                match = regex.search(line)
                if match:
                    self.lines = self.lines[self.lines.index(line) + 1:]
                    return match
            seen = len(self.lines)
            left = give_up - time.monotonic()
            if left <= 0:
                raise AssertionError("no line matching %r within %.0fs; got:\n%s"
                                     % (pattern, deadline_s, "\n".join(self.lines)))
            if not self._read_available(min(left, 0.5)) and self.proc.poll() is not None:
                if not self._read_available(0):
                    raise AssertionError("statecachectl exited %s before a line matching "
                                         "%r; stdout:\n%s\nstderr:\n%s"
                                         % (self.proc.returncode, pattern,
                                            "\n".join(self.lines),
                                            self.proc.stderr.read().decode()))

    def finish(self, timeout=harness.DEFAULT_DEADLINE_S):
        """Waits for the exit; returns (code, rest of stdout, stderr)."""
        out, err = self.proc.communicate(timeout=timeout)
        text = "\n".join(self.lines) + "\n" + (self._partial + out).decode()
        return self.proc.returncode, text, err.decode()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


class CtlTestCase(unittest.TestCase):
    FLAGS = ["--num_slots=8", "--hash_block_size=4"]
    LAYOUT = None  # a layout dict: the daemon keeps host state memory

    def setUp(self):
        self.daemon = Daemon(self.FLAGS, layout=self.LAYOUT)
        self.driver = Driver(self.daemon)
        self.ctl = Ctl(self.daemon)
        self.background = []

    def tearDown(self):
        for b in self.background:
            b.kill()
        self.driver.close()
        self.daemon.stop()

    def start(self, *args):
        b = self.ctl.start(*args)
        self.background.append(b)
        return b

    def step_ok(self, session, *ops):
        results = self.driver.step(session, *ops)
        self.assertEqual([r.code for r in results], [OK] * len(results),
                         [r.message for r in results])
        return results


# The model identity of CommandsTest's daemon and session (the integration
# tests' own, tests/integration/test_util.h): one speculative token, so every
# request is two slots wide.
MODEL_ID = "it/model-7b"
BLOCK = 64
NAMESPACE = "it-namespace"
NUM_SPEC = 1
WIDTH = 1 + NUM_SPEC
# r1's two blocks; its checkpoint at 2 blocks is filed under the second.
HASHES = (0x3c51a2d07e9b4411, 0x19f08c6b2ad37502)


class CommandsTest(CtlTestCase):
    """Each command over a daemon (16 slots) with one session, "ctl-subject",
    holding two requests: r1 (two blocks, a fork checkpoint at the second)
    and r2. --quarantine=0: an evicted session's slots come back at once, as
    test_evict_ends_the_session reads them."""

    FLAGS = ["--model_id=" + MODEL_ID, "--hash_block_size=%d" % BLOCK,
             "--hash_namespace=" + NAMESPACE, "--num_spec=%d" % NUM_SPEC,
             "--num_slots=16", "--quarantine=0"]

    def setUp(self):
        super().setUp()
        d = self.driver
        self.attached = d.stub.Attach(d.pb2.AttachRequest(
            identity=self.identity(), client_name="ctl-subject"), timeout=5)
        self.session = self.attached.session_id
        self.step_ok(self.session, d.begin_pass(),
                     d.admit("r1", num_tokens=128, anchor_pos=128, hashes=HASHES, width=WIDTH),
                     d.admit("r2", num_tokens=10, width=WIDTH),
                     d.checkpoint("r1", 2, HASHES[1]))

    def identity(self):
        return self.driver.identity(model_id=MODEL_ID, hash_block_size=BLOCK,
                                    hash_namespace=NAMESPACE, num_spec=NUM_SPEC)

    def json_of(self, result):
        try:
            return json.loads(result.stdout)
        except ValueError:
            self.fail("not JSON: %r" % result.stdout)

    def test_status(self):
        r = self.ctl.run("status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        self.assertIn(str(self.attached.epoch), r.stdout)
        self.assertIn(self.daemon.address, r.stdout)
        self.assertIn("16 total", r.stdout)
        self.assertIn(MODEL_ID, r.stdout)

        r = self.ctl.run("status", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = self.json_of(r)
        self.assertEqual(j["epoch"], self.attached.epoch)
        self.assertEqual(j["slots_total"], 16)
        self.assertEqual(j["sessions"], 1)
        self.assertEqual(j["requests"], 2)
        self.assertEqual(j["identity"]["model_id"], MODEL_ID)
        self.assertEqual(j["identity"]["hash_block_size"], BLOCK)
        self.assertEqual(j["transfer"]["kind"], "fork")

    def test_stats_json_matches_get_stats(self):
        stats = self.driver.stats()
        r = self.ctl.run("stats", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = self.json_of(r)
        self.assertEqual(j["epoch"], stats.epoch)
        self.assertEqual(j["checkpoints_kept"], stats.checkpoints_kept)
        self.assertEqual(j["checkpoints_kept"], 1)
        self.assertEqual(j["indexed_hashes"], 1)
        self.assertEqual(j["slots_total"], 16)
        self.assertEqual(j["slots_used"], stats.slots_used)
        self.assertEqual(j["slots_used"] + j["slots_held"] + j["slots_vacant"], 16, r.stdout)
        self.assertEqual(j["slots_quarantined"], 0)  # --quarantine=0 fences nothing
        self.assertEqual(j["sessions"], 1)
        self.assertEqual(j["requests"], 2)
        self.assertEqual(j["warm_restart"]["outcome"], "off")
        # Every scalar of GetStatsResponse, under the proto's name.
        for path in harness.stats_field_kinds():
            node = j
            for part in path.split("."):
                self.assertIsInstance(node, dict, "%s missing from %s" % (path, r.stdout))
                self.assertIn(part, node, "%s missing from %s" % (path, r.stdout))
                node = node[part]

        # The table says the same, and prints every field its sections do
        # not (none today: a "more" section means a field went unprinted).
        r = self.ctl.run("stats")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("checkpoints", r.stdout)
        self.assertIn("kept", r.stdout)
        self.assertNotIn("unknown field", r.stdout)
        self.assertNotIn("\nmore\n", r.stdout)

    def test_sessions_lists_the_attached_scheduler(self):
        r = self.ctl.run("sessions")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("s1 ", r.stdout)
        self.assertIn("ctl-subject", r.stdout)
        # A session's id is its holder's secret: never listed.
        self.assertNotIn(self.session, r.stdout)

        r = self.ctl.run("--json", "sessions")
        self.assertEqual(r.returncode, 0, r.stderr)
        sessions = self.json_of(r)["sessions"]
        self.assertEqual(len(sessions), 1, r.stdout)
        s = sessions[0]
        self.assertEqual(s["handle"], "s1")
        self.assertNotIn("session_id", s)
        self.assertNotIn(self.session, r.stdout)
        self.assertEqual(s["principal"], "uid:%d" % os.geteuid())
        self.assertEqual(s["client_name"], "ctl-subject")
        self.assertEqual(s["requests"], 2)
        self.assertEqual(s["slots"], 2 * WIDTH)
        self.assertEqual(s["pins"], 1)

    def test_resize_grows_and_shrinks_the_pool(self):
        d = self.driver
        r = self.ctl.run("resize", "24")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(d.stats().slots_total, 24)
        self.assertIn("24", r.stdout)

        r = self.ctl.run("resize", "12", "--deadline=5s", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.json_of(r)["num_slots"], 12)
        stats = d.stats()
        self.assertEqual(stats.slots_total, 12)
        self.assertEqual(stats.slots_used + stats.slots_held + stats.slots_vacant, 12)
        self.assertEqual(stats.requests, 2, "live requests survive a shrink")

        # Refused: exit 1 with the daemon's reason on stderr, nothing changed.
        r = self.ctl.run("resize", "0")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("INVALID_ARGUMENT", r.stderr)
        self.assertEqual(d.stats().slots_total, 12)

    def test_evict_ends_the_session(self):
        d = self.driver
        r = self.ctl.run("evict", "s1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("s1", r.stdout)
        self.assertIn("2 requests released", r.stdout)
        stats = d.stats()
        self.assertEqual(stats.sessions, 0)
        self.assertEqual(stats.requests, 0)
        self.assertEqual(stats.slots_used, 0)
        self.assertEqual(stats.sessions_evicted, 1)
        self.assertEqual(stats.indexed_hashes, 1, "checkpoints outlive the session")
        # The scheduler finds out on its next call: the session is gone
        # (NOT_FOUND, what makes the C++ client's lease_lost() turn true),
        # and says why.
        with self.assertRaises(d.grpc.RpcError) as keepalive:
            d.stub.KeepAlive(d.pb2.KeepAliveRequest(session_id=self.session), timeout=5)
        self.assertEqual(keepalive.exception.code(), d.grpc.StatusCode.NOT_FOUND)
        self.assertIn("evicted", keepalive.exception.details())
        with self.assertRaises(d.grpc.RpcError) as step:
            d.step(self.session, d.begin_pass())
        self.assertEqual(step.exception.code(), d.grpc.StatusCode.NOT_FOUND)

        # Evicting it again, or anything unknown: exit 1, NOT_FOUND on stderr.
        for handle in ("s1", "nobody"):
            r = self.ctl.run("evict", handle)
            self.assertEqual(r.returncode, 1, (handle, r.stderr))
            self.assertIn("NOT_FOUND", r.stderr)
            self.assertEqual(r.stdout, "", handle)
        r = self.ctl.run("sessions")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("s1 ", r.stdout)

    def test_drain_json_and_a_pass_while_draining(self):
        # (DrainTest has the rest: Attach refused, --wait's exit 3 while a
        # request is admitted, --resume, admitting again.)
        d = self.driver
        r = self.ctl.run("drain", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIs(self.json_of(r)["draining"], True, r.stdout)
        stats = d.stats()
        self.assertTrue(stats.draining)
        self.assertEqual(stats.requests, 2, "admitted requests run on")

        # In one pass: the admit is refused, the release of a request
        # admitted before the drain works.
        results = d.step(self.session, d.begin_pass(),
                         d.admit("r3", num_tokens=10, width=WIDTH), d.release("r2"))
        self.assertEqual([r.code for r in results], [OK, UNAVAILABLE, OK],
                         [r.message for r in results])
        self.assertEqual(d.stats().requests, 1)


class ResizeTest(CtlTestCase):
    def test_shrink_shows_progress_and_reports(self):
        d = self.driver
        s = d.attach("resize-test", hash_block_size=4)
        # r0..r5 in slots 0..5; r0 checkpoints at 2 blocks (r0 -> 6, slot 0
        # filed); two passes return the pin, so slot 0 is a held checkpoint;
        # r6 takes the last vacant slot, 7. Free: only slot 0 (held).
        self.step_ok(s, d.begin_pass(), *[d.admit("r%d" % i, anchor_pos=8) for i in range(6)],
                     d.checkpoint("r0", 2, 777))
        self.step_ok(s, d.begin_pass())
        r = self.step_ok(s, d.begin_pass(), d.admit("r6", anchor_pos=8))
        self.assertEqual(list(r[1].admit.slots), [7])

        # 8 -> 4: top slot 7 (live) moves into 0, spending the checkpoint
        # there (relocated 1, evicted 1), in the session's next begin_pass
        # (the engine's passes run until the daemon has the call); then 6, 5,
        # 4 are live with nowhere to go, and go one by one as their requests
        # are released.
        ctl = self.start("resize", "4", "--deadline=20s", "--interval=50ms")
        ctl.wait_line(r"^shrinking 8 -> 4 slots")
        moves = []
        give_up = time.monotonic() + 20
        while d.stats().slots_total == 8:
            self.assertLess(time.monotonic(), give_up, "the shrink never began")
            moves += self.step_ok(s, d.begin_pass())[0].begin_pass.moves
        self.assertEqual([(m.request_id, m.from_slot, m.to_slot) for m in moves],
                         [("r6", 7, 0)])
        ctl.wait_line(r"^8 -> 4: 3 slots left to give up \(now 7:")
        for request, left in (("r0", 2), ("r5", 1)):  # r0 is in slot 6 now
            self.step_ok(s, d.begin_pass(), d.release(request))
            ctl.wait_line(r"^8 -> 4: %d slots left to give up \(now %d:" % (left, 4 + left))
        self.step_ok(s, d.begin_pass(), d.release("r4"))
        code, out, err = ctl.finish()
        self.assertEqual(code, 0, out + err)
        self.assertRegex(out, r"resized 8 -> 4 slots \(shrink, ")
        self.assertRegex(out, r"(?m)^  slots before +8$")
        self.assertRegex(out, r"(?m)^  slots after +4$")
        self.assertRegex(out, r"(?m)^  relocated +1$")
        self.assertRegex(out, r"(?m)^  evicted +1$")
        self.assertRegex(out, r"(?m)^  memory +n/a \(the daemon reports no state memory")
        stats = d.stats()
        self.assertEqual((stats.slots_total, stats.requests), (4, 4))  # r1-r3, r6
        m = self.daemon.metrics()
        self.assertEqual(m.value("statecache_resizes_total", direction="shrink"), 1, self.daemon.log())
        self.assertEqual(m.value("statecache_checkpoints_evicted_total"), 1)

        # Grow: immediate, and the JSON report says the same.
        result = self.ctl.run("--json", "resize", "10")
        self.assertEqual(result.returncode, 0, result.stderr)
        report = json.loads(result.stdout)
        self.assertEqual((report["slots_before"], report["slots_after"], report["direction"],
                          report["relocated"], report["evicted"]), (4, 10, "grow", 0, 0))
        self.assertIsNone(report["state_bytes_freed"])

    def test_deadline_exceeded_exits_3(self):
        d = self.driver
        s = d.attach("resize-test", hash_block_size=4)
        self.step_ok(s, d.begin_pass(), *[d.admit("r%d" % i) for i in range(8)])
        started = time.monotonic()
        result = self.ctl.run("resize", "4", "--deadline=300ms", "--interval=50ms")
        self.assertEqual(result.returncode, 3, result.stdout + result.stderr)
        self.assertLess(time.monotonic() - started, 10)
        self.assertIn("did not finish within", result.stderr)
        self.assertIn("DEADLINE_EXCEEDED", result.stderr)
        self.assertIn("8 -> 4: 4 slots left", result.stdout)
        self.assertEqual(d.stats().slots_total, 8)


class ResizeMemoryTest(CtlTestCase):
    """With state memory (a tiny --layout), the report says what came back."""

    LAYOUT = {"format": "statecache-layout/v1", "name": "tiny", "num_layers": 2,
              "tensors": [{"name": "ssm", "dtype": "f32", "shape": [1024]}]}
    FLAGS = ["--num_slots=16", "--hash_block_size=4"]

    def test_memory_returned_and_taken(self):
        before = self.driver.stats()
        self.assertEqual(before.backend, "host")
        per_slot = before.bytes_per_slot
        self.assertGreaterEqual(per_slot, 2 * 1024 * 4)
        self.assertEqual(before.state_bytes, 16 * per_slot)

        result = self.ctl.run("resize", "4", "--interval=50ms")
        self.assertEqual(result.returncode, 0, result.stderr)
        after = self.driver.stats()
        self.assertEqual(after.state_bytes, 4 * per_slot)

        def human(n):
            return "%.2f KiB" % (n / 1024)
        self.assertIn("  memory        %s -> %s (%s returned)"
                      % (human(16 * per_slot), human(4 * per_slot), human(12 * per_slot)),
                      result.stdout)
        self.assertEqual(self.daemon.metrics().value("statecache_state_bytes"), 4 * per_slot)

        result = self.ctl.run("--json", "resize", "10")
        self.assertEqual(result.returncode, 0, result.stderr)
        report = json.loads(result.stdout)
        self.assertEqual((report["state_bytes_before"], report["state_bytes_after"],
                          report["state_bytes_freed"]),
                         (4 * per_slot, 10 * per_slot, -6 * per_slot))
        self.assertEqual(self.daemon.metrics().value("statecache_state_bytes"), 10 * per_slot)

        status = self.ctl.run("--json", "status")
        memory = json.loads(status.stdout)
        self.assertEqual((memory["backend"], memory["layout_name"], memory["state_bytes"]),
                         ("host", "tiny", 10 * per_slot))


class DrainTest(CtlTestCase):
    def test_drain_wait_and_resume(self):
        d = self.driver
        s = d.attach("drain-test", hash_block_size=4)
        self.step_ok(s, d.begin_pass(), d.admit("live"))

        result = self.ctl.run("drain")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("draining: not admitting; 1 requests still admitted", result.stdout)
        self.assertTrue(d.stats().draining)
        self.assertEqual(self.daemon.metrics().value("statecache_draining"), 1)

        # Nobody new gets in: Attach is UNAVAILABLE, admit is refused.
        with self.assertRaises(d.grpc.RpcError) as refused:
            d.attach("newcomer", hash_block_size=4)
        self.assertEqual(refused.exception.code(), d.grpc.StatusCode.UNAVAILABLE)
        r = d.step(s, d.admit("late"))
        self.assertEqual(r[0].code, UNAVAILABLE, r[0].message)
        status = self.ctl.run("status")
        self.assertIn("no: draining", status.stdout)

        # A request still admitted: --wait gives up after --timeout, exit 3.
        result = self.ctl.run("drain", "--wait", "--timeout=300ms", "--interval=50ms")
        self.assertEqual(result.returncode, 3, result.stdout + result.stderr)
        self.assertIn("1 requests still admitted after", result.stderr)

        # Released while a --wait polls: it returns 0.
        ctl = self.start("drain", "--wait", "--timeout=20s", "--interval=50ms")
        ctl.wait_line(r"^draining: waiting for 1 requests to be released")
        self.step_ok(s, d.release("live"))
        code, out, err = ctl.finish()
        self.assertEqual(code, 0, out + err)
        self.assertIn("drained: no requests left", out)
        self.assertTrue(d.stats().draining, "drain --wait does not resume admitting")

        # --resume: admitting again.
        result = self.ctl.run("drain", "--resume")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("admitting again", result.stdout)
        self.assertFalse(d.stats().draining)
        self.step_ok(s, d.admit("after"))
        d.detach(d.attach("newcomer", hash_block_size=4))

        # JSON for scripts.
        result = self.ctl.run("--json", "drain", "--wait", "--timeout=300ms")
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertEqual(json.loads(result.stdout)["drained"], False)
        self.step_ok(s, d.release("after"))
        result = self.ctl.run("--json", "drain", "--wait", "--timeout=5s")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout)["drained"], True)


class ExitCodeTest(CtlTestCase):
    def test_exit_codes(self):
        # 4: nothing listening there.
        nobody = os.path.join(self.daemon.dir, "nobody.sock")
        result = subprocess.run([harness.ARGS.statecachectl, "--address=unix:" + nobody,
                                 "--timeout=1s", "status"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                timeout=30)
        self.assertEqual(result.returncode, 4, result.stderr)
        self.assertIn("UNAVAILABLE", result.stderr)
        self.assertEqual(result.stdout, "")

        # 2: usage errors; nothing reaches the daemon.
        before = self.daemon.metrics().total("statecache_rpc_duration_seconds_count")
        for args in (["frobnicate"], [], ["resize"], ["resize", "lots"], ["evict"],
                     ["stats", "--count=2"], ["stats", "--watch", "--count=0"],
                     ["stats", "--interval=1s"], ["drain", "--wait", "--resume"],
                     ["status", "--deadline=1s"], ["resize", "4", "--wait"],
                     ["--bogus", "status"], ["stats", "--watch", "--interval=soon"]):
            result = self.ctl.run(*args)
            self.assertEqual(result.returncode, 2, (args, result.stderr))
            self.assertTrue(result.stderr.startswith("statecachectl: "), result.stderr)
            self.assertEqual(result.stdout, "", args)
        self.assertEqual(self.daemon.metrics().total("statecache_rpc_duration_seconds_count"),
                         before, "a usage error sent something")
        # The message names what was wrong.
        result = self.ctl.run("frobnicate")
        self.assertIn("frobnicate", result.stderr)

        # 1: the daemon refused.
        result = self.ctl.run("resize", "0")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("INVALID_ARGUMENT", result.stderr)
        result = self.ctl.run("evict", "nobody")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("NOT_FOUND", result.stderr)

        # 0 and the documentation of all of them.
        result = self.ctl.run("--help")
        self.assertEqual(result.returncode, 0)
        self.assertIn("usage", result.stdout)
        self.assertIn("exit codes:", result.stdout)
        for code, words in ((0, "ok"), (1, "RPC failed"), (2, "usage error"), (3, "timed out"),
                            (4, "unreachable")):
            self.assertRegex(result.stdout, r"(?m)^  %d  .*%s" % (code, words))
        for command in ("stats --watch", "resize N", "drain [--wait]", "drain --resume",
                        "--count=N", "--interval="):
            self.assertIn(command, result.stdout)


class StatsWatchTest(CtlTestCase):
    def test_count_frames(self):
        d = self.driver
        s = d.attach("watch-test", hash_block_size=4)
        self.step_ok(s, d.begin_pass(), d.admit("w", anchor_pos=8), d.checkpoint("w", 2, 55))
        result = self.ctl.run("stats", "--watch", "--interval=100ms", "--count=3")
        self.assertEqual(result.returncode, 0, result.stderr)
        frames = re.findall(r"(?m)^statecache \S+ +\S+ +every 100ms +frame (\d)/3$",
                            result.stdout)
        self.assertEqual(frames, ["1", "2", "3"], result.stdout)
        # Totals in every frame; rates from the second on.
        self.assertEqual(len(re.findall(r"(?m)^checkpoints_kept +1 +-$", result.stdout)), 1,
                         result.stdout)
        self.assertEqual(len(re.findall(r"(?m)^checkpoints_kept +1 +0\.0$", result.stdout)), 2,
                         result.stdout)
        self.assertEqual(len(re.findall(r"(?m)^slots_used +2$", result.stdout)), 3,
                         result.stdout)
        # Every counter and gauge the proto marks appears in every frame,
        # with its proto name (the tier's resumes were once left out).
        for name, kind in harness.stats_field_kinds().items():
            if kind in ("counter", "gauge"):
                self.assertEqual(len(re.findall(r"(?m)^%s +" % re.escape(name), result.stdout)),
                                 3, name)

        result = self.ctl.run("--json", "stats", "--watch", "--interval=100ms", "--count=2")
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        self.assertEqual([f["frame"] for f in lines], [1, 2])
        self.assertIsNone(lines[0]["rates"]["checkpoints_kept_per_second"])
        self.assertEqual(lines[1]["rates"]["checkpoints_kept_per_second"], 0)
        self.assertEqual(lines[1]["checkpoints_kept"], 1)
        counters = [n for n, k in harness.stats_field_kinds().items() if k == "counter"]
        self.assertIn("resumes_tier", counters)
        for name in counters:
            self.assertIn(name + "_per_second", lines[1]["rates"])
        self.assertGreater(lines[1]["interval_seconds"], 0.05)

    def test_ctrl_c_exits_0(self):
        ctl = self.start("stats", "--watch", "--interval=100ms")
        ctl.wait_line(r"frame 2 +\(Ctrl-C stops\)$")
        ctl.proc.send_signal(signal.SIGINT)
        code, out, err = ctl.finish()
        self.assertEqual(code, 0, err)
        self.assertEqual(err, "")


class TlsTest(unittest.TestCase):
    """statecachectl over TLS. Certificates from client/python/tests/
    tls_pki.py: a test CA and a second one, a server certificate for
    127.0.0.1 and localhost, client certificates ops, eng and (from the
    second CA) stranger."""

    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.join(harness.ARGS.source_dir, "client",
                                        "python", "tests"))
        import tls_pki
        cls.pki_dir = tempfile.mkdtemp(prefix="scm-pki-")
        cls.pki = tls_pki.Pki(cls.pki_dir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.pki_dir, ignore_errors=True)

    def setUp(self):
        p = self.pki.path
        self.daemon = Daemon(
            ["--num_slots=8", "--hash_block_size=4",
             "--tls_cert=" + p("server.pem"), "--tls_key=" + p("server.key"),
             "--tls_client_ca=" + p("ca.pem"), "--admin_allow=x509:ops"],
            listen="127.0.0.1:0")
        self.assertTrue(self.daemon.address.startswith("127.0.0.1:"))
        self.ctl = Ctl(self.daemon)
        self.channels = []

    def tearDown(self):
        for channel in self.channels:
            channel.close()
        self.daemon.stop()

    def tls(self, who="ops", ca="ca"):
        """The TLS flags: trust `ca`; present `who`'s certificate if set."""
        flags = ["--tls_ca=" + self.pki.path(ca + ".pem")]
        if who:
            flags += ["--tls_cert=" + self.pki.path(who + ".pem"),
                      "--tls_key=" + self.pki.path(who + ".key")]
        return flags

    def attach_as(self, who):
        """Attaches a session over a raw TLS channel presenting `who`."""
        import grpc
        pb2, pb2_grpc = harness.stubs()
        channel = grpc.secure_channel(self.daemon.address, grpc.ssl_channel_credentials(
            root_certificates=self.pki.read("ca.pem"),
            private_key=self.pki.read(who + ".key"),
            certificate_chain=self.pki.read(who + ".pem")))
        self.channels.append(channel)
        pb2_grpc.StateCacheStub(channel).Attach(
            pb2.AttachRequest(identity=pb2.Identity(hash_block_size=4),
                              client_name=who + "-scheduler"), timeout=10)

    def test_commands_over_mutual_tls(self):
        result = self.ctl.run(*self.tls(), "status")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout, r"(?m)^address +%s$" % re.escape(self.daemon.address))
        self.assertRegex(result.stdout, r"(?m)^slots +8 total")
        result = self.ctl.run(*self.tls(), "--json", "stats")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout)["slots_total"], 8, result.stdout)

        # Operator calls: ops is one (--admin_allow=x509:ops), eng is not;
        # eng's session shows its certificate's name.
        self.attach_as("eng")
        result = self.ctl.run(*self.tls(), "--json", "sessions")
        self.assertEqual(result.returncode, 0, result.stderr)
        sessions = json.loads(result.stdout)["sessions"]
        self.assertEqual([(s["handle"], s["principal"], s["client_name"]) for s in sessions],
                         [("s1", "x509:eng", "eng-scheduler")], result.stdout)
        result = self.ctl.run(*self.tls("eng"), "sessions")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("PERMISSION_DENIED", result.stderr)
        self.assertIn("x509:eng", result.stderr)

        # The certificate names localhost too.
        result = self.ctl.run(*self.tls(), "--tls_server_name=localhost", "status")
        self.assertEqual(result.returncode, 0, result.stderr)

    def refused(self, *args):
        """Runs statecachectl expecting exit 4; returns its stderr."""
        result = self.ctl.run("--timeout=1s", *args)
        self.assertEqual(result.returncode, 4, (args, result.stdout, result.stderr))
        self.assertEqual(result.stdout, "")
        self.assertIn("statecachectl: status: UNAVAILABLE: ", result.stderr)
        self.assertIn(self.daemon.address, result.stderr)
        return result.stderr

    def test_refusals(self):
        # The daemon's certificate is not from the CA given.
        err = self.refused(*self.tls(ca="other-ca"), "status")
        self.assertRegex(err, r"(?i)certificate.verify.failed")
        self.assertIn("does its certificate chain to --tls_ca", err)
        # Mutual TLS: no client certificate, or one from another CA.
        self.refused(*self.tls(who=None), "status")
        self.refused(*self.tls(who="stranger"), "status")
        # The certificate does not carry this name.
        err = self.refused(*self.tls(), "--tls_server_name=elsewhere.invalid", "status")
        self.assertIn("elsewhere.invalid", err)
        # No TLS at all: the hint says what a TCP daemon wants.
        err = self.refused("status")
        self.assertIn("--insecure_tcp", err)

        # Usage errors (2), nothing sent.
        ca = "--tls_ca=" + self.pki.path("ca.pem")
        for args, words in (
                (["--tls_cert=" + self.pki.path("ops.pem"), "status"], "go together"),
                ([ca, "--tls_cert=" + self.pki.path("ops.pem"),
                  "--tls_key=" + self.pki.path("ops.pem"), "status"], "not a PEM private key"),
                (["--tls_ca=" + self.pki.path("missing.pem"), "status"], "cannot be read"),
                (["--tls_ca=" + self.pki.path("ops.csr"), "status"], "not a PEM certificate"),
                (["--tls_ca=", "status"], "needs a value")):
            result = self.ctl.run(*args)
            self.assertEqual(result.returncode, 2, (args, result.stderr))
            self.assertTrue(result.stderr.startswith("statecachectl: "), result.stderr)
            self.assertIn(words, result.stderr)
            self.assertEqual(result.stdout, "")
        result = subprocess.run(
            [harness.ARGS.statecachectl, "--address=unix:" + os.path.join(self.daemon.dir, "s.sock"),
             ca, "status"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("Unix socket", result.stderr)

        # --help documents the flags.
        result = self.ctl.run("--help")
        for flag in ("--tls_ca=FILE", "--tls_cert=FILE", "--tls_key=FILE",
                     "--tls_server_name=NAME"):
            self.assertIn(flag, result.stdout)


if __name__ == "__main__":
    harness.main()

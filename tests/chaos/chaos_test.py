"""Chaos: scheduler processes run passes against one statecached
while the test SIGKILLs random schedulers (and starts new ones) and SIGKILLs
the daemon (and starts a new one on the same Unix socket). Then every slot
must be accounted for.

    PYTHONPATH=build/python STATECACHED=build/bin/statecached \\
        /usr/bin/python3 -m pytest -q tests/chaos/chaos_test.py
or `ctest -L chaos` from build/. CHAOS_SEED and CHAOS_SECONDS (the chaos
phase, default 20) override the schedule.

Each scheduler (tests/chaos/scheduler.py, a real process using the
statecache package; every other one sends its steps over a StepStream)
writes its tag into every slot it takes and checks the
tags of the slots it holds before each pass, and exits 3 on any refusal
but a full pool: a slot given to two owners, or a session the daemon lost
track of, ends it. The test asserts, from outside:

- during the chaos: every scheduler alive after a daemon restart attaches
  on the new epoch and runs passes there; no process exits unless killed;
  GetStats' occupancy always sums to the pool (used + held + vacant);
  slots are quarantined (a killed scheduler's lapsed session) and return;
- at the end, every scheduler quiesced (no pins): each one's session in
  ListSessions holds exactly the slots and requests it says it holds, no
  slot is held by two, and used = what the live sessions hold, nothing
  quarantined, free = capacity - used;
- a scheduler holding slots is killed: once its lease lapses exactly its
  slots are quarantined (used = quarantined + the others' slots), then
  they return;
- the rest detach and exit 0 (and release what they reported); the pool is
  empty (free = capacity); the daemon exits 0 on SIGTERM, and its log
  (every start's) shows no error line, sanitizer report or abort; every
  shared-memory region a daemon made is gone.

No sleeps: every wait is a poll of a real condition with a deadline.
"""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import statecache
from statecache.testing import Daemon

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEDULER = os.path.join(HERE, "scheduler.py")

SEED = int(os.environ.get("CHAOS_SEED", "18"))
CHAOS_SECONDS = float(os.environ.get("CHAOS_SECONDS", "20"))
SCHEDULERS = 4
DAEMON_KILLS = 2
NUM_SLOTS = 40
LEASE_TTL = 3.0
QUARANTINE = 2.0
MODEL_ID = "chaos/model"
PACE = 0.005  # seconds between a scheduler's passes
# A layout of one f32 tensor "tag" of 2 values: the schedulers' tags.
TAG_LAYOUT = {"name": "chaos-tag", "num_layers": 1,
              "tensors": [{"name": "tag", "dtype": "f32", "shape": [2]}]}
DAEMON_FLAGS = ["--model_id=" + MODEL_ID, "--num_slots=%d" % NUM_SLOTS,
                "--lease_ttl=%gs" % LEASE_TTL,
                "--quarantine=%gs" % QUARANTINE]
# Words in a daemon log that mean it crashed or a sanitizer spoke.
# An error-level line (daemon/service/log.h) is a bug the daemon noticed.
CRASH_WORDS = ("AddressSanitizer", "ThreadSanitizer", "LeakSanitizer",
               "UndefinedBehaviorSanitizer", "runtime error:",
               "terminate called", "Check failed", "Assertion `",
               "SIGSEGV", "SIGABRT", " E statecached: ")
# Long enough for a 2-core machine shared with builds.
PATIENCE = 30.0


def poll(condition, timeout, what):
    """condition() until truthy (returned), or AssertionError after
    `timeout` seconds naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %g s waiting for %s"
                                 % (timeout, what))
        time.sleep(0.02)  # a poll interval: the condition is re-read


class Scheduler:
    """One tests/chaos/scheduler.py process and the events it printed."""

    def __init__(self, address, name, uid, seed, log_dir):
        self.name = name
        self.uid = uid
        self.log_path = os.path.join(log_dir, name + ".log")
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, SCHEDULER, "--address", address,
                 "--name", name, "--uid", str(uid), "--seed", str(seed),
                 "--model_id", MODEL_ID, "--pace", str(PACE)] +
                (["--stream"] if uid % 2 else []),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                text=True, env=env)
        self.events = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.killed = False
        self.exited = False  # told to exit

    def _read(self):
        for line in self.process.stdout:
            event = json.loads(line)
            with self._lock:
                self.events.append(event)

    def stderr(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def check_alive(self):
        code = self.process.poll()
        if code is not None and not (self.killed or self.exited):
            raise AssertionError("scheduler %s exited with %s unasked:\n%s"
                                 % (self.name, code, self.stderr()))

    def find(self, predicate, start=0):
        """The first event from index `start` that satisfies predicate."""
        self.check_alive()
        with self._lock:
            for event in self.events[start:]:
                if predicate(event):
                    return event
        return None

    def mark(self):
        with self._lock:
            return len(self.events)

    def attached_epochs(self):
        with self._lock:
            return [e["epoch"] for e in self.events
                    if e["event"] == "attached"]

    def handles(self):
        with self._lock:
            return {e["handle"] for e in self.events
                    if e["event"] == "attached" and e["handle"]}

    def running_on(self, epoch, start=0):
        """True once it attached on `epoch` and made progress there."""
        return self.find(lambda e: e["event"] == "progress" and
                         e["epoch"] == epoch, start) is not None

    def progress_since(self, start):
        """Progress events (25 passes each) from index `start`."""
        self.check_alive()
        with self._lock:
            return sum(e["event"] == "progress" for e in self.events[start:])

    def send(self, command):
        self.check_alive()
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def report(self, command="report"):
        start = self.mark()
        self.send(command)
        return poll(lambda: self.find(lambda e: e["event"] == "report",
                                      start), PATIENCE,
                    "%s's report" % self.name)

    def kill(self):
        self.killed = True
        self.process.kill()
        code = self.process.wait()
        self._reader.join()
        return code

    def exit(self):
        self.send("exit")
        self.exited = True
        self.process.stdin.close()
        code = self.process.wait(PATIENCE)
        self._reader.join()
        return code


class Monitor:
    """Polls GetStats from its own client while the chaos runs: every answer
    must add up, and quarantined slots must be seen to come and go."""

    def __init__(self, address):
        self.client = statecache.Client.connect(address, timeout=2.0)
        self.samples = 0
        self.bad = []
        self.quarantined_seen = 0   # the largest slots_quarantined
        self.returned = False       # fell, on one daemon (a restart
        self._epoch = None          # empties it: no return)
        self._last = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.05):  # a sampling interval
            try:
                s = self.client.admin.stats()
            except statecache.Error:
                continue  # the daemon is down: it is being restarted
            self.samples += 1
            if (s.slots_used + s.slots_held + s.slots_vacant != s.slots_total
                    or s.slots_quarantined > s.slots_used
                    or s.slots_quarantined < 0):
                self.bad.append(s)
            if s.epoch != self._epoch:
                self._epoch, self._last = s.epoch, 0
            if s.slots_quarantined < self._last:
                self.returned = True
            self._last = s.slots_quarantined
            self.quarantined_seen = max(self.quarantined_seen,
                                        s.slots_quarantined)

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.client.close()


def new_epoch(client, old):
    """The daemon's epoch if it answers and it is not `old`, else None
    (the channel may not have reconnected yet)."""
    try:
        epoch = client.admin.stats().epoch
    except statecache.Unavailable:
        return None
    return epoch if epoch != old else None


def by_name(sessions):
    out = {}
    for info in sessions:
        assert info.client_name not in out, (
            "two sessions named %r: %r" % (info.client_name, sessions))
        out[info.client_name] = info
    return out


def check_accounting(stats, sessions, reports, quarantined):
    """free + held by live requests + quarantined = capacity, exactly, for
    quiesced schedulers (no pins) whose `reports` say what they hold."""
    assert stats.slots_total == NUM_SLOTS
    free = stats.slots_held + stats.slots_vacant
    held = sum(len(r["slots"]) for r in reports.values())
    assert stats.slots_quarantined == quarantined, stats
    assert free + held + quarantined == stats.slots_total, (
        "free %d + held by live requests %d + quarantined %d != capacity "
        "%d\n%s\n%s" % (free, held, quarantined, stats.slots_total, stats,
                        reports))
    assert stats.slots_used == held + quarantined, stats
    assert stats.sessions == len(reports), (stats, sessions)
    assert stats.requests == sum(r["requests"] for r in reports.values())
    assert set(sessions) == set(reports), (sorted(sessions), sorted(reports))
    owner = {}
    for name, report in reports.items():
        info = sessions[name]
        assert report["epoch"] == stats.epoch, (name, report, stats.epoch)
        assert not report["lost"], (name, report)
        assert info.slots == len(report["slots"]), (name, info, report)
        assert info.requests == report["requests"], (name, info, report)
        assert info.pins == 0, (name, info)
        for slot in report["slots"]:
            assert 0 <= slot < stats.slots_total, (name, slot)
            assert slot not in owner, (
                "slot %d held by %s and %s" % (slot, owner[slot], name))
            owner[slot] = name


@pytest.fixture
def statecached():
    daemon = Daemon(DAEMON_FLAGS, layout=TAG_LAYOUT)
    yield daemon
    daemon.close()


def test_chaos(statecached, tmp_path):
    daemon = statecached
    rng = random.Random(SEED)
    admin = statecache.Client.connect(daemon.address, timeout=5.0)
    epoch = admin.admin.stats().epoch
    uids = iter(range(1, 1 << 20))
    schedulers = []       # every process started
    daemon_codes = []     # exit codes of the daemons killed

    def start(slot):
        uid = next(uids)
        s = Scheduler(daemon.address, "chaos-%d-u%d" % (slot, uid), uid,
                      SEED * 1000 + uid, str(tmp_path))
        schedulers.append(s)
        return s

    live = [start(i) for i in range(SCHEDULERS)]
    monitor = Monitor(daemon.address)
    for s in live:
        poll(lambda s=s: s.running_on(epoch), PATIENCE,
             "%s running on epoch %d" % (s.name, epoch))

    # ---- the chaos
    began = time.monotonic()
    daemon_kill_at = [began + CHAOS_SECONDS * (k + 1) / (DAEMON_KILLS + 1)
                      for k in range(DAEMON_KILLS)]
    client_kills = 0
    while time.monotonic() - began < CHAOS_SECONDS:
        if daemon_kill_at and time.monotonic() >= daemon_kill_at[0]:
            daemon_kill_at.pop(0)
            marks = {s.name: s.mark() for s in live}
            daemon_codes.append(daemon.kill())
            if rng.random() < 0.5:  # a scheduler dies while it is down
                i = rng.randrange(len(live))
                assert live[i].kill() == -signal.SIGKILL
                client_kills += 1
                live[i] = start(i)
                marks[live[i].name] = 0
            daemon.start()
            epoch = poll(lambda old=epoch: new_epoch(admin, old), PATIENCE,
                         "the new daemon to answer GetStats")
            for s in live:
                poll(lambda s=s: s.running_on(epoch, marks[s.name]),
                     PATIENCE, "%s re-attached and running on the new epoch "
                     "%d" % (s.name, epoch))
            continue
        # Kill a scheduler in the middle of its work: once it has run a
        # random number of passes more.
        i = rng.randrange(len(live))
        victim, reports = live[i], rng.randint(1, 3)  # of 25 passes each
        mark = victim.mark()
        poll(lambda: victim.progress_since(mark) >= reports, PATIENCE,
             "%s making progress" % victim.name)
        for s in live:
            s.check_alive()
        assert victim.kill() == -signal.SIGKILL
        client_kills += 1
        live[i] = start(i)
    for s in live:
        poll(lambda s=s: s.running_on(epoch), PATIENCE,
             "%s running on the final epoch" % s.name)
    monitor.stop()
    print("chaos: %d scheduler kills, %d daemon kills, %d schedulers run, "
          "%d GetStats samples, at most %d slots quarantined"
          % (client_kills, len(daemon_codes), len(schedulers),
             monitor.samples, monitor.quarantined_seen))
    assert len(daemon_codes) == DAEMON_KILLS
    assert all(code == -signal.SIGKILL for code in daemon_codes)
    assert client_kills >= 3, client_kills
    assert monitor.samples > 0 and not monitor.bad, monitor.bad[:3]
    assert monitor.quarantined_seen > 0, "no slot was ever quarantined"
    assert monitor.returned, "no quarantined slot ever came back"

    # ---- quiesced: every slot accounted for
    reports = {s.name: s.report("quiesce") for s in live}
    names = set(reports)

    def settled():
        # The killed schedulers' sessions lapsed and their quarantine ended.
        stats = admin.admin.stats()
        sessions = by_name(admin.admin.sessions())
        if set(sessions) == names and stats.slots_quarantined == 0:
            return stats, sessions
        return None

    stats, sessions = poll(settled, LEASE_TTL + QUARANTINE + PATIENCE,
                           "the dead schedulers' sessions to lapse")
    reports = {s.name: s.report() for s in live}  # unchanged since
    assert stats.epoch == epoch
    for s in live:
        assert s.attached_epochs()[-1] == epoch, (s.name, s.attached_epochs())
    check_accounting(stats, sessions, reports, quarantined=0)

    # ---- a scheduler holding slots dies: exactly its slots are fenced
    victim = max(live, key=lambda s: len(reports[s.name]["slots"]))
    fenced = len(reports[victim.name]["slots"])
    assert fenced > 0, reports
    assert victim.kill() == -signal.SIGKILL
    live.remove(victim)
    del reports[victim.name]

    def lapsed():
        sessions = by_name(admin.admin.sessions())
        if victim.name not in sessions:
            return admin.admin.stats(), sessions
        return None

    stats, sessions = poll(lapsed, LEASE_TTL + PATIENCE,
                           "%s's lease to lapse" % victim.name)
    check_accounting(stats, sessions, reports, quarantined=fenced)
    stats = poll(lambda: (lambda s: s if s.slots_quarantined == 0 else None)(
        admin.admin.stats()), QUARANTINE + PATIENCE,
        "the quarantine to end")
    check_accounting(stats, by_name(admin.admin.sessions()), reports,
                     quarantined=0)

    # ---- the rest detach and exit 0
    for s in live:
        assert s.exit() == 0, s.stderr()
        detached = s.find(lambda e: e["event"] == "detached")
        assert detached["released"] == reports[s.name]["requests"]
    stats = admin.admin.stats()
    assert stats.sessions == 0 and stats.requests == 0, stats
    assert stats.slots_used == 0 and stats.slots_quarantined == 0, stats
    assert stats.slots_held + stats.slots_vacant == NUM_SLOTS, stats
    admin.close()
    for s in schedulers:
        code = s.process.poll()
        assert code == (-signal.SIGKILL if s.killed else 0), (
            s.name, code, s.stderr())
    assert daemon.stop() == 0, daemon.log()
    log = daemon.log()
    for word in CRASH_WORDS:
        assert word not in log, "daemon log says %r:\n%s" % (word, log)
    handles = set().union(*(s.handles() for s in schedulers))
    assert len(handles) == DAEMON_KILLS + 1, handles
    left = [h for h in handles if os.path.exists("/dev/shm/" + h.lstrip("/"))]
    assert not left, "shared memory left behind: %r" % left

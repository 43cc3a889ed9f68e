#!/usr/bin/python3
"""Soak: whether a statecached's memory (VmRSS) or open file descriptors
grow, under a steady multi-scheduler workload for a while, or over
thousands of sessions coming and going as fast as they can. Both should be
flat after warm-up.

    # the workload, for --duration seconds
    PYTHONPATH=build/python /usr/bin/python3 bench/soak.py --duration 300 \\
        [--statecached build/bin/statecached] [--schedulers 4] [--interval 2]
    # the per-session part alone, thousands of times faster
    PYTHONPATH=build/python /usr/bin/python3 bench/soak.py --sessions 24000 \\
        [--end detach|evict|lapse] [--same_connection]

The workload (--duration): it starts a daemon on a private Unix socket (host
state memory, a short lease and quarantine), `--schedulers` scheduler
processes (tests/chaos/scheduler.py: real passes through the statecache
package: admit, reserve, publish/cancel, consume_fork, checkpoint,
release), and every `--churn` seconds replaces one of them, alternately by
SIGKILL (its session lapses and is fenced) and by a clean exit (it
detaches), so sessions come and go as well. Every `--interval` seconds it
prints one sample: the daemon's VmRSS (/proc/PID/status) and open fds
(/proc/PID/fd), sessions, requests, slots used and quarantined, and the
passes the schedulers ran. At the end it compares the medians of the first,
middle and last third of the samples (the first third is the warm-up) and
fits a line through the samples after warm-up: growth after warm-up is the
last third's median over the middle third's, and the slope. It prints and
asserts nothing about them (a bench; --json writes the samples and the
summary); it exits 1 only when a process exited unasked or the daemon did
not exit 0 on SIGTERM.

Session churn (--sessions N): each of N sessions attaches (on a new
connection unless --same_connection), admits one request and ends:
detached, evicted, or left to lapse (a 200 ms lease; quarantine 0). It
prints the daemon's VmRSS and open fds eight times along the way: a leak
per session or per connection grows linearly with the count; warm-up (the
remembered ended sessions, allocator caches) levels off.
"""

import argparse
import concurrent.futures
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCHEDULER = os.path.join(REPO, "tests", "chaos", "scheduler.py")
# The package from PYTHONPATH, else this checkout's build/python.
sys.path.append(os.path.join(REPO, "build", "python"))

import statecache  # noqa: E402
PACKAGE_DIR = os.path.dirname(os.path.dirname(statecache.__file__))
from statecache.testing import Daemon  # noqa: E402

MODEL_ID = "soak/model"
TAG_LAYOUT = {"name": "soak-tag", "num_layers": 1,
              "tensors": [{"name": "tag", "dtype": "f32", "shape": [2]}]}


class Scheduler:
    """A scheduler process; counts its passes from its progress lines."""

    def __init__(self, address, name, uid, pace):
        self.name = name
        self.passes = 0
        self.process = subprocess.Popen(
            [sys.executable, SCHEDULER, "--address", address, "--name", name,
             "--uid", str(uid), "--seed", str(uid), "--model_id", MODEL_ID,
             "--pace", str(pace)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=dict(
                os.environ, PYTHONPATH=PACKAGE_DIR,
                PYTHONDONTWRITEBYTECODE="1"))
        self.stderr = []
        self._threads = [threading.Thread(target=f, daemon=True)
                         for f in (self._read, self._read_stderr)]
        for t in self._threads:
            t.start()

    def _read(self):
        for line in self.process.stdout:
            event = json.loads(line)
            if event["event"] == "progress":
                self.passes += 25

    def _read_stderr(self):
        for line in self.process.stderr:
            self.stderr.append(line)

    def kill(self):
        self.process.kill()
        return self.process.wait()

    def exit(self):
        try:
            self.process.stdin.write("exit\n")
            self.process.stdin.close()
        except BrokenPipeError:
            pass  # it had already exited: its code says how
        return self.process.wait(30)


def proc_sample(pid):
    with open("/proc/%d/status" % pid) as f:
        rss = next(int(line.split()[1]) for line in f
                   if line.startswith("VmRSS:"))
    return rss, len(os.listdir("/proc/%d/fd" % pid))


def linear_slope(xs, ys):
    """Least-squares slope of ys over xs (0 for fewer than 2 points)."""
    if len(xs) < 2:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if not sxx:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def summarize(samples, key):
    n = len(samples)
    thirds = [samples[:n // 3], samples[n // 3:2 * n // 3],
              samples[2 * n // 3:]]
    medians = [statistics.median(s[key] for s in part) if part else 0
               for part in thirds]
    after = samples[n // 3:]
    slope = linear_slope([s["t"] for s in after], [s[key] for s in after])
    return {"first_third_median": medians[0],
            "middle_third_median": medians[1],
            "last_third_median": medians[2],
            "growth_after_warmup": (medians[2] / medians[1]
                                    if medians[1] else 0.0),
            "slope_per_minute_after_warmup": slope * 60,
            "min": min(s[key] for s in samples),
            "max": max(s[key] for s in samples)}


def churn_sessions(args, binary):
    """--sessions: one session after another, each ended as --end says."""
    lease = "200ms" if args.end == "lapse" else "10s"
    flags = ["--model_id=churn", "--num_slots=64", "--lease_ttl=" + lease,
             "--quarantine=0"]
    with Daemon(flags, binary=binary) as daemon, \
            statecache.Client.connect(daemon.address) as admin:
        closer = concurrent.futures.ThreadPoolExecutor(8)
        pid, start = daemon.process.pid, time.monotonic()
        print("soak: %s, %d CPUs, statecached pid %d (%s), %d sessions "
              "(each: attach, admit one request, %s; %s)"
              % (platform.node(), os.cpu_count(), pid, daemon.binary,
                 args.sessions, args.end,
                 "one connection for all" if args.same_connection
                 else "a new connection each"))
        print("%8s %10s %5s %8s" % ("sessions", "rss_kb", "fds", "t_s"))
        every = max(1, args.sessions // 8)
        for i in range(args.sessions + 1):
            if i % every == 0:
                rss, fds = proc_sample(pid)
                print("%8d %10d %5d %8.1f"
                      % (i, rss, fds, time.monotonic() - start), flush=True)
            if i == args.sessions:
                break
            client = (admin if args.same_connection else
                      statecache.Client.connect(daemon.address))
            session = client.attach("churn", 64, client_name="c%d" % i,
                                    keepalive=False)
            session.step().begin_pass().admit("r", width=1,
                                              num_tokens=10).send()
            if args.end == "detach":
                session.detach()
            elif args.end == "evict":
                # Operators name sessions by handle, never by id.
                handle, = [s.handle for s in admin.admin.sessions()
                           if s.client_name == "c%d" % i]
                admin.admin.evict(handle)
            if client is not admin:
                # Client.close() takes ~200 ms (grpc's connectivity
                # polling): off the loop.
                closer.submit(client.close)
        closer.shutdown()
    return 0


def run_workload(args, binary):
    """--duration: schedulers for that long, sampled as they run."""
    rng = random.Random(args.seed)
    flags = ["--model_id=" + MODEL_ID, "--num_slots=%d" % args.num_slots,
             "--lease_ttl=%gs" % args.lease_ttl,
             "--quarantine=%gs" % args.quarantine]
    daemon = Daemon(flags, binary=binary, layout=TAG_LAYOUT)
    pid = daemon.process.pid
    print("soak: %s, %d CPUs, statecached pid %d (%s), %d schedulers, "
          "%d slots, %g s, churn every %g s"
          % (platform.node(), os.cpu_count(), pid, daemon.binary,
             args.schedulers, args.num_slots, args.duration, args.churn))
    admin = statecache.Client.connect(daemon.address)
    uid = 0
    schedulers = []
    finished = []  # (name, how, exit code)
    for _ in range(args.schedulers):
        uid += 1
        schedulers.append(Scheduler(daemon.address, "soak-u%d" % uid, uid,
                                    args.pace))
    samples = []
    start = time.monotonic()
    next_sample, next_churn = start, start + args.churn
    kill_next = True
    # started: scheduler processes started so far (each one a session, or
    # more if it lost one).
    print("%8s %10s %5s %8s %8s %5s %11s %8s %7s"
          % ("t_s", "rss_kb", "fds", "sessions", "requests", "used",
             "quarantined", "passes", "started"))
    try:
        while True:
            now = time.monotonic()
            if now - start >= args.duration:
                break
            if args.churn and now >= next_churn:
                next_churn += args.churn
                i = rng.randrange(len(schedulers))
                old = schedulers[i]
                code = old.kill() if kill_next else old.exit()
                finished.append((old, "kill" if kill_next else "exit", code))
                kill_next = not kill_next
                uid += 1
                schedulers[i] = Scheduler(daemon.address, "soak-u%d" % uid,
                                          uid, args.pace)
            if now >= next_sample:
                next_sample += args.interval
                rss, fds = proc_sample(pid)
                stats = admin.admin.stats()
                passes = (sum(s.passes for s in schedulers) +
                          sum(s.passes for s, _, _ in finished))
                sample = {"t": round(now - start, 2), "rss_kb": rss,
                          "fds": fds, "sessions": stats.sessions,
                          "requests": stats.requests,
                          "used": stats.slots_used,
                          "quarantined": stats.slots_quarantined,
                          "passes": passes, "started": uid}
                samples.append(sample)
                print("%8.1f %10d %5d %8d %8d %5d %11d %8d %7d"
                      % (sample["t"], rss, fds, stats.sessions,
                         stats.requests, stats.slots_used,
                         stats.slots_quarantined, passes, uid), flush=True)
            # Pacing of the sampling loop (not synchronisation).
            time.sleep(max(0.0, min(next_sample, next_churn if args.churn
                                    else next_sample) - time.monotonic()))
    finally:
        for s in schedulers:
            finished.append((s, "exit", s.exit()))
        admin.close()
        daemon_code = daemon.stop()
        daemon.close()

    elapsed = time.monotonic() - start
    total_passes = sum(s.passes for s, _, _ in finished)
    bad = [(s.name, how, code) for s, how, code in finished
           if code != (-signal.SIGKILL if how == "kill" else 0)]
    summary = {
        "machine": platform.node(), "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "duration_s": round(elapsed, 1), "samples": len(samples),
        "schedulers": args.schedulers, "processes_run": len(finished),
        "passes": total_passes,
        "passes_per_s": round(total_passes / elapsed, 1),
        "rss_kb": summarize(samples, "rss_kb"),
        "fds": summarize(samples, "fds"),
        "daemon_exit": daemon_code, "unexpected_exits": bad,
    }
    print("\nsummary (the first third of the samples is the warm-up):")
    for key in ("rss_kb", "fds"):
        s = summary[key]
        print("  %-6s first/middle/last third medians %g / %g / %g; "
              "last/middle %.3f; slope after warm-up %+.1f per minute; "
              "range %g..%g"
              % (key, s["first_third_median"], s["middle_third_median"],
                 s["last_third_median"], s["growth_after_warmup"],
                 s["slope_per_minute_after_warmup"], s["min"], s["max"]))
    print("  %d passes (%.1f/s) by %d scheduler processes; daemon exit %s; "
          "unexpected exits: %s"
          % (total_passes, summary["passes_per_s"], len(finished),
             daemon_code, bad or "none"))
    for s, _, _ in finished:
        if s.stderr:
            print("  %s stderr: %s" % (s.name, "".join(s.stderr[-5:])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "samples": samples}, f, indent=1)
    # Not a performance verdict: a crash is a failure.
    return 1 if bad or daemon_code != 0 else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=None,
                        help="seconds of workload")
    parser.add_argument("--sessions", type=int, default=None,
                        help="instead of the workload: this many sessions "
                        "one after another (session churn)")
    parser.add_argument("--end", choices=("detach", "evict", "lapse"),
                        default="detach",
                        help="with --sessions: how each session ends")
    parser.add_argument("--same_connection", action="store_true",
                        help="with --sessions: every session on one "
                        "connection")
    parser.add_argument("--statecached", default=None,
                        help="daemon binary (default: $STATECACHED, else "
                        "build/bin/statecached, else PATH's)")
    parser.add_argument("--schedulers", type=int, default=4)
    parser.add_argument("--num_slots", type=int, default=64)
    parser.add_argument("--interval", type=float, default=2.0,
                        help="seconds between samples")
    parser.add_argument("--churn", type=float, default=5.0,
                        help="seconds between scheduler replacements "
                        "(0: none)")
    parser.add_argument("--pace", type=float, default=0.01,
                        help="each scheduler's seconds between passes")
    parser.add_argument("--lease_ttl", type=float, default=3.0)
    parser.add_argument("--quarantine", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default=None,
                        help="also write samples and summary here")
    args = parser.parse_args()
    if (args.duration is None) == (args.sessions is None):
        parser.error("give one of --duration (the workload) and --sessions "
                     "(session churn)")

    binary = args.statecached or os.environ.get("STATECACHED")
    built = os.path.join(REPO, "build", "bin", "statecached")
    if not binary and os.path.exists(built):
        binary = built
    if args.sessions is not None:
        return churn_sessions(args, binary)
    return run_workload(args, binary)

if __name__ == "__main__":
    sys.exit(main())

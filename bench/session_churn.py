#!/usr/bin/python3
"""Session churn against one statecached, its RSS printed as it goes: the
per-session part of bench/soak.py, thousands of times faster.

    PYTHONPATH=build/python /usr/bin/python3 bench/session_churn.py \\
        --sessions 24000 [--end detach|evict|lapse] [--same_connection]

Each session attaches (on a new connection unless --same_connection),
admits one request and ends: detached, evicted, or left to lapse (a 200 ms
lease; quarantine 0). It prints the daemon's VmRSS and open fds eight
times along the way: a leak per session or per connection grows linearly
with the count; warm-up (the remembered ended sessions, allocator caches)
levels off.
"""

import argparse
import concurrent.futures
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(os.path.dirname(HERE), "build", "python"))

import statecache  # noqa: E402
from statecache.testing import Daemon  # noqa: E402


def sample(pid):
    with open("/proc/%d/status" % pid) as f:
        rss = next(int(line.split()[1]) for line in f
                   if line.startswith("VmRSS:"))
    return rss, len(os.listdir("/proc/%d/fd" % pid))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=24000)
    parser.add_argument("--end", choices=("detach", "evict", "lapse"),
                        default="detach")
    parser.add_argument("--same_connection", action="store_true")
    parser.add_argument("--statecached", default=None)
    args = parser.parse_args()
    binary = args.statecached or os.environ.get("STATECACHED")
    built = os.path.join(os.path.dirname(HERE), "build", "bin", "statecached")
    if not binary and os.path.exists(built):
        binary = built
    lease = "200ms" if args.end == "lapse" else "10s"
    flags = ["--model_id=churn", "--num_slots=64", "--lease_ttl=" + lease,
             "--quarantine=0"]
    with Daemon(flags, binary=binary) as daemon, \
            statecache.Client.connect(daemon.address) as admin:
        closer = concurrent.futures.ThreadPoolExecutor(8)
        pid, start = daemon.process.pid, time.monotonic()
        print("%8s %10s %5s %8s" % ("sessions", "rss_kb", "fds", "t_s"))
        every = max(1, args.sessions // 8)
        for i in range(args.sessions + 1):
            if i % every == 0:
                rss, fds = sample(pid)
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


if __name__ == "__main__":
    sys.exit(main())

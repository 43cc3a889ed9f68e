#!/usr/bin/python3
"""Runs deploy/health/statecache-health, the probe the container HEALTHCHECK
and the Kubernetes probes use, against real gRPC servers on Unix sockets.

    check_health_probe.py DEPLOY_DIR REPO [STATECACHED]

- a stand-in health server (grpcio, raw bytes) answering SERVING,
  NOT_SERVING and SERVICE_UNKNOWN, and refusing an unknown service with
  NOT_FOUND as gRPC's own health service does: exit 0, 1, 1 and 2;
- a socket nobody listens on: exit 2, quickly;
- with STATECACHED (the built daemon): the real daemon on a temporary socket,
  the whole server and statecache.v1.StateCache SERVING (exit 0), an unknown
  service exit 2, and after SIGTERM no answer (exit 2).
- the request encoder and the response decoder against hand-made bytes.
"""

import concurrent.futures
import importlib.machinery
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time

import deploylib


def load_probe(path):
    loader = importlib.machinery.SourceFileLoader("statecache_health", path)
    spec = importlib.util.spec_from_loader("statecache_health", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def run_probe(probe, *args):
    proc = subprocess.run([probe] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=30)
    return proc.returncode, proc.stdout.strip()


def fake_server(socket_path, module):
    import grpc

    statuses = {"": 1, "draining": 2, "weird": 3}

    def check(request, context):
        service = request[2:].decode() if request else ""
        if service not in statuses:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return b"\x08" + bytes([statuses[service]])

    handler = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
        "Check": grpc.unary_unary_rpc_method_handler(check)})
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port("unix:" + socket_path)
    server.start()
    return server


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        return 2
    deploy, repo = sys.argv[1], sys.argv[2]
    statecached = sys.argv[3] if len(sys.argv) == 4 and os.access(sys.argv[3], os.X_OK) else None
    probe = os.path.join(deploy, "health", "statecache-health")
    failures = deploylib.Failures("health probe")
    failures.check(os.access(probe, os.X_OK), probe, "not executable")
    module = load_probe(probe)

    # Wire format, by hand.
    failures.check(module.encode_request("") == b"", probe, "empty service must encode to nothing")
    failures.check(module.encode_request("statecache.v1.StateCache") ==
                   b"\x0a\x18statecache.v1.StateCache", probe, "bad request encoding")
    failures.check(module.decode_status(b"\x08\x01") == 1, probe, "SERVING not decoded")
    failures.check(module.decode_status(b"") == 0, probe, "empty response must be UNKNOWN")
    failures.check(module.decode_status(b"\x12\x01x\x08\x02") == 2, probe, "unknown fields not skipped")
    try:
        module.decode_status(b"\x08")
        failures.add(probe, "a truncated response must be refused")
    except ValueError:
        pass

    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "fake.sock")
        server = fake_server(sock, module)
        try:
            address = "--address=unix:" + sock
            for service, want in (("", 0), ("draining", 1), ("weird", 1), ("nope", 2)):
                status, output = run_probe(probe, address, "--service=" + service, "--timeout=5")
                print("stand-in server, service %r: exit %d: %s" % (service, status, output))
                failures.check(status == want, "service %r" % service,
                               "exit %d, want %d (%s)" % (status, want, output))
        finally:
            server.stop(0)
        start = time.monotonic()
        status, output = run_probe(probe, "--address=unix:" + os.path.join(tmp, "none.sock"), "--timeout=5")
        print("no listener: exit %d after %.1fs: %s" % (status, time.monotonic() - start, output))
        failures.check(status == 2, "no listener", "exit %d, want 2" % status)

        if statecached:
            sock = os.path.join(tmp, "daemon", "statecached.sock")
            read_fd, write_fd = os.pipe()
            argv = [statecached, "--listen=unix:" + sock, "--ready_fd=%d" % write_fd]
            if "metrics_address" in deploylib.daemon_flags(repo):
                argv.append("--metrics_address=")  # no port to collide with parallel tests
            daemon = subprocess.Popen(argv, pass_fds=(write_fd,), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            os.close(write_fd)
            try:
                with os.fdopen(read_fd) as ready:
                    line = ready.read()
                if failures.check(line == "ready\n", statecached, "the daemon did not become ready"):
                    address = "--address=unix:" + sock
                    for service, want in (("", 0), ("statecache.v1.StateCache", 0),
                                          ("statecache.v1.StateCacheAdmin", 0), ("nope", 2)):
                        status, output = run_probe(probe, address, "--service=" + service)
                        print("statecached, service %r: exit %d: %s" % (service, status, output))
                        failures.check(status == want, "statecached service %r" % service,
                                       "exit %d, want %d (%s)" % (status, want, output))
                    # STATECACHE_ADDRESS is the default the image sets.
                    proc = subprocess.run([probe], env=dict(os.environ, STATECACHE_ADDRESS="unix:" + sock),
                                          stdout=subprocess.PIPE, universal_newlines=True, timeout=30)
                    failures.check(proc.returncode == 0, "STATECACHE_ADDRESS", "not used as the default")
                daemon.send_signal(signal.SIGTERM)
                daemon.wait(timeout=30)
                status, output = run_probe(probe, "--address=unix:" + sock)
                print("statecached after SIGTERM: exit %d: %s" % (status, output))
                failures.check(status == 2, "stopped statecached", "exit %d, want 2" % status)
            finally:
                if daemon.poll() is None:
                    daemon.kill()
                    daemon.wait()
        else:
            failures.note("no built statecached given: probed the stand-in server only")
    failures.done()


if __name__ == "__main__":
    sys.exit(main())

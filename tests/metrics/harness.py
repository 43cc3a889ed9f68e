"""Shared pieces of the metrics tests (tests/metrics) and the statecachectl
tests (tests/ctl/ctl_test.py, which imports this file from here).

Runs the real programs: statecached on a Unix socket in a fresh temporary
directory, with its Prometheus endpoint on 127.0.0.1 and a port the kernel
picks; statecachectl as an operator runs it; promtool and prometheus from
Debian's `prometheus` package. The gRPC driver uses stubs generated from
proto/statecache/v1/statecache.proto with protoc and grpc_python_plugin
(Debian's protobuf-compiler and protobuf-compiler-grpc), so it is written
against the .proto alone.

No sleep is used as synchronisation: readiness comes from --ready_fd, the
metrics port from the daemon's log line "metrics on http://ADDR/metrics (port
N)" (written before it signals ready), and everything else is polled with a
deadline (wait_for).

Paths come from the command line, before unittest's own arguments:
    --statecached=PATH --statecachectl=PATH --source-dir=DIR
    [--promtool=PATH] [--prometheus=PATH] [--protoc=PATH] [--grpc-plugin=PATH]
(the build passes the protoc and grpc_python_plugin it generates with)
"""

import argparse
import atexit
import importlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

ARGS = None  # the parsed paths; set by main()

# Each test gets this long for anything it waits on.
DEFAULT_DEADLINE_S = 20.0


def main():
    """Parses our flags, leaves the rest to unittest."""
    global ARGS
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--statecached", required=True)
    parser.add_argument("--statecachectl", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--promtool", default=shutil.which("promtool") or "promtool")
    parser.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus")
    parser.add_argument("--protoc", default=shutil.which("protoc") or "protoc")
    parser.add_argument("--grpc-plugin", default=shutil.which("grpc_python_plugin")
                        or "/usr/bin/grpc_python_plugin")
    # The statecache Python package (build/python), for the tests that need a
    # real client (a step channel): run in a child process of their own.
    parser.add_argument("--python-package", default="")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


def wait_for(what, predicate, deadline_s=DEFAULT_DEADLINE_S, interval_s=0.02):
    """Polls predicate() until it returns something truthy; returns it.

    Fails with `what` (and the last value seen) at the deadline.
    """
    give_up = time.monotonic() + deadline_s
    last = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= give_up:
            raise AssertionError("timed out after %.0fs waiting for %s (last: %r)"
                                 % (deadline_s, what, last))
        time.sleep(interval_s)


# ------------------------------------------------------------------ stubs

_STUBS = None


def stubs():
    """(statecache_pb2, statecache_pb2_grpc), generated once per process."""
    global _STUBS
    if _STUBS is None:
        out = tempfile.mkdtemp(prefix="scm-pb-")
        atexit.register(shutil.rmtree, out, ignore_errors=True)
        proto_root = os.path.join(ARGS.source_dir, "proto")
        subprocess.run(
            [ARGS.protoc, "--proto_path=" + proto_root, "--python_out=" + out,
             "--grpc_out=" + out, "--plugin=protoc-gen-grpc=" + ARGS.grpc_plugin,
             os.path.join(proto_root, "statecache", "v1", "statecache.proto")],
            check=True)
        sys.path.insert(0, out)
        pb2 = importlib.import_module("statecache.v1.statecache_pb2")
        pb2_grpc = importlib.import_module("statecache.v1.statecache_pb2_grpc")
        _STUBS = (pb2, pb2_grpc)
    return _STUBS


def stats_field_kinds():
    """Every scalar of GetStatsResponse by path ("warm_restart.saves") ->
    "counter", "gauge" or "other", read from the proto's MetricExport
    options: what statecachectl's views must each carry."""
    pb2, _ = stubs()
    kinds = {}

    def walk(message, prefix):
        for field in message.fields:
            name = prefix + field.name
            if field.message_type is not None:
                walk(field.message_type, name + ".")
                continue
            export = field.GetOptions().Extensions[pb2.metric]
            kinds[name] = {pb2.MetricExport.COUNTER: "counter",
                           pb2.MetricExport.GAUGE: "gauge"}.get(export.kind, "other")

    walk(pb2.GetStatsResponse.DESCRIPTOR, "")
    return kinds


# ------------------------------------------------------------------ daemon

class Daemon:
    """One statecached process in its own temporary directory, on a Unix
    socket there, or on `listen` if given (e.g. "127.0.0.1:0", with the TLS
    flags in `flags`: `address` is then the one the daemon logged, with the
    port it picked). With `layout` (a dict in the layout file format), the
    daemon keeps host state memory of that layout (--layout)."""

    READY_DEADLINE_S = 15.0

    def __init__(self, flags=(), metrics=True, listen=None, layout=None):
        self.dir = tempfile.mkdtemp(prefix="scm-")
        self.socket = os.path.join(self.dir, "statecached.sock")
        self.address = listen or "unix:" + self.socket
        self.log_path = os.path.join(self.dir, "statecached.log")
        argv = [ARGS.statecached, "--listen=" + self.address]
        argv.append("--metrics_address=" + ("127.0.0.1:0" if metrics else ""))
        read_fd, write_fd = os.pipe()
        argv.append("--ready_fd=%d" % write_fd)
        argv.extend(flags)
        if layout is not None:
            path = os.path.join(self.dir, "layout.json")
            with open(path, "w") as f:
                json.dump(layout, f)
            argv.append("--layout=" + path)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=self._log,
                                     pass_fds=(write_fd,))
        os.close(write_fd)
        try:
            self._await_ready(read_fd)
        except Exception:
            self.kill()
            raise
        finally:
            os.close(read_fd)
        if listen is not None:
            # "listening on ADDR epoch=N", written before "ready".
            found = re.findall(r"listening on (\S+) epoch=", self.log())
            if not found:
                self.kill()
                raise AssertionError("no 'listening on ADDR' line in the log:\n"
                                     + self.log())
            self.address = found[-1]
        self.metrics_port = None
        if metrics:
            match = re.search(r"metrics on http://\S+/metrics \(port (\d+)\)", self.log())
            if not match:
                self.kill()
                raise AssertionError("no 'metrics on ... (port N)' line in the log:\n"
                                     + self.log())
            self.metrics_port = int(match.group(1))
            if self.metrics_port == 0:
                self.kill()
                raise AssertionError("the daemon logged metrics port 0:\n" + self.log())

    def _await_ready(self, fd):
        give_up = time.monotonic() + self.READY_DEADLINE_S
        data = b""
        while b"\n" not in data:
            left = give_up - time.monotonic()
            if left <= 0:
                raise AssertionError("statecached not ready within %.0fs:\n%s"
                                     % (self.READY_DEADLINE_S, self.log()))
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                continue
            chunk = os.read(fd, 64)
            if not chunk:  # the daemon closed it without a word: it died
                self.proc.wait(timeout=5)
                raise AssertionError("statecached exited (%s) before ready:\n%s"
                                     % (self.proc.returncode, self.log()))
            data += chunk
        if data != b"ready\n":
            raise AssertionError("--ready_fd said %r" % data)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    @property
    def metrics_url(self):
        return "http://127.0.0.1:%d/metrics" % self.metrics_port

    def scrape(self):
        """The /metrics text, fetched over HTTP."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            if response.status != 200:
                raise AssertionError("GET %s: HTTP %d" % (self.metrics_url, response.status))
            return response.read().decode("utf-8")

    def metrics(self):
        return parse_metrics(self.scrape())

    def stop(self):
        """SIGTERM and a clean exit (status 0), or the test fails."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError("statecached did not stop on SIGTERM:\n" + self.log())
        self._log.close()
        code = self.proc.returncode
        if code != 0:
            raise AssertionError("statecached exited %s:\n%s" % (code, self.log()))
        shutil.rmtree(self.dir, ignore_errors=True)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self._log.closed:
            self._log.close()


# ------------------------------------------------------------------ metrics

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Metrics:
    """A parsed scrape: value(name, label=value, ...) for one series."""

    def __init__(self, samples, text):
        self.samples = samples  # {(name, frozenset(labels.items())): float}
        self.text = text

    def value(self, name, **labels):
        key = (name, frozenset(labels.items()))
        if key not in self.samples:
            raise AssertionError("no series %s%s in the scrape" % (name, labels or ""))
        return self.samples[key]

    def series(self, name):
        """{frozenset(labels): value} of every series named `name`."""
        return {labels: v for (n, labels), v in self.samples.items() if n == name}

    def total(self, name):
        return sum(self.series(name).values())


def parse_metrics(text):
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            raise AssertionError("unparseable exposition line: %r" % line)
        name, labels, value = match.groups()
        label_set = frozenset(_LABEL.findall(labels or ""))
        samples[(name, label_set)] = float(value)
    return Metrics(samples, text)


def promtool_check_metrics(text):
    """(exit status, output) of `promtool check metrics` on `text`."""
    result = subprocess.run([ARGS.promtool, "check", "metrics"], input=text.encode(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    return result.returncode, result.stdout.decode("utf-8", "replace")


# ------------------------------------------------------------------ gRPC driver

class Driver:
    """A scheduler and an operator over raw generated stubs."""

    def __init__(self, daemon):
        import grpc
        pb2, pb2_grpc = stubs()
        self.grpc = grpc
        self.pb2 = pb2
        self.channel = grpc.insecure_channel(daemon.address)
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.stub = pb2_grpc.StateCacheStub(self.channel)
        self.admin = pb2_grpc.StateCacheAdminStub(self.channel)

    def close(self):
        self.channel.close()

    def identity(self, **overrides):
        fields = dict(model_id="", hash_block_size=64, hash_namespace="", num_spec=0)
        fields.update(overrides)
        return self.pb2.Identity(**fields)

    def attach(self, name="metrics-test", **identity):
        response = self.stub.Attach(self.pb2.AttachRequest(
            identity=self.identity(**identity), client_name=name), timeout=5)
        return response.session_id

    def detach(self, session):
        return self.stub.Detach(self.pb2.DetachRequest(session_id=session), timeout=5)

    def step(self, session, *operations):
        """Runs one Step; returns its OperationResults."""
        response = self.stub.Step(self.pb2.StepRequest(session_id=session,
                                                       operations=list(operations)),
                                  timeout=5)
        return list(response.results)

    def stats(self):
        return self.admin.GetStats(self.pb2.GetStatsRequest(), timeout=5)

    def resize(self, target, deadline_ms=5000):
        return self.admin.Resize(self.pb2.ResizeRequest(target_slots=target,
                                                        deadline_ms=deadline_ms),
                                 timeout=deadline_ms / 1000 + 5)

    def resize_while_passing(self, session, target, deadline_ms=5000):
        """A shrink while `session`'s engine runs: the Resize call waits in
        a thread while the session steps begin_pass, where its live slots
        move. Returns the ResizeResponse and the moves its passes heard."""
        future = self.admin.Resize.future(
            self.pb2.ResizeRequest(target_slots=target, deadline_ms=deadline_ms),
            timeout=deadline_ms / 1000 + 5)
        moves = []
        while not future.done():
            moves += self.step(session, self.begin_pass())[0].begin_pass.moves
        return future.result(), moves

    # Operation builders.
    def begin_pass(self):
        return self.pb2.Operation(begin_pass=self.pb2.BeginPass())

    def admit(self, request_id, num_tokens=20, anchor_pos=0, hashes=(), kv_hit=0, width=1):
        return self.pb2.Operation(admit=self.pb2.Admit(
            request_id=request_id, width=width, num_tokens=num_tokens,
            anchor_pos=anchor_pos, block_hashes=list(hashes), kv_hit_blocks=kv_hit))

    def checkpoint(self, request_id, boundary_blocks, hash_, anchor_pos=0):
        return self.pb2.Operation(checkpoint=self.pb2.Checkpoint(
            request_id=request_id, boundary_blocks=boundary_blocks, hash=hash_,
            anchor_pos=anchor_pos))

    def release(self, request_id):
        return self.pb2.Operation(release=self.pb2.Release(request_id=request_id))

    def lookup(self, hash_):
        return self.pb2.Operation(lookup=self.pb2.Lookup(hash=hash_))

    def unindex(self, *hashes):
        return self.pb2.Operation(unindex=self.pb2.Unindex(hashes=list(hashes)))


# ------------------------------------------------------------------ misc

def free_port():
    """A loopback TCP port nothing listens on right now (bind, then close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    """(status, body) of a GET; (None, reason) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, ConnectionError, socket.timeout) as e:
        return None, str(e)

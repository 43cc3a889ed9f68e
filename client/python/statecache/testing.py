"""A real statecached for tests: :class:`Daemon`.

    from statecache.testing import Daemon

    with Daemon(["--num_slots=64", "--model_id=m"]) as daemon:
        with statecache.Client.connect(daemon.address) as client:
            ...
        daemon.restart()          # a new epoch on the same socket

The daemon listens on a Unix socket in a fresh temporary directory;
``Daemon`` returns once it wrote "ready" to its --ready_fd (no sleeping and
no polling), and stops it with SIGTERM. The binary is `binary`, else
$STATECACHED, else ``statecached`` on PATH. The metrics endpoint is off
unless the flags set --metrics_address (its default port is shared by every
daemon on the machine).

The pytest fixtures in client/python/tests/conftest.py are built on it.
"""

from __future__ import annotations

import json
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Iterable

__all__ = ["Daemon", "statecached_binary"]


def statecached_binary(binary: str | None = None) -> str:
    """The statecached to run: `binary`, else $STATECACHED, else PATH's."""
    found = binary or os.environ.get("STATECACHED") or shutil.which(
        "statecached")
    if not found:
        raise FileNotFoundError(
            "no statecached: pass binary=, set STATECACHED, or put it on PATH")
    return found


def _with_defaults(flags: Iterable[str]) -> list[str]:
    flags = list(flags)
    if not any(f.startswith("--metrics_address") for f in flags):
        flags.append("--metrics_address=")
    return flags


class Daemon:
    """statecached on ``unix:<directory>/statecached.sock``.

    Args:
        flags: extra daemon flags (e.g. ``["--num_slots=64"]``).
        binary: the statecached binary (see :func:`statecached_binary`).
        layout: a layout (a dict in the layout file format, see
            daemon/device/layout_file.h) to write to the directory and pass
            as --layout: the daemon then keeps host state memory.
        directory: where the socket and log go (default: a fresh temporary
            directory, removed by :meth:`close`).
        ready_timeout: seconds to wait for "ready" before giving up.
        listen: the --listen address instead of the directory's socket
            (e.g. ``127.0.0.1:0``: :attr:`address` is then the one the
            daemon logged, with the port it picked).
        max_open_files: if set, the daemon's RLIMIT_NOFILE (soft and hard).

    Attributes:
        address: the gRPC address (``unix:...``).
        socket: the socket's path.
        directory: the directory.
        process: the running subprocess.Popen (None when stopped).
    """

    def __init__(self, flags: Iterable[str] = (), binary: str | None = None,
                 layout: dict[str, Any] | None = None,
                 directory: str | None = None, ready_timeout: float = 30.0,
                 listen: str | None = None,
                 max_open_files: int | None = None) -> None:
        self.binary = statecached_binary(binary)
        self._own_directory = directory is None
        self.directory = directory or tempfile.mkdtemp(
            prefix="statecache-test-")
        self.socket = os.path.join(self.directory, "statecached.sock")
        self.listen = listen or "unix:" + self.socket
        self.address = self.listen
        self.max_open_files = max_open_files
        self.log_path = os.path.join(self.directory, "statecached.log")
        self.flags = list(flags)
        if layout is not None:
            path = os.path.join(self.directory, "layout.json")
            with open(path, "w") as f:
                json.dump(layout, f)
            self.flags.append("--layout=" + path)
        self.flags = _with_defaults(self.flags)
        self.ready_timeout = ready_timeout
        self.process = None
        try:
            self.start()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<statecache.testing.Daemon %s %s>" % (
            self.address, "running" if self.running else "stopped")

    @property
    def running(self) -> bool:
        """Whether the daemon process is alive."""
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Starts the daemon and returns once it is serving.
        Raises RuntimeError (with the log) if it exits or stays silent."""
        if self.running:
            raise RuntimeError("statecached is already running")
        read_end, write_end = os.pipe()
        try:
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    [self.binary, "--listen=" + self.listen,
                     "--ready_fd=%d" % write_end] + self.flags,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    pass_fds=(write_end,),
                    # No preexec_fn unless needed: it forces fork() and
                    # grpc's at-fork handlers, which crash this process
                    # when it has gRPC channels (vfork runs none).
                    preexec_fn=(self._limit if self.max_open_files
                                is not None else None))
            os.close(write_end)
            write_end = -1
            got = b""
            deadline = time.monotonic() + self.ready_timeout
            while not got.endswith(b"\n"):
                left = deadline - time.monotonic()
                readable, _, _ = select.select([read_end], [], [],
                                               max(left, 0))
                if not readable:
                    self.stop()
                    raise RuntimeError(
                        "statecached not ready within %g s\n%s"
                        % (self.ready_timeout, self.log()))
                chunk = os.read(read_end, 64)
                if not chunk:
                    code = self.process.wait()
                    self.process = None
                    raise RuntimeError(
                        "statecached exited (code %s) before it was ready\n%s"
                        % (code, self.log()))
                got += chunk
            if got != b"ready\n":
                raise RuntimeError("statecached's ready_fd said %r" % got)
            # The address as logged: with the port a TCP :0 listen picked.
            found = re.findall(r"listening on (\S+) epoch=", self.log())
            if found:
                self.address = found[-1]
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)

    def _limit(self) -> None:
        if self.max_open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE,
                               (self.max_open_files, self.max_open_files))

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then waits; returns the exit code (SIGKILL after
        `timeout`: then a negative code). None if it was not running."""
        process, self.process = self.process, None
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def kill(self) -> int | None:
        """SIGKILL (a crash); returns the exit code."""
        process, self.process = self.process, None
        if process is None:
            return None
        process.kill()
        return process.wait()

    def restart(self, flags: Iterable[str] | None = None) -> int | None:
        """Stops the daemon and starts a new one on the same socket (a new
        epoch), with `flags` instead of the old ones if given (metrics stay
        off unless they say otherwise). Returns the old one's exit code."""
        code = self.stop()
        if flags is not None:
            self.flags = _with_defaults(flags)
        self.start()
        return code

    def log(self) -> str:
        """Everything the daemon wrote (every start) so far."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def close(self) -> None:
        """Stops the daemon and removes the directory it created."""
        self.stop()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

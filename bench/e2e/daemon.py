"""A statecached of bench/e2e's own: a Unix socket in a fresh directory.

    with Daemon("/path/statecached", ["--num_slots=40"], directory) as d:
        ... d.address ...

Ready when it wrote "ready" to its --ready_fd (no sleeping, no polling);
stopped with SIGTERM (SIGKILL after 10 s) by its own PID when the block
ends, and by :func:`stop_all` (run.py calls it at exit and on SIGTERM), so a
run that fails or is interrupted leaves no daemon behind.

Standard library only (/usr/bin/python3).
"""

import os
import select
import signal
import subprocess
import time

_RUNNING = set()  # the Daemons started and not yet stopped


class DaemonError(RuntimeError):
    """The daemon exited or stayed silent before it was ready."""


class Daemon:
    """statecached listening on ``unix:<directory>/<name>.sock``.

    Args:
        binary: the statecached to run.
        flags: its flags besides --listen and --ready_fd.
        directory: where the socket and the log (``<name>.log``) go.
        name: the socket's and log's base name.
        ready_timeout: seconds to wait for "ready".

    Attributes:
        address: ``unix:...``, for --address / Client.connect.
        log_path: everything the daemon wrote.
    """

    def __init__(self, binary, flags, directory, name="statecached",
                 ready_timeout=30.0):
        self.address = "unix:" + os.path.join(directory, name + ".sock")
        self.log_path = os.path.join(directory, name + ".log")
        self.flags = list(flags)
        read_fd, write_fd = os.pipe()
        try:
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    [binary, "--listen=" + self.address,
                     "--ready_fd=%d" % write_fd] + self.flags,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    pass_fds=(write_fd,))
            _RUNNING.add(self)
            os.close(write_fd)
            write_fd = -1
            said = b""
            deadline = time.monotonic() + ready_timeout
            while not said.endswith(b"\n"):
                left = deadline - time.monotonic()
                if not select.select([read_fd], [], [], max(left, 0))[0]:
                    raise DaemonError("statecached not ready within %g s\n%s"
                                      % (ready_timeout, self.log()))
                chunk = os.read(read_fd, 64)
                if not chunk:
                    raise DaemonError(
                        "statecached exited (%s) before it was ready\n%s"
                        % (self.process.wait(), self.log()))
                said += chunk
            if said != b"ready\n":
                raise DaemonError("statecached's ready_fd said %r" % said)
        except BaseException:
            self.stop()
            raise
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def log(self):
        """What the daemon wrote so far."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self):
        """SIGTERM to this daemon's PID, then waits (SIGKILL after 10 s).
        Returns its exit code; None if it was stopped already."""
        _RUNNING.discard(self)
        process, self.process = getattr(self, "process", None), None
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            return process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()


def stop_all():
    """Stops every Daemon still running (at exit, on a signal)."""
    for daemon in list(_RUNNING):
        daemon.stop()

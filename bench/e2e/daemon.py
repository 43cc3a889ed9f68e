"""A statecached of bench/e2e's own.

    with Daemon("/path/statecached", ["--num_slots=40"], directory) as d:
        ... d.address ...

The package's test daemon (statecache.testing.Daemon: a Unix socket in a
directory of its own, ready when it wrote "ready" to its --ready_fd, no
sleeping, stopped with SIGTERM by its own PID when the block ends), each in
a subdirectory `name` of the run's `directory`, and tracked so that
:func:`stop_all` (run.py calls it at exit and on SIGTERM) leaves no daemon
behind from a run that fails or is interrupted.
"""

import os

from statecache.testing import Daemon as _TestDaemon

_RUNNING = set()  # the Daemons started and not yet stopped


class Daemon(_TestDaemon):
    """statecached on ``unix:<directory>/<name>/statecached.sock``, with
    `flags` besides --listen and --ready_fd (metrics stay off unless they
    set --metrics_address). Raises RuntimeError, with the daemon's log, if
    it exits or stays silent before it is ready."""

    def __init__(self, binary, flags, directory, name="statecached",
                 ready_timeout=30.0):
        home = os.path.join(directory, name)
        os.makedirs(home, exist_ok=True)
        super().__init__(flags, binary=binary, directory=home,
                         ready_timeout=ready_timeout)
        _RUNNING.add(self)

    def stop(self, timeout=10.0):
        _RUNNING.discard(self)
        return super().stop(timeout)


def stop_all():
    """Stops every Daemon still running (at exit, on a signal)."""
    for daemon in list(_RUNNING):
        daemon.stop()

"""Fixtures: a real statecached per test (statecache.testing.Daemon on a
private Unix socket, ready through --ready_fd, stopped with SIGTERM), a
Client connected to it and an attached Session.

The daemon binary is $STATECACHED (ctest sets it), else build/bin/statecached
of this checkout, else PATH's. Run the tests with
    PYTHONPATH=build/python STATECACHED=build/bin/statecached \\
        /usr/bin/python3 -m pytest -q client/python/tests
or `ctest -L python` from build/.

The transport of the suites' steps: $STATECACHE_TEST_TRANSPORT=grpc (every
session over the Step RPC: the package's $STATECACHE_TRANSPORT set to grpc)
or channel (sessions over their daemon's Unix socket use the step channel,
and the `session` fixture and attach() check that they do); unset: the
package's default, auto (the channel where it can be had). Tests of one
transport in particular pass transport= themselves.
"""

import os

import pytest

import statecache
from statecache.testing import Daemon

MODEL_ID = "pytest/model"
BLOCK = 64
NUM_SLOTS = 64

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir,
                                     os.pardir, os.pardir))
TRANSPORT = os.environ.get("STATECACHE_TEST_TRANSPORT", "")
if TRANSPORT not in ("", "grpc", "channel"):
    raise ValueError("STATECACHE_TEST_TRANSPORT: grpc or channel, not %r"
                     % TRANSPORT)
if TRANSPORT:
    os.environ["STATECACHE_TRANSPORT"] = (
        "grpc" if TRANSPORT == "grpc" else "auto")

if not os.environ.get("STATECACHED"):
    _built = os.path.join(_REPO, "build", "bin", "statecached")
    if os.path.exists(_built):
        os.environ["STATECACHED"] = _built

# 4 layers of a bf16 conv (3 x 64) and an f32 ssm (4 x 16 x 16), as
# tests/integration/memory_test.cc.
SMALL_LAYOUT = {
    "name": "py-small", "num_layers": 4,
    "tensors": [{"name": "conv", "dtype": "bf16", "shape": [3, 64]},
                {"name": "ssm", "dtype": "f32", "shape": [4, 16, 16]}],
}


def identity_flags(num_slots=NUM_SLOTS):
    return ["--model_id=" + MODEL_ID, "--hash_block_size=%d" % BLOCK,
            "--num_slots=%d" % num_slots]


@pytest.fixture
def start_daemon():
    """start_daemon(*flags, layout=None, num_slots=NUM_SLOTS): a Daemon with
    the test identity and `flags`, stopped (and its directory removed) at
    the end of the test."""
    daemons = []

    def start(*flags, layout=None, num_slots=NUM_SLOTS):
        daemon = Daemon(identity_flags(num_slots) + list(flags),
                        layout=layout)
        daemons.append(daemon)
        return daemon

    yield start
    for daemon in daemons:
        daemon.close()


@pytest.fixture
def daemon(start_daemon):
    return start_daemon()


@pytest.fixture
def client(daemon):
    with statecache.Client.connect(daemon.address) as c:
        yield c


def attach(client, **kwargs):
    """A session of the test identity (over the suite's transport, checked:
    see the module's docstring)."""
    kwargs.setdefault("client_name", "pytest")
    session = client.attach(MODEL_ID, BLOCK, **kwargs)
    if "transport" not in kwargs:
        check_transport(session)
    return session


def check_transport(session):
    """Asserts that `session` runs over the suite's transport (unless the
    test chose one), when it is connected over a Unix socket."""
    if not TRANSPORT or not session._client.address.startswith("unix:"):
        return
    assert session.transport == TRANSPORT, (
        "STATECACHE_TEST_TRANSPORT=%s, but the session runs over %s: %s"
        % (TRANSPORT, session.transport, session.transport_reason))


@pytest.fixture
def session(client):
    with attach(client) as s:
        yield s

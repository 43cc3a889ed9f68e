"""Who may connect and what one client can do to another, against a real
daemon: peers named by the kernel (SO_PEERCRED), sessions bound to the uid
that attached them, the operator calls closed to other users, session
handles instead of ids, paged listings, the connection cap, and recovery
from descriptor exhaustion.

The other tenant is a real process of another uid (nobody), so these tests
need root to start it; the suite runs as root.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import grpc
import pytest

import statecache
from statecache.testing import Daemon, statecached_binary
from statecache.v1 import statecache_pb2 as pb
from statecache.v1 import statecache_pb2_grpc as pb_grpc

from conftest import BLOCK, MODEL_ID, SMALL_LAYOUT, attach, identity_flags

NOBODY = 65534
_PEER_CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "peer_calls.py")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="starting another user's process needs root")


def open_to_everyone(daemon):
    """Lets any local user reach the socket (the test's own directory is
    private): the doors, not the file mode, are what is under test."""
    os.chmod(daemon.directory, 0o755)
    os.chmod(daemon.socket, 0o666)


def as_nobody(daemon, victim_session_id, *calls):
    """Runs peer_calls.py as nobody; returns call -> (code name, message).

    What nobody runs (the script and the statecache package it imports) is
    copied into a private directory made readable to nobody alone, and
    removed afterwards: the clone may live where nobody cannot read (a 0700
    home directory)."""
    with tempfile.TemporaryDirectory(prefix="statecache-peer-") as carried:
        shutil.copy(_PEER_CALLS, carried)
        # copytree follows the build tree's symlinks into the sources.
        shutil.copytree(os.path.dirname(statecache.__file__),
                        os.path.join(carried, "statecache"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        for parent, dirs, files in os.walk(carried):
            os.chown(parent, 0, NOBODY)
            os.chmod(parent, 0o750)
            for name in files:
                os.chown(os.path.join(parent, name), 0, NOBODY)
                os.chmod(os.path.join(parent, name), 0o640)
        env = dict(os.environ, PYTHONPATH=carried, PYTHONDONTWRITEBYTECODE="1")
        done = subprocess.run(
            [sys.executable, os.path.join(carried, "peer_calls.py"),
             daemon.address, MODEL_ID, str(BLOCK), victim_session_id]
            + list(calls),
            user=NOBODY, group=NOBODY, capture_output=True, text=True,
            timeout=60, env=env, cwd=carried)
    assert done.returncode == 0, done.stderr
    return {k: tuple(v) for k, v in json.loads(done.stdout).items()}


def test_another_uid_cannot_use_a_session_or_the_operator_calls(start_daemon):
    daemon = start_daemon()
    open_to_everyone(daemon)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        admitted = session.step().admit("r", width=2, num_tokens=8).send()
        assert admitted[0].ok
        before = client.admin.sessions()
        got = as_nobody(daemon, session.session_id, "ping", "stats",
                        "attach", "sessions", "resize", "drain", "evict",
                        "keep_alive", "step", "detach")
        assert got["ping"][0] == "OK" and got["stats"][0] == "OK"
        assert got["attach"][0] == "OK"  # --attach_allow is `any`
        for call in ("sessions", "resize", "drain", "evict"):
            code, message = got[call]
            assert code == "PERMISSION_DENIED", (call, got[call])
            assert "operator call" in message and "uid:65534" in message
        for call in ("keep_alive", "step", "detach"):
            code, message = got[call]
            assert code == "PERMISSION_DENIED", (call, got[call])
            assert "belongs to uid:0" in message, message
        # Nothing changed: the victim's session, request and slots are
        # where they were, the pool was not resized or drained.
        after = client.admin.sessions()
        mine = [s for s in after if s.handle == before[0].handle]
        assert len(mine) == 1 and mine[0].requests == 1
        assert mine[0].slots == before[0].slots == 2
        assert [s.principal for s in after] == ["uid:0", "uid:65534"]
        stats = client.admin.stats()
        assert stats.slots_total == 64 and not stats.draining
        assert session.step().begin_pass().send()[0].ok


def test_attach_allow_and_admin_allow_name_who_may(start_daemon):
    daemon = start_daemon("--attach_allow=uid:0", "--admin_allow=uid:%d"
                          % NOBODY)
    open_to_everyone(daemon)
    got = as_nobody(daemon, "", "attach", "sessions")
    code, message = got["attach"]
    assert code == "PERMISSION_DENIED"
    assert "uid:65534" in message and "--attach_allow (uid:0)" in message
    assert got["sessions"][0] == "OK"
    with statecache.Client.connect(daemon.address) as client:
        # Root attaches, but it is not on this daemon's operator list.
        with attach(client):
            with pytest.raises(statecache.PermissionDenied) as e:
                client.admin.sessions()
            assert "--admin_allow (uid:65534)" in e.value.message


def test_bad_access_lists_are_a_configuration_error(tmp_path):
    for flag in ("--admin_allow=any", "--attach_allow=uid:lots",
                 "--admin_allow=user:no-such-user-here"):
        done = subprocess.run(
            [statecached_binary(),
             "--listen=unix:%s/s.sock" % tmp_path, "--metrics_address=",
             flag], capture_output=True, text=True, timeout=30)
        assert done.returncode == 2, (flag, done.stderr)
        assert flag.split("=")[0] in done.stderr, done.stderr


def test_engines_in_the_sockets_group_map_the_state():
    """With the socket directory made root:nogroup 2750 to share
    the socket (as docs/operators.md says), the socket got the group but
    the region stayed root:root: engines in the group attached and then
    could not map the state. The region follows the socket's directory;
    nobody, in nogroup, maps it and writes through it."""
    shared = tempfile.mkdtemp(prefix="statecache-shared-")
    private = None
    try:
        os.chown(shared, 0, NOBODY)
        os.chmod(shared, 0o2750)
        with Daemon(flags=identity_flags(), layout=SMALL_LAYOUT,
                    directory=shared) as daemon:
            got = as_nobody(daemon, "", "map")
            assert got["map"] == ("OK", ""), got
            with statecache.Client.connect(daemon.address) as client, \
                    attach(client) as session:
                region = os.stat(
                    "/dev/shm/" + session.memory.handle.decode().lstrip("/"))
                assert region.st_gid == NOBODY
                assert region.st_mode & 0o777 == 0o660
                # What nobody wrote is in the state the daemon serves.
                assert session.memory.slot_bytes(0)[0] == 0x5A
        # A private socket directory keeps the region to the daemon's user.
        private = tempfile.mkdtemp(prefix="statecache-private-")
        with Daemon(flags=identity_flags(), layout=SMALL_LAYOUT,
                    directory=private) as daemon, \
                statecache.Client.connect(daemon.address) as client, \
                attach(client) as session:
            region = os.stat(
                "/dev/shm/" + session.memory.handle.decode().lstrip("/"))
            assert (region.st_gid, region.st_mode & 0o777) == (0, 0o600)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)


def test_sessions_are_listed_by_handle_a_page_at_a_time(daemon, client):
    sessions = [attach(client, client_name="c%d" % i) for i in range(5)]
    try:
        stub = pb_grpc.StateCacheAdminStub(
            grpc.insecure_channel(daemon.address))
        seen, token, pages = [], "", 0
        while True:
            page = stub.ListSessions(
                pb.ListSessionsRequest(page_size=2, page_token=token))
            pages += 1
            assert page.total_sessions == 5
            assert len(page.sessions) <= 2
            for info in page.sessions:
                assert info.session_id == ""
                seen.append((info.handle, info.client_name))
            token = page.next_page_token
            if not token:
                break
        assert pages == 3
        assert seen == [("s%d" % (i + 1), "c%d" % i) for i in range(5)]
        # A session that ends between pages does not shift the rest.
        first = stub.ListSessions(pb.ListSessionsRequest(page_size=2))
        sessions[2].detach()
        rest = stub.ListSessions(pb.ListSessionsRequest(
            page_size=2, page_token=first.next_page_token))
        assert [i.handle for i in rest.sessions] == ["s4", "s5"]
        for bad in (pb.ListSessionsRequest(page_token="not-a-token"),
                    pb.ListSessionsRequest(page_size=-1)):
            with pytest.raises(grpc.RpcError) as e:
                stub.ListSessions(bad)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # Every id stays out of the package's listing too.
        ids = {s.session_id for s in sessions}
        assert not ids & {s.session_id for s in client.admin.sessions()}
    finally:
        for s in sessions:
            s.close()


def _separate_channel(address, n):
    # Each its own connection: gRPC would otherwise share one subchannel.
    return grpc.insecure_channel(address, options=[
        ("grpc.use_local_subchannel_pool", 1), ("test.connection", n)])


def _ping(channel, timeout=2):
    try:
        pb_grpc.StateCacheStub(channel).Ping(pb.PingRequest(),
                                              timeout=timeout)
        return True
    except grpc.RpcError:
        return False


def _eventually(condition, seconds=20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
    return False


def test_connections_past_the_cap_are_closed_until_one_goes(start_daemon):
    daemon = start_daemon("--max_connections=2")
    first, second = (_separate_channel(daemon.address, i) for i in (1, 2))
    assert _ping(first) and _ping(second)
    third = _separate_channel(daemon.address, 3)
    assert not _ping(third), "a third connection was served past the cap"
    first.close()
    # A new connection is served once the daemon sees the first one gone.
    assert _eventually(lambda: _ping(_separate_channel(daemon.address, 4))), \
        daemon.log()
    assert "the limit (--max_connections)" in daemon.log()
    second.close()
    third.close()


def test_accepting_resumes_after_descriptors_run_out():
    # A cap above the descriptor limit, so the limit is what runs out.
    daemon = Daemon(
        ["--model_id=" + MODEL_ID, "--hash_block_size=%d" % BLOCK,
         "--num_slots=8", "--max_connections=1000"], max_open_files=64)
    try:
        idle = []
        for _ in range(120):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(daemon.socket)
            idle.append(s)
        # Connections past the limit were accepted and closed at once.
        assert _eventually(
            lambda: "out of file descriptors" in daemon.log()), daemon.log()
        for s in idle:
            s.close()
        assert _eventually(lambda: _ping(_separate_channel(daemon.address,
                                                           5))), daemon.log()
        with statecache.Client.connect(daemon.address) as client:
            with attach(client) as session:
                assert session.step().begin_pass().send()[0].ok
    finally:
        daemon.close()


def test_streams_past_the_per_connection_cap_wait_for_one_to_end(
        start_daemon):
    daemon = start_daemon("--max_streams_per_connection=2")
    channel = grpc.insecure_channel(daemon.address)
    stub = pb_grpc.StateCacheStub(channel)
    sid = stub.Attach(pb.AttachRequest(identity=pb.Identity(
        model_id=MODEL_ID, hash_block_size=BLOCK))).session_id
    begin = pb.StepRequest(session_id=sid, operations=[
        pb.Operation(begin_pass=pb.BeginPass())])

    def open_stream(timeout=None):
        # A stream whose first step was answered: it holds its HTTP/2
        # stream until the requests iterator ends.
        import queue
        requests = queue.Queue()
        requests.put(begin)
        replies = stub.StepStream(iter(requests.get, None), timeout=timeout)
        return requests, replies

    held = [open_stream() for _ in range(2)]
    for _, replies in held:
        assert next(replies).error_code == 0
    requests, waiting = open_stream(timeout=1.5)
    with pytest.raises(grpc.RpcError) as e:
        next(waiting)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # One ends: a new stream on the same connection is served.
    held[0][0].put(None)
    assert list(held[0][1]) == []
    _, fresh = open_stream(timeout=10)
    assert next(fresh).error_code == 0
    for requests, _ in held[1:]:
        requests.put(None)
    channel.close()


def test_the_log_names_sessions_by_handle_never_by_id(daemon, client):
    with attach(client) as session:
        assert session.handle == "s1"
        secret = session.session_id
    assert _eventually(lambda: "session s1 detached" in daemon.log())
    log = daemon.log()
    assert "session s1 attached" in log and "uid:0" in log
    assert secret not in log

"""A daemon restart (stop, a new daemon on the same socket) is EpochChanged
on the session's next call, unary or streamed; a lost lease found by the
renewal thread is raised on the next call."""

import pytest

import statecache

from conftest import attach


def test_unary_step_after_restart_raises_epoch_changed(daemon, client):
    session = attach(client)
    old_epoch = session.epoch
    assert session.step().admit("r", width=1, num_tokens=5).send()[0].ok
    assert daemon.restart() == 0  # SIGTERM: a clean exit
    with pytest.raises(statecache.EpochChanged) as e:
        session.step().begin_pass().send()
    assert e.value.old_epoch == old_epoch
    assert e.value.new_epoch == client.admin.stats().epoch != old_epoch
    assert isinstance(e.value, statecache.LeaseLost)
    assert "restarted" in e.value.message
    # Lost for good: every later call raises again.
    with pytest.raises(statecache.EpochChanged):
        session.step().begin_pass().send()
    with pytest.raises(statecache.EpochChanged):
        session.keep_alive()
    assert isinstance(session.lost, statecache.EpochChanged)
    session.close()  # a lost session is forgotten, not detached

    # The scheduler re-attaches to the new daemon and re-admits.
    with attach(client) as again:
        assert again.epoch == e.value.new_epoch
        assert again.step().admit("r", width=1, num_tokens=5).send()[0].ok


def test_stream_step_after_restart_raises_epoch_changed(daemon, client):
    session = attach(client)
    with session.stream() as stream:
        assert stream.step().begin_pass().send()[0].ok
        daemon.restart()
        with pytest.raises(statecache.EpochChanged) as e:
            stream.step().begin_pass().send()
        assert e.value.old_epoch == session.epoch
        with pytest.raises(statecache.EpochChanged):
            stream.step().begin_pass().send()
    with attach(client) as again, again.stream() as stream:
        assert stream.step().begin_pass().send()[0].ok


def test_keep_alive_after_restart_raises_epoch_changed(daemon, client):
    session = attach(client, keepalive=False)
    session.keep_alive()
    daemon.restart()
    with pytest.raises(statecache.EpochChanged):
        session.keep_alive()
    with pytest.raises(statecache.EpochChanged):
        session.step().begin_pass().send()


def test_daemon_down_is_unavailable_then_epoch_changed(daemon, client):
    # While no daemon answers the session may still be alive: Unavailable,
    # not lost. Once a new daemon answers, its epoch says the session is
    # gone.
    session = attach(client, keepalive=False)
    daemon.stop()
    with pytest.raises(statecache.Unavailable):
        session.step().begin_pass().send()
    assert session.lost is None
    daemon.start()
    with pytest.raises(statecache.EpochChanged):
        session.step().begin_pass().send()


def test_renewal_thread_finds_an_eviction(start_daemon):
    daemon = start_daemon("--lease_ttl=300ms")
    with statecache.Client.connect(daemon.address) as client:
        session = attach(client)
        assert session.lease_ttl == pytest.approx(0.3)
        client.admin.evict(client.admin.sessions()[0].handle)
        # The thread renews every 0.1 s; its NOT_FOUND marks the session.
        assert session._lost_event.wait(5)
        assert isinstance(session.lost, statecache.LeaseLost)
        assert not isinstance(session.lost, statecache.EpochChanged)
        with pytest.raises(statecache.LeaseLost):
            session.step().begin_pass().send()


def test_renewal_thread_finds_a_restart(start_daemon):
    daemon = start_daemon("--lease_ttl=300ms")
    with statecache.Client.connect(daemon.address) as client:
        session = attach(client)
        daemon.restart()
        assert session._lost_event.wait(5)
        with pytest.raises(statecache.EpochChanged):
            session.step().begin_pass().send()


def test_renewal_keeps_a_short_lease_alive(start_daemon):
    daemon = start_daemon("--lease_ttl=300ms")
    with statecache.Client.connect(daemon.address) as client:
        with attach(client) as session:
            # Several leases pass with no step: the thread renews. (The
            # wait is the thing under test, not a synchronisation.)
            assert not session._lost_event.wait(1.0)
            assert session.step().begin_pass().send()[0].ok
        assert client.admin.stats().lease_expiries == 0


def test_closing_the_client_stops_the_renewal(start_daemon):
    daemon = start_daemon("--lease_ttl=300ms")
    client = statecache.Client.connect(daemon.address)
    session = attach(client)
    client.close()
    session._thread.join(5)
    assert not session._thread.is_alive()
    assert session.lost is None  # stopped, not lost
    with pytest.raises(ValueError):  # a call on a closed client
        session.step().begin_pass().send()
    session.close()  # forgotten quietly


@pytest.mark.parametrize("repeat", range(3))
def test_a_new_client_connects_after_a_sigkill_beside_an_old_one(
        start_daemon, repeat):
    """A scheduler that reconnects as a new Client, in a process that still
    holds the old one with an attached (idle) session, connects and attaches
    within its timeout; the old client sees UNAVAILABLE while the daemon is
    down, then EpochChanged."""
    daemon = start_daemon()
    old = statecache.Client.connect(daemon.address)
    try:
        session = attach(old, keepalive=False)
        assert session.step().begin_pass().send()[0].ok
        daemon.kill()
        with pytest.raises(statecache.Unavailable):
            session.step().begin_pass().send()
        daemon.start()
        with statecache.Client.connect(daemon.address, timeout=5) as fresh, \
                attach(fresh) as again:
            assert again.epoch != session.epoch
            assert again.step().begin_pass().send()[0].ok
        with pytest.raises(statecache.EpochChanged):
            session.step().begin_pass().send()
    finally:
        old.close()

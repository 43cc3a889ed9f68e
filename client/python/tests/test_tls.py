"""TCP with TLS, against a real daemon and certificates this test makes
with openssl (tls_pki.py): a server certificate for 127.0.0.1 and client
certificates ("ops", "eng") from one test CA, and a second CA. Under mutual
TLS a client certificate's name is its principal (x509:NAME): sessions are
bound to it and --admin_allow names operators by it; a client without a
certificate cannot connect at all. TCP without TLS needs --insecure_tcp,
and its peers are anonymous, never operators.

The first tests talk to the daemon with raw grpc.secure_channel; the later
ones through the package's own Client.connect(tls=statecache.TlsConfig).
"""

import re
import subprocess

import grpc
import pytest

import statecache
from statecache.testing import Daemon, statecached_binary
from statecache.v1 import statecache_pb2 as pb
from statecache.v1 import statecache_pb2_grpc as pb_grpc

from conftest import BLOCK, MODEL_ID, attach, identity_flags
from tls_pki import Pki

IDENTITY = pb.Identity(model_id=MODEL_ID, hash_block_size=BLOCK)
# Connect timeout (seconds) where a connection is meant to be refused: the
# client waits this long before it gives up.
REFUSED_WITHIN = 1.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


def _tls_daemon(pki, *flags):
    return Daemon(identity_flags() + [
        "--tls_cert=" + pki.path("server.pem"),
        "--tls_key=" + pki.path("server.key")] + list(flags),
        listen="127.0.0.1:0")


def _channel(daemon, pki, who=None):
    kwargs = {"root_certificates": pki.read("ca.pem")}
    if who:
        kwargs["private_key"] = pki.read(who + ".key")
        kwargs["certificate_chain"] = pki.read(who + ".pem")
    return grpc.secure_channel(daemon.address,
                               grpc.ssl_channel_credentials(**kwargs))


def _code(call):
    try:
        call()
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


def test_mutual_tls_binds_sessions_and_operators_to_certificates(pki):
    with _tls_daemon(pki, "--tls_client_ca=" + pki.path("ca.pem"),
                     "--admin_allow=x509:ops") as daemon:
        assert daemon.address.startswith("127.0.0.1:")
        ops, eng = _channel(daemon, pki, "ops"), _channel(daemon, pki, "eng")
        ops_admin = pb_grpc.StateCacheAdminStub(ops)
        eng_scheduler = pb_grpc.StateCacheStub(eng)
        attached = eng_scheduler.Attach(
            pb.AttachRequest(identity=IDENTITY, client_name="eng"), timeout=10)
        listed = ops_admin.ListSessions(pb.ListSessionsRequest(), timeout=10)
        assert [(s.handle, s.principal, s.session_id)
                for s in listed.sessions] == [("s1", "x509:eng", "")]
        # eng is not an operator; ops cannot use eng's session.
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.StateCacheAdminStub(eng).ListSessions(
                pb.ListSessionsRequest(), timeout=10)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "x509:eng" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.StateCacheStub(ops).KeepAlive(
                pb.KeepAliveRequest(session_id=attached.session_id),
                timeout=10)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "belongs to x509:eng" in e.value.details()
        eng_scheduler.KeepAlive(
            pb.KeepAliveRequest(session_id=attached.session_id), timeout=10)


def test_mutual_tls_refuses_a_client_without_a_certificate(pki):
    with _tls_daemon(pki, "--tls_client_ca=" + pki.path("ca.pem")) as daemon:
        anonymous = pb_grpc.StateCacheStub(_channel(daemon, pki))
        assert _code(lambda: anonymous.Ping(pb.PingRequest(), timeout=5)) \
            == grpc.StatusCode.UNAVAILABLE
        plaintext = pb_grpc.StateCacheStub(
            grpc.insecure_channel(daemon.address))
        assert _code(lambda: plaintext.Ping(pb.PingRequest(), timeout=5)) \
            == grpc.StatusCode.UNAVAILABLE
        with_cert = pb_grpc.StateCacheStub(_channel(daemon, pki, "eng"))
        with_cert.Ping(pb.PingRequest(), timeout=10)


def test_server_only_tls_serves_anonymous_schedulers_not_operators(pki):
    with _tls_daemon(pki) as daemon:
        channel = _channel(daemon, pki)
        pb_grpc.StateCacheStub(channel).Attach(
            pb.AttachRequest(identity=IDENTITY), timeout=10)
        admin = pb_grpc.StateCacheAdminStub(channel)
        assert admin.GetStats(pb.GetStatsRequest(), timeout=10).sessions == 1
        assert _code(lambda: admin.Drain(pb.DrainRequest(), timeout=10)) \
            == grpc.StatusCode.PERMISSION_DENIED


def test_tcp_needs_tls_or_an_explicit_insecure_tcp(tmp_path):
    done = subprocess.run(
        [statecached_binary(), "--listen=127.0.0.1:0", "--metrics_address="],
        capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert "without TLS" in done.stderr and "--insecure_tcp" in done.stderr
    for flags in (["--tls_cert=/nonexistent.pem", "--tls_key=/x.key"],
                  ["--tls_cert=" + __file__]):
        done = subprocess.run(
            [statecached_binary(), "--listen=127.0.0.1:0",
             "--metrics_address="] + flags,
            capture_output=True, text=True, timeout=30)
        assert done.returncode == 2, (flags, done.stderr)
        assert "--tls_" in done.stderr, done.stderr

    with Daemon(identity_flags() + ["--insecure_tcp"],
                listen="127.0.0.1:0") as daemon:
        assert "NO encryption and NO authentication" in daemon.log()
        channel = grpc.insecure_channel(daemon.address)
        pb_grpc.StateCacheStub(channel).Ping(pb.PingRequest(), timeout=10)
        admin = pb_grpc.StateCacheAdminStub(channel)
        with pytest.raises(grpc.RpcError) as e:
            admin.Resize(pb.ResizeRequest(target_slots=8), timeout=10)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "anonymous" in e.value.details()
        assert admin.GetStats(pb.GetStatsRequest(),
                              timeout=10).slots_total == 64
        # The package's Client: plaintext unless given tls.
        with statecache.Client.connect(daemon.address) as client:
            assert client.admin.stats().slots_total == 64


# ------------------------------------------------ statecache.Client over TLS


def _tls(pki, who=None, ca="ca", **kwargs):
    """A TlsConfig trusting `ca`, with client certificate `who` if given."""
    if who is None:
        return statecache.TlsConfig.from_files(pki.path(ca + ".pem"), **kwargs)
    return statecache.TlsConfig.from_files(
        pki.path(ca + ".pem"), pki.path(who + ".pem"), pki.path(who + ".key"),
        **kwargs)


def _refused(daemon, tls):
    """The Unavailable that Client.connect raises; checks it names the
    address and says TLS."""
    with pytest.raises(statecache.Unavailable) as e:
        statecache.Client.connect(daemon.address, REFUSED_WITHIN, tls=tls)
    assert daemon.address in e.value.message, e.value.message
    assert "TLS connection" in e.value.message, e.value.message
    return e.value.message


def test_client_with_mutual_tls_attaches_steps_and_is_named_by_its_cert(pki):
    with _tls_daemon(pki, "--tls_client_ca=" + pki.path("ca.pem"),
                     "--admin_allow=x509:ops") as daemon, \
            statecache.Client.connect(daemon.address,
                                      tls=_tls(pki, "eng")) as eng, \
            statecache.Client.connect(daemon.address,
                                      tls=_tls(pki, "ops")) as ops:
        with attach(eng, client_name="eng-scheduler") as session:
            results = (session.step().begin_pass()
                       .admit("r1", width=1, num_tokens=2 * BLOCK,
                              anchor_pos=2 * BLOCK, block_hashes=[11, 12])
                       .send())
            assert [r.ok for r in results] == [True, True], results
            assert len(results[1].check().slots) == 1
            with session.stream() as stream:
                released = stream.step().release("r1").send()[0].check()
            assert released.slots_released == 1
            sessions = ops.admin.sessions()
            assert [(s.handle, s.principal, s.client_name)
                    for s in sessions] == [("s1", "x509:eng",
                                            "eng-scheduler")]
            # eng is no operator.
            with pytest.raises(statecache.PermissionDenied) as e:
                eng.admin.sessions()
            assert "x509:eng" in e.value.message
        assert ops.admin.stats().sessions == 0


def test_client_refuses_a_daemon_certificate_from_another_ca(pki):
    with _tls_daemon(pki, "--tls_client_ca=" + pki.path("ca.pem")) as daemon:
        message = _refused(daemon, _tls(pki, "eng", ca="other-ca"))
        assert re.search(r"(?i)certificate.verify.failed", message), message


def test_mutual_tls_refuses_a_client_without_an_accepted_certificate(pki):
    with _tls_daemon(pki, "--tls_client_ca=" + pki.path("ca.pem")) as daemon:
        _refused(daemon, _tls(pki))                 # no certificate
        _refused(daemon, _tls(pki, "stranger"))     # another CA's
        with statecache.Client.connect(daemon.address,
                                       tls=_tls(pki, "eng")) as client:
            client.ping()


def test_client_server_name_and_server_only_tls(pki):
    with _tls_daemon(pki) as daemon:
        # The certificate names 127.0.0.1 and localhost.
        for name in (None, "localhost"):
            with statecache.Client.connect(
                    daemon.address, tls=_tls(pki, server_name=name)) as c:
                with attach(c):
                    assert c.admin.stats().sessions == 1
                # Server-only TLS: anonymous, no operator.
                with pytest.raises(statecache.PermissionDenied) as e:
                    c.admin.drain()
                assert "anonymous" in e.value.message
        message = _refused(daemon, _tls(pki, server_name="elsewhere.invalid"))
        assert "elsewhere.invalid" in message, message
        # A plaintext client gets nowhere either.
        with pytest.raises(statecache.Unavailable) as e:
            statecache.Client.connect(daemon.address, REFUSED_WITHIN)
        assert daemon.address in e.value.message


def test_tls_config_checks_its_arguments(pki, tmp_path):
    with pytest.raises(TypeError, match="from_files"):
        statecache.TlsConfig(root_certificates=pki.path("ca.pem"))
    with pytest.raises(ValueError, match="go together"):
        statecache.TlsConfig(certificate_chain=pki.read("eng.pem"))
    with pytest.raises(ValueError, match="not a PEM certificate"):
        statecache.TlsConfig(root_certificates=b"garbage")
    with pytest.raises(ValueError, match="private_key: not a PEM private key"):
        statecache.TlsConfig(certificate_chain=pki.read("eng.pem"),
                             private_key=pki.read("eng.pem"))
    with pytest.raises(ValueError, match="eng.csr: not a PEM certificate"):
        statecache.TlsConfig.from_files(ca_file=pki.path("eng.csr"))
    not_pem = tmp_path / "not.pem"
    not_pem.write_bytes(b"garbage")
    with pytest.raises(ValueError, match=re.escape(str(not_pem))):
        statecache.TlsConfig.from_files(ca_file=not_pem)
    with pytest.raises(FileNotFoundError):
        statecache.TlsConfig.from_files(ca_file=tmp_path / "missing.pem")
    config = _tls(pki, "eng")
    assert config.private_key == pki.read("eng.key")
    assert "PRIVATE" not in repr(config)
    with pytest.raises(ValueError, match="Unix socket"):
        statecache.Client.connect("unix:/nonexistent/s.sock", tls=config)
    with pytest.raises(TypeError, match="TlsConfig"):
        statecache.Client.connect("127.0.0.1:1", tls={"ca": "x"})


def test_tls_material_the_daemon_cannot_use_exits_2_naming_it(pki, tmp_path):
    """A certificate or key gRPC cannot use used to be found only at every
    handshake, after the daemon said it was listening: now it is exit 2 at
    start, naming the flag and its file."""
    csr = tmp_path / "server.csr"
    subprocess.run(["openssl", "req", "-new", "-key", pki.path("server.key"),
                    "-subj", "/CN=127.0.0.1", "-out", str(csr)],
                   check=True, capture_output=True, timeout=60)
    cases = [
        # A certificate signing request is PEM, not a certificate.
        (["--tls_cert=%s" % csr, "--tls_key=" + pki.path("server.key")],
         "--tls_cert=%s: holds no PEM certificate" % csr),
        # Another certificate's key.
        (["--tls_cert=" + pki.path("server.pem"),
          "--tls_key=" + pki.path("eng.key")],
         "--tls_key=%s: is not the key of --tls_cert=" % pki.path("eng.key")),
        # The certificate where the key goes.
        (["--tls_cert=" + pki.path("server.pem"),
          "--tls_key=" + pki.path("server.pem")],
         "--tls_key=%s: holds no unencrypted PEM private key"
         % pki.path("server.pem")),
        # A key where the client CA goes.
        (["--tls_cert=" + pki.path("server.pem"),
          "--tls_key=" + pki.path("server.key"),
          "--tls_client_ca=" + pki.path("server.key")],
         "--tls_client_ca=%s: holds no PEM certificate"
         % pki.path("server.key")),
    ]
    for flags, words in cases:
        done = subprocess.run(
            [statecached_binary(), "--listen=127.0.0.1:0",
             "--metrics_address="] + flags,
            capture_output=True, text=True, timeout=30)
        assert done.returncode == 2, (flags, done.stderr)
        assert words in done.stderr, done.stderr
        assert "listening on" not in done.stderr, done.stderr

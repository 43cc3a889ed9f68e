"""TCP with TLS, against a real daemon and certificates this test makes
with openssl: a server certificate for 127.0.0.1 and client certificates
("ops", "eng") from one test CA. Under mutual TLS a client certificate's
name is its principal (x509:NAME): sessions are bound to it and
--admin_allow names operators by it; a client without a certificate cannot
connect at all. TCP without TLS needs --insecure_tcp, and its peers are
anonymous, never operators.
"""

import os
import subprocess

import grpc
import pytest

from statecache.testing import Daemon, statecached_binary
from statecache.v1 import statecache_pb2 as pb
from statecache.v1 import statecache_pb2_grpc as pb_grpc

from conftest import BLOCK, MODEL_ID, identity_flags

IDENTITY = pb.Identity(model_id=MODEL_ID, hash_block_size=BLOCK)


def _openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True,
                   capture_output=True, timeout=60)


def _issue(directory, name, subject, extensions=None):
    """A P-256 key and a certificate for `subject` signed by the test CA."""
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", name + ".key", "-out", name + ".csr",
             "-subj", subject, cwd=directory)
    args = ["x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey",
            "ca.key", "-CAcreateserial", "-days", "1", "-out", name + ".pem"]
    if extensions:
        with open(os.path.join(directory, name + ".ext"), "w") as f:
            f.write(extensions + "\n")
        args += ["-extfile", name + ".ext"]
    _openssl(*args, cwd=directory)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pki"))
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "ca.key",
             "-out", "ca.pem", "-subj", "/CN=statecache-test-ca", "-days", "1",
             cwd=d)
    _issue(d, "server", "/CN=statecached",
           "subjectAltName=IP:127.0.0.1,DNS:localhost")
    _issue(d, "ops", "/CN=ops")
    _issue(d, "eng", "/CN=eng")

    def read(name):
        with open(os.path.join(d, name), "rb") as f:
            return f.read()

    return type("Pki", (), {"dir": d, "read": staticmethod(read),
                            "path": staticmethod(
                                lambda n: os.path.join(d, n))})


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

"""Client (a channel to statecached), Session (an attached scheduler), its
StepStream, and the operator calls (Admin)."""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterator, TypeVar

import grpc

from . import _channel, _errors
from ._errors import (EpochChanged, Error, FailedPrecondition, LeaseLost,
                      NotFound, Unavailable, error_for, from_rpc_error)
from ._columnar import ColumnarStep
from ._columns import OperationColumns, ResultColumns
from ._memory import StateMemory
from ._proto import pb as _pb
from ._proto import pb_grpc as _pb_grpc
from ._packed import (encode_columns, encode_operations, result_columns,
                      step_request, step_request_prefix)
from ._stats import NESTED, Identity, Stats, TransferConfig, WarmRestart
from ._step import (Result, StepBuilder, StepSender, decode_results,
                    operation_columns)


__all__ = [
    "default_address",
    "TlsConfig",
    "Client",
    "Session",
    "StepStream",
    "Admin",
    "Identity",
    "TransferConfig",
    "Stats",
    "WarmRestart",
    "SessionInfo",
    "ResizeResult",
    "DrainResult",
]

_NOT_FOUND = grpc.StatusCode.NOT_FOUND
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
# How long a step that failed UNAVAILABLE waits for the daemon to answer
# GetStats, to tell a restart (new epoch) from a blip.
_PROBE_SECONDS = 1.0


def default_address() -> str:
    """Where statecached listens unless told otherwise (as
    vocabulary/default_address.h and the daemon's --listen default):
    ``unix:/run/statecache/statecached.sock`` as root, else
    ``unix:$XDG_RUNTIME_DIR/statecache/statecached.sock`` when
    XDG_RUNTIME_DIR is an absolute path, else
    ``unix:/tmp/statecache-$UID/statecached.sock``."""
    uid = os.geteuid()
    if uid == 0:
        return "unix:/run/statecache/statecached.sock"
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime_dir.startswith("/"):
        return "unix:%s/statecache/statecached.sock" % runtime_dir
    return "unix:/tmp/statecache-%d/statecached.sock" % uid


# ------------------------------------------------------------ TLS


def _is_unix_address(address: str) -> bool:
    return address.startswith(("unix:", "unix-abstract:"))


def _pem_problem(data: bytes, key: bool) -> str | None:
    """None if `data` holds a PEM certificate (`key` False) or private key
    (`key` True), else what is wrong. (A CSR, or a key given as the
    certificate, would otherwise fail only when gRPC tries to connect.)"""
    begin = data.find(b"-----BEGIN ")
    mark = b"PRIVATE KEY-----" if key else b"CERTIFICATE-----"
    if begin >= 0 and data.find(mark, begin) >= 0:
        return None
    return ("not a PEM private key (no -----BEGIN ... PRIVATE KEY-----)"
            if key else
            "not a PEM certificate (no -----BEGIN CERTIFICATE-----)")


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS for a TCP address: what :meth:`Client.connect` needs to reach a
    daemon that serves TCP over TLS (its ``--tls_cert``/``--tls_key``;
    mutual TLS with its ``--tls_client_ca``). Without a TlsConfig the
    channel is plaintext, as a Unix socket (always) and a daemon started
    with ``--insecure_tcp`` want.

    Every certificate and key is PEM bytes; :meth:`from_files` reads them
    from files. The private key is left out of ``repr``.

    Attributes:
        root_certificates: the CA certificate(s) the daemon's certificate
            must chain to; None: gRPC's default roots (the system's).
        certificate_chain: this client's certificate (chain), for a daemon
            with ``--tls_client_ca``, which refuses a client without one.
            Its name (first subject alternative name, else common name) is
            the client's principal, ``x509:NAME``: sessions are bound to it
            and ``--admin_allow`` names operators by it. None: no client
            certificate (the principal is ``anonymous``).
        private_key: the key of `certificate_chain` (both or neither).
        server_name: the name the daemon's certificate must carry, when it
            is not the address's host (e.g. ``"statecached.internal"`` for
            ``10.0.0.5:50051``); None: the host.

    Raises (constructing one):
        TypeError: a certificate or key that is not bytes (a path: use
            :meth:`from_files`).
        ValueError: a certificate that is no PEM certificate, a key that
            is no PEM private key, a certificate without its key or a key
            without its certificate, or an empty `server_name`. (A key
            that does not match its certificate is not caught: the client
            then never connects.)
    """

    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = field(default=None, repr=False)
    server_name: str | None = None

    def __post_init__(self) -> None:
        for name in ("root_certificates", "certificate_chain", "private_key"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, bytes):
                raise TypeError(
                    "TlsConfig.%s: PEM bytes, not %s (TlsConfig.from_files "
                    "reads files)" % (name, type(value).__name__))
            problem = _pem_problem(value, name == "private_key")
            if problem:
                raise ValueError("TlsConfig.%s: %s" % (name, problem))
        if (self.certificate_chain is None) != (self.private_key is None):
            raise ValueError("TlsConfig: certificate_chain and private_key "
                             "go together: give both or neither")
        if self.server_name is not None and (
                not isinstance(self.server_name, str) or not self.server_name):
            raise ValueError("TlsConfig.server_name: a non-empty str or None")

    @classmethod
    def from_files(cls, ca_file: str | os.PathLike | None = None,
                   cert_file: str | os.PathLike | None = None,
                   key_file: str | os.PathLike | None = None,
                   server_name: str | None = None) -> TlsConfig:
        """A TlsConfig of the PEM files given (paths; None leaves that
        part out): `ca_file` the CA certificate(s) the daemon's certificate
        must chain to (statecachectl's ``--tls_ca``), `cert_file` and
        `key_file` this client's certificate and key (``--tls_cert``,
        ``--tls_key``), `server_name` as in the class.

        Raises:
            OSError: a file cannot be read (its exception names it).
            ValueError: a file holds no PEM certificate (`ca_file`,
                `cert_file`) or private key (`key_file`): the message names
                it; or as the constructor.
        """
        def read(path: str | os.PathLike | None,
                 key: bool = False) -> bytes | None:
            if path is None:
                return None
            path = os.fspath(path)
            with open(path, "rb") as f:
                data = f.read()
            problem = _pem_problem(data, key)
            if problem:
                raise ValueError("%s: %s" % (path, problem))
            return data

        return cls(root_certificates=read(ca_file),
                   certificate_chain=read(cert_file),
                   private_key=read(key_file, key=True),
                   server_name=server_name)


# ------------------------------------------------------------ plain values


# Stats and the Identity, TransferConfig and WarmRestart it carries are
# written by the build from the proto (gen_stats.py): see _stats.py in the
# built package.


@dataclass(slots=True)
class SessionInfo:
    """One attached session as ListSessions reports it."""

    # Always empty: a session's id is its holder's secret. Operators name
    # sessions by `handle`.
    session_id: str = ""
    handle: str = ""
    # Who attached it: "uid:N", "x509:NAME", "anonymous".
    principal: str = ""
    client_name: str = ""
    requests: int = 0
    slots: int = 0
    pins: int = 0
    attached_seconds: float = 0.0
    idle_seconds: float = 0.0
    lease_remaining_ms: int = 0


@dataclass(slots=True)
class ResizeResult:
    """ResizeResponse: the pool's size afterwards, the slots whose content
    moved (`relocated`: live and checkpointed), the checkpoints spent to
    make room (`evicted`) and the host tier's room afterwards."""

    num_slots: int = 0
    relocated: int = 0
    evicted: int = 0
    # The host tier's room afterwards.
    host_tier_bytes: int = 0


@dataclass(slots=True)
class DrainResult:
    """DrainResponse: whether the daemon now drains, and the requests still
    admitted."""

    draining: bool = False
    # Requests still admitted when the call returned.
    requests: int = 0


_T = TypeVar("_T")

# The message-valued fields _plain converts, by name.
_NESTED = NESTED


def _plain(cls: type[_T], message: Any) -> _T:
    """A dataclass of plain values from the message of the same fields."""
    values = {}
    for f in fields(cls):
        value = getattr(message, f.name)
        if f.name in _NESTED:
            value = _plain(_NESTED[f.name], value)
        values[f.name] = value
    return cls(**values)


# ------------------------------------------------------------ Client

# How long connect() waits for a failing channel to say why (one between
# attempts answers at once; one mid-handshake on a loaded machine can take a
# while).
_REASON_SECONDS = 1.0


def _connect_failure(channel: grpc.Channel) -> str | None:
    """Why `channel` (not ready) cannot connect, as gRPC reports its last
    attempt ("... Ssl handshake failed: ... certificate verify failed"), by
    one fail-fast Ping: a channel in TRANSIENT_FAILURE answers it at once.
    None if the Ping went through."""
    try:
        _pb_grpc.StateCacheStub(channel).Ping(_pb.PingRequest(),
                                              timeout=_REASON_SECONDS)
        return None
    except grpc.RpcError as e:
        details = e.details() or e.code().name
        return details.removeprefix("failed to connect to all addresses; ")


class Client:
    """A connection to one statecached. Thread-safe.

    Use :meth:`connect`; close with :meth:`close` or a ``with`` block
    (closing does not detach sessions: a Session's own ``with`` block or
    ``detach()`` does).

    Attributes:
        address: the gRPC address connected to.
        timeout: each call's deadline in seconds.
        admin: the operator calls (:class:`Admin`).
    """

    def __init__(self, channel: grpc.Channel, address: str,
                 timeout: float) -> None:
        self._channel = channel
        self.address = address
        self.timeout = timeout
        self._stub = _pb_grpc.StateCacheStub(channel)
        self._admin_stub = _pb_grpc.StateCacheAdminStub(channel)
        # Steps go out as the bytes the builder wrote (no serializer).
        service = "/" + _pb.DESCRIPTOR.services_by_name["StateCache"].full_name
        self._step_bytes = channel.unary_unary(
            service + "/Step", request_serializer=None,
            response_deserializer=_pb.StepResponse.FromString)
        self._step_stream_bytes = channel.stream_stream(
            service + "/StepStream", request_serializer=None,
            response_deserializer=_pb.StepResponse.FromString)
        self.admin = Admin(self)
        self._sessions = weakref.WeakSet()  # whose renewal close() stops

    @classmethod
    def connect(cls, address: str | None = None, timeout: float = 5.0, *,
                max_message_bytes: int = 16 << 20,
                tls: TlsConfig | None = None) -> Client:
        """Opens a channel to `address` (gRPC syntax, ``unix:/path`` or
        ``host:port``; default :func:`default_address`) and waits up to
        `timeout` seconds for the daemon to accept it. `timeout` is also
        every later call's deadline. `max_message_bytes` should match the
        daemon's --max_message_bytes.

        `tls` (a :class:`TlsConfig`) makes the channel TLS: a daemon
        serving a TCP address needs it unless it runs with
        ``--insecure_tcp``; with ``--tls_client_ca`` it also needs the
        TlsConfig's client certificate. Without `tls` the channel is
        plaintext (a Unix socket, or an ``--insecure_tcp`` daemon).

        The channel reconnects by itself after the daemon restarts (backoff
        0.1 s growing to 2 s: the daemon is local).

        Raises:
            Unavailable: nothing accepted the connection in time (the
                message names the address; with `tls`, also why gRPC's
                last attempt failed, e.g. the daemon's certificate did not
                verify against the TlsConfig's CA, or the daemon refused
                the client's certificate).
            TypeError: `tls` is not a TlsConfig.
            ValueError: `tls` with a Unix socket address (the daemon serves
                Unix sockets in plaintext: the kernel names their peers).
        """
        if address is None:
            address = default_address()
        if tls is not None:
            if not isinstance(tls, TlsConfig):
                raise TypeError("tls: a statecache.TlsConfig, not %s"
                                % type(tls).__name__)
            if _is_unix_address(address):
                raise ValueError(
                    "tls is for TCP addresses; %s is a Unix socket, which "
                    "statecached serves in plaintext (the kernel names its "
                    "peers)" % address)
        options = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2000),
            # No transparent retries: a step must never run twice, and
            # without them gRPC does not keep a copy of every request.
            ("grpc.enable_retries", 0),
        ]
        if tls is None:
            channel = grpc.insecure_channel(address, options=options)
        else:
            if tls.server_name is not None:
                options.append(("grpc.ssl_target_name_override",
                                tls.server_name))
            channel = grpc.secure_channel(
                address, grpc.ssl_channel_credentials(
                    root_certificates=tls.root_certificates,
                    private_key=tls.private_key,
                    certificate_chain=tls.certificate_chain),
                options=options)
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            if tls is None:
                channel.close()
                raise Unavailable(
                    "no statecached accepted a connection at %s within %g s "
                    "(is it running? its --listen address?)"
                    % (address, timeout)) from None
            reason = _connect_failure(channel)
            if reason is None:  # it connected after all
                return cls(channel, address, timeout)
            channel.close()
            raise Unavailable(
                "no statecached accepted a TLS connection at %s within %g s: "
                "%s (is it running with --tls_cert? does its certificate "
                "chain to the TlsConfig's root_certificates and name the "
                "address's host or server_name? with --tls_client_ca, does "
                "it take the TlsConfig's certificate_chain?)"
                % (address, timeout, reason)) from None
        return cls(channel, address, timeout)

    def close(self) -> None:
        """Closes the channel and stops the sessions' lease renewal.
        Sessions still attached stay attached on the daemon until their
        leases lapse; calls on a closed client raise ValueError."""
        for session in list(self._sessions):
            session._stop.set()
            session._close_channel("the client was closed")
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<statecache.Client %s>" % self.address

    def _call(self, method: Callable[..., Any], request: Any, what: str,
              timeout: float | None = None) -> Any:
        try:
            return method(request, timeout=self.timeout if timeout is None
                          else timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, what) from None

    def ping(self) -> None:
        """A round trip that does nothing (the latency baseline)."""
        self._call(self._stub.Ping, _pb.PingRequest(), "Ping")

    def attach(self, model_id: str, hash_block_size: int,
               hash_namespace: str = "", num_spec: int = 0,
               layout_fingerprint: str = "", client_name: str = "", *,
               keepalive: bool = True,
               advise_placement: bool = False,
               transport: str | None = None) -> Session:
        """Opens a session with the model's identity (every field must equal
        the daemon's) and, with `keepalive`, starts renewing its lease in a
        background thread. `client_name` (<= 256 bytes) is shown to
        operators.

        With `advise_placement`, every admit result says where the
        request's checkpoints go (``branch_blocks``,
        ``continuation_blocks``, ``ladder_blocks``; client/README.md,
        "Placement advice"); ``Session.placement_advised`` says whether the
        daemon gives it.

        `transport` is how the session's steps travel:

        * ``"auto"`` (the default, unless $STATECACHE_TRANSPORT names
          another): over a step channel (shared memory with the daemon)
          when this client is connected over the daemon's Unix socket and
          the daemon grants one, else over gRPC;
          ``Session.transport_reason`` says why not;
        * ``"channel"``: over a step channel, or raise;
        * ``"grpc"``: the Step RPC.

        ``Session.transport`` says which is in use. Either way the steps'
        results, errors and effects are the same.

        Returns a :class:`Session`; use it as a context manager to detach
        at the end.

        Raises:
            FailedPrecondition: the identity differs (the message names the
                field); with ``transport="channel"``, no step channel (the
                message says why; the session is detached again).
            InvalidArgument: client_name over 256 bytes.
            Unavailable: the daemon drains (attach elsewhere), or cannot be
                reached.
            ValueError: an unknown `transport`.
        """
        if transport is None:
            transport = os.environ.get("STATECACHE_TRANSPORT") or "auto"
        if transport not in ("auto", "channel", "grpc"):
            raise ValueError("transport: \"auto\", \"channel\" or "
                             "\"grpc\", not %r" % (transport,))
        identity = Identity(model_id, hash_block_size, hash_namespace,
                            num_spec, layout_fingerprint)
        response = self._call(self._stub.Attach, _pb.AttachRequest(
            identity=_pb.Identity(
                model_id=model_id, hash_block_size=hash_block_size,
                hash_namespace=hash_namespace, num_spec=num_spec,
                layout_fingerprint=layout_fingerprint),
            client_name=client_name,
            advise_placement=advise_placement), "Attach")
        channel, reason = None, "transport=\"grpc\""
        if transport != "grpc":
            channel, reason = self._open_channel(response.session_id)
            if channel is None and transport == "channel":
                try:
                    self._stub.Detach(_pb.DetachRequest(
                        session_id=response.session_id),
                        timeout=self.timeout)
                except grpc.RpcError:
                    pass  # its lease lapses
                raise FailedPrecondition(
                    "transport=\"channel\": no step channel: %s" % reason)
        session = Session(self, response, identity, client_name, keepalive,
                          channel, reason)
        self._sessions.add(session)
        return session

    def _open_channel(self, session_id: str
                      ) -> tuple[_channel.StepChannel | None, str]:
        """A step channel for the session, or None and why not."""
        if not _is_unix_address(self.address):
            return None, ("connected over TCP (%s): a step channel needs "
                          "the daemon's Unix socket" % self.address)
        unsupported = _channel.supported()
        if unsupported:
            return None, unsupported
        try:
            return _channel.StepChannel.open(self._stub, _pb, session_id,
                                             self.timeout), ""
        except grpc.RpcError as e:
            error = from_rpc_error(e, "OpenStepChannel")
            return None, "the daemon did not open a step channel: %s" % (
                error,)
        except (OSError, ValueError, Error) as e:
            return None, "the step channel could not be mapped: %s" % (e,)

    def _probe_epoch(self, wait: bool) -> int | None:
        """The daemon's epoch now (GetStats), or None if it does not answer
        (`wait`: up to _PROBE_SECONDS for the channel to reconnect)."""
        try:
            timeout = min(self.timeout, _PROBE_SECONDS)
            return self._admin_stub.GetStats(
                _pb.GetStatsRequest(), timeout=timeout,
                wait_for_ready=wait).epoch
        except grpc.RpcError:
            return None


# ------------------------------------------------------------ Session


class Session(StepSender):
    """One attached scheduler session (from :meth:`Client.attach`).

    A context manager: leaving the ``with`` block detaches (releasing every
    request the session holds) and stops the lease renewal.

    Attributes:
        session_id: the daemon's token for the session.
        epoch: the daemon's epoch at attach (changes on every daemon start).
        lease_ttl: the lease in seconds (float); a background thread renews
            it every lease_ttl / 3 unless a step renewed it since.
        num_slots: the pool's size at attach.
        transfer: the daemon's :class:`TransferConfig`.
        max_operations_per_step: operations one step may carry.
        handle: what operators and the daemon's log call this session
            (not a credential, unlike session_id).
        max_hashes_per_step: hashes one step may carry over all its
            operations (block hashes, reservation positions, unindexed
            hashes).
        memory: the state memory (:class:`StateMemory`), or None when the
            daemon keeps none (no --model or --layout).
        identity: the :class:`Identity` attached with.
        client_name: as given to attach.
        placement_advised: whether admit results carry placement advice
            (asked for at attach, and given by the daemon).
        eviction: which checkpoint a shortage spends, ``"lru"`` (the
            reference pool's rule) or ``"second-chance"``.
        transport: how steps travel now: ``"channel"`` (the step channel)
            or ``"grpc"`` (see :meth:`Client.attach`).
        transport_reason: why not over the step channel ("" while over
            it): the transport asked for, TCP, the daemon's refusal, or
            what ended the channel.

    Losing the session. Every call that names the session (a step, unary or
    streamed, and keep_alive) raises :class:`LeaseLost`, or its subclass
    :class:`EpochChanged`, once the daemon no longer knows it; nothing was
    applied, the daemon released its requests, and the scheduler must
    attach again and re-admit. It is found out in these ways:

    * a call's answer carries another epoch than the session's (every
      StepResponse and KeepAliveResponse carries the daemon's epoch):
      EpochChanged;
    * a call is refused NOT_FOUND (unknown session). A unary Step's refusal
      carries no epoch, so the client asks GetStats for it: another epoch is
      EpochChanged; the same, or no answer, LeaseLost (expired or evicted);
    * a call fails UNAVAILABLE: the client waits up to 1 s for GetStats; a
      new epoch is EpochChanged, otherwise the call raises Unavailable and
      the session may still be alive (retry);
    * the renewal thread is refused NOT_FOUND, sees a new epoch, or has not
      renewed for a whole lease_ttl (then GetStats decides between the
      two): the next call raises.

    Once lost, the session stays lost (every later call raises again, and
    ``lost`` says why). A step on a session this client detached is sent as
    any other and refused by the daemon with a plain NotFound.

    The step channel. A session attached over the daemon's Unix socket
    runs its unary steps (both builders, and :meth:`send_columns`) through
    shared memory with the daemon, with the same results and errors as
    over gRPC. A pass too big for the channel's request area goes over
    gRPC. When the daemon closes the channel (the session ended: evicted,
    lease lapsed, detached; the daemon stops) the step goes over gRPC,
    which then answers as it would (LeaseLost, EpochChanged, ...), and so
    do later steps. When the daemon stops answering (its heartbeat stands
    still while a reply is awaited) the step raises Unavailable (then, as
    over gRPC, EpochChanged if a new daemon answers GetStats) and later
    steps go over gRPC. StepStream always uses gRPC.

    Thread-safe: several threads may send steps (each builder on one
    thread); steps over the channel take turns.
    """

    def __init__(self, client: Client, response: Any, identity: Identity,
                 client_name: str, keepalive: bool,
                 channel: _channel.StepChannel | None = None,
                 transport_reason: str = "") -> None:
        self._client = client
        self._stub = client._stub
        self.session_id = response.session_id
        self.epoch = response.epoch
        self.lease_ttl = response.lease_ttl_ms / 1000.0
        self.num_slots = response.num_slots
        self.transfer = _plain(TransferConfig, response.transfer)
        self.max_operations_per_step = response.max_operations_per_step
        self.max_hashes_per_step = response.max_hashes_per_step
        self.handle = response.handle
        self.memory = (StateMemory._from_proto(response.memory)
                       if response.HasField("memory") else None)
        self.identity = identity
        self.client_name = client_name
        self.placement_advised = response.placement_advised
        self.eviction = response.eviction
        self._request_prefix = step_request_prefix(self.session_id)
        self._channel = channel
        self._channel_lock = threading.Lock()
        self.transport_reason = "" if channel is not None else \
            transport_reason
        self._detached = False
        self._lost = None  # a function making the exception to raise
        self._lost_event = threading.Event()
        self._stop = threading.Event()
        self._last_renewed = time.monotonic()
        self._thread = None
        if keepalive and self.lease_ttl > 0:
            self._thread = threading.Thread(
                target=self._renew_loop, daemon=True,
                name="statecache-lease-%s" % self.session_id[:8])
            self._thread.start()

    def __repr__(self) -> str:
        state = ("detached" if self._detached else
                 "lost" if self._lost else "attached")
        return "<statecache.Session %s epoch=%d %s over %s>" % (
            self.session_id, self.epoch, state, self.transport)

    @property
    def transport(self) -> str:
        """``"channel"`` while steps go over the step channel, else
        ``"grpc"``."""
        return "channel" if self._channel is not None else "grpc"

    def _drop_channel(self, why: str) -> None:
        """Steps go over gRPC from now on (`why`: transport_reason)."""
        channel, self._channel = self._channel, None
        if channel is not None:
            self.transport_reason = why
            channel.close()

    def ping(self) -> None:
        """A round trip that does nothing over the session's transport: a
        bare kPing over the step channel, else the client's Ping."""
        channel = self._channel
        if channel is not None:
            with self._channel_lock:
                if self._channel is channel and not channel.closed:
                    channel.ping(self._client.timeout)
                    return
        self._client.ping()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the pass

    def step(self) -> StepBuilder:
        """A new :class:`StepBuilder` whose ``send()`` runs it as one unary
        Step (always in the packed form). Over a step channel, the daemon
        is told a pass is coming, so it is awake when it is sent."""
        self._announce()
        return StepBuilder(self)

    def columns(self) -> ColumnarStep:
        """A new :class:`ColumnarStep` (operations added by columns, results
        read as numpy arrays) whose ``send()`` runs it as one unary
        Step; announced as :meth:`step`'s."""
        self._announce()
        return ColumnarStep(self._send_columns)

    def _announce(self) -> None:
        channel = self._channel
        if channel is not None:
            try:
                channel.announce()
            except ValueError:  # closed meanwhile by another thread: a hint
                pass

    def stream(self) -> StepStream:
        """A :class:`StepStream` over one long-lived StepStream call (no
        per-call setup; from Python not much faster than unary steps, whose
        call runs on the calling thread while a stream's requests go
        through a thread of grpc's). Use it as a context manager."""
        return StepStream(self)

    def send_columns(self, columns: OperationColumns) -> ResultColumns:
        """Runs one Step of the operations `columns` and returns their
        result columns: what both builders' ``send()`` do underneath, for
        a caller that fills the columns itself.

        Raises as :meth:`StepBuilder.send` (nothing applied): LeaseLost /
        EpochChanged, InvalidArgument, ResourceExhausted, Unavailable,
        DeadlineExceeded; TypeError / ValueError for columns that are not
        an :class:`OperationColumns` of the right dtypes.
        """
        columns.check()
        return self._send_columns(columns)

    def _send_columns(self, columns: OperationColumns) -> ResultColumns:
        """send_columns for columns a builder made (checked already)."""
        if self._channel is not None:
            results = self._send_channel(columns)
            if results is not None:
                return results
        response = self._send_packed(encode_columns(columns))
        return result_columns(response.packed_results, response.epoch)

    def _send_channel(self, columns: OperationColumns
                      ) -> ResultColumns | None:
        """The pass over the step channel; None when it was not sent there
        (the channel is closed, or the pass does not fit it)."""
        with self._channel_lock:
            channel = self._channel
            if channel is None:
                return None
            if self._lost is not None:
                raise self._lost()
            try:
                results = channel.step(columns, self._client.timeout)
            except _channel.ChannelRefusal as refusal:
                # A refused Step's reply carries no epoch (0), as over gRPC:
                # _classify asks GetStats when it needs one.
                raise self._classify(refusal.error, "Step",
                                     refusal.epoch or None) from None
            except Error as e:
                self._drop_channel("the step channel failed: %s" % (e,))
                raise self._classify(e, "Step") from None
            if results is None:
                if channel.closed:
                    self._drop_channel("the daemon closed the step channel")
                return None
        if results.epoch != self.epoch:
            raise self._lose(results.epoch, "Step answered")
        self._last_renewed = time.monotonic()
        return results

    # The StepBuilder's transport (StepSender). Over gRPC its lists are
    # encoded to PackedOperations' bytes and the PackedResults decoded into
    # dataclasses directly: numpy columns in between would only add a
    # conversion each way. Over the channel they become OperationColumns.

    def encode_step(self, kinds: list[int], ids: list[str],
                    args: list[int], hashes: list[int]) -> Any:
        """See :class:`StepSender`."""
        if self._channel is not None:
            return operation_columns(kinds, ids, args, hashes)
        return encode_operations(kinds, ids, args, hashes)

    def send_step(self, request: Any, kinds: list[int]) -> list[Result]:
        """See :class:`StepSender`."""
        if isinstance(request, OperationColumns):
            return decode_results(kinds, self._send_columns(request))
        return decode_results(kinds, self._send_packed(request)
                              .packed_results)

    def _send_packed(self, packed: bytes) -> Any:
        """One unary Step of PackedOperations' bytes `packed`: its
        StepResponse."""
        if self._lost is not None:
            raise self._lost()
        request = step_request(self._request_prefix, packed)
        try:
            response = self._client._step_bytes(
                request, timeout=self._client.timeout)
        except grpc.RpcError as e:
            raise self._refusal(e, "Step") from None
        if response.epoch != self.epoch:
            raise self._lose(response.epoch, "Step answered")
        self._last_renewed = time.monotonic()
        return response

    # ---- the lease

    @property
    def lost(self) -> LeaseLost | None:
        """None while the session is usable; else the exception (LeaseLost
        or EpochChanged) its calls raise."""
        return None if self._lost is None else self._lost()

    def keep_alive(self) -> None:
        """Renews the lease now (the background thread does this on its
        own). Raises LeaseLost / EpochChanged when the session is gone."""
        if self._lost is not None:
            raise self._lost()
        try:
            response = self._stub.KeepAlive(
                _pb.KeepAliveRequest(session_id=self.session_id),
                timeout=self._client.timeout)
        except grpc.RpcError as e:
            raise self._refusal(e, "KeepAlive") from None
        if response.epoch != self.epoch:
            raise self._lose(response.epoch, "KeepAlive answered")
        self._last_renewed = time.monotonic()

    def detach(self) -> int:
        """Closes the session, releasing every request it holds, and stops
        the renewal. Returns the number of requests released.
        Raises NotFound when the daemon no longer knows the session."""
        self._detached = True
        self._stop.set()
        self._close_channel("detached")
        try:
            response = self._stub.Detach(
                _pb.DetachRequest(session_id=self.session_id),
                timeout=self._client.timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, "Detach") from None
        return response.requests_released

    def close(self) -> None:
        """Detaches unless already detached or lost; a session the daemon
        no longer knows, or cannot be reached to hear it, is simply
        forgotten (its lease lapses)."""
        if self._detached:
            return
        if self._lost is not None:
            self._detached = True
            self._stop.set()
            self._close_channel("the session was lost")
            return
        try:
            self.detach()
        except (NotFound, Unavailable, _errors.DeadlineExceeded, ValueError):
            pass  # gone, unreachable, or the client was closed

    def _close_channel(self, why: str) -> None:
        with self._channel_lock:
            self._drop_channel(why)

    def _renew_loop(self) -> None:
        interval = self.lease_ttl / 3
        while not self._stop.wait(interval):
            if self._lost is not None or self._detached:
                return
            since = time.monotonic() - self._last_renewed
            if since < interval * 0.9:
                continue  # a step renewed it meanwhile
            try:
                self.keep_alive()
            except (LeaseLost, ValueError):
                return  # lost, or the client was closed
            except Error:
                if (not self._detached and
                        time.monotonic() - self._last_renewed
                        >= self.lease_ttl):
                    self._lose(self._client._probe_epoch(wait=False),
                               "no renewal succeeded for a whole lease "
                               "(%g s)" % self.lease_ttl)
                    return

    def _lose(self, epoch: int | None, what: str) -> LeaseLost:
        """Marks the session lost (epoch: the daemon's now, or None if
        unknown) and returns the exception to raise."""
        old = self.epoch
        if epoch is not None and epoch != old:
            message = ("statecached restarted: epoch %d -> %d (%s); attach "
                       "again and re-admit" % (old, epoch, what))

            def make() -> LeaseLost:
                return EpochChanged(message, old, epoch)
        else:
            message = ("session %s is gone: its lease lapsed or it was "
                       "evicted (%s); attach again and re-admit"
                       % (self.session_id, what))

            def make() -> LeaseLost:
                return LeaseLost(message)
        if self._lost is None:
            self._lost = make
            self._lost_event.set()
            self._stop.set()
        return self._lost()

    def _refusal(self, rpc_error: grpc.RpcError, what: str) -> Error:
        """The exception for a call naming the session that failed."""
        error = from_rpc_error(rpc_error, what)
        return self._classify(error, what)

    def _classify(self, error: Error, what: str,
                  epoch: int | None = None) -> Error:
        """Turns a session call's `error` into LeaseLost/EpochChanged when
        the session is gone (`epoch`: the daemon's, if the answer said)."""
        if self._detached:
            return error
        if error.code == _NOT_FOUND:
            if epoch is None:
                epoch = self._client._probe_epoch(wait=False)
            return self._lose(epoch, "%s: NOT_FOUND: %s" % (
                what, error.message))
        if error.code == _UNAVAILABLE:
            if epoch is None:
                epoch = self._client._probe_epoch(wait=True)
            if epoch is not None and epoch != self.epoch:
                return self._lose(epoch, "%s: UNAVAILABLE: %s" % (
                    what, error.message))
        return error


# ------------------------------------------------------------ StepStream


class StepStream(StepSender):
    """Steps over one StepStream call, one message in flight at a time
    (from :meth:`Session.stream`; use it as a context manager: closing
    half-closes the stream).

    ``stream.step()`` gives the same :class:`StepBuilder` as
    ``session.step()``, and ``send()`` the same results and exceptions: a
    message the daemon refuses as a whole (StepResponse.error_code) raises
    the matching Error (NOT_FOUND: LeaseLost / EpochChanged by the
    response's epoch). The call is opened on the first send and reopened
    after it broke (e.g. the daemon restarted). Thread-safe: concurrent
    sends are serialized. A streamed step has no deadline of its own.
    """

    def __init__(self, session: Session) -> None:
        self._session = session
        self._lock = threading.Lock()
        self._requests = None  # the queue the request iterator reads
        self._call = None
        self._closed = False

    def __enter__(self) -> StepStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def step(self) -> StepBuilder:
        """A new :class:`StepBuilder` whose ``send()`` goes over this
        stream."""
        return StepBuilder(self)

    def columns(self) -> ColumnarStep:
        """A new :class:`ColumnarStep` whose ``send()`` goes over this
        stream."""
        return ColumnarStep(self._send_columns)

    def _open(self) -> None:
        requests = queue.SimpleQueue()

        def iterate() -> Iterator[bytes]:
            while True:
                request = requests.get()
                if request is None:
                    return
                yield request

        self._requests = requests
        self._call = self._session._client._step_stream_bytes(iterate())

    def _end(self) -> None:
        """Half-closes the call and waits (up to the client's timeout) for
        its end."""
        call, self._call = self._call, None
        if call is None:
            return
        self._requests.put(None)
        done = threading.Event()
        call.add_done_callback(lambda _: done.set())
        if not done.wait(self._session._client.timeout):
            call.cancel()

    def send_columns(self, columns: OperationColumns) -> ResultColumns:
        """As :meth:`Session.send_columns`, over this stream."""
        columns.check()
        return self._send_columns(columns)

    def _send_columns(self, columns: OperationColumns) -> ResultColumns:
        response = self._send_packed(encode_columns(columns))
        return result_columns(response.packed_results, response.epoch)

    def encode_step(self, kinds: list[int], ids: list[str],
                    args: list[int], hashes: list[int]) -> Any:
        """See :class:`StepSender`."""
        return encode_operations(kinds, ids, args, hashes)

    def send_step(self, request: Any, kinds: list[int]) -> list[Result]:
        """See :class:`StepSender`."""
        return decode_results(kinds, self._send_packed(request)
                              .packed_results)

    def _send_packed(self, packed: bytes) -> Any:
        session = self._session
        with self._lock:
            if self._closed:
                raise ValueError("send on a closed StepStream")
            if session._lost is not None:
                raise session._lost()
            if self._call is not None and self._call.done():
                self._end()  # broke between steps: nothing was in flight
            if self._call is None:
                self._open()
            self._requests.put(step_request(session._request_prefix, packed))
            try:
                response = next(self._call)
            except grpc.RpcError as e:
                self._end()
                raise session._refusal(e, "StepStream") from None
            except StopIteration:
                self._end()
                raise session._classify(Unavailable(
                    "the daemon ended the stream"), "StepStream") from None
        if response.error_code:
            error = error_for(response.error_code, response.error_message)
            raise session._classify(error, "StepStream", response.epoch)
        if response.epoch != session.epoch:
            raise session._lose(response.epoch, "StepStream answered")
        session._last_renewed = time.monotonic()
        return response

    def close(self) -> None:
        """Half-closes the stream; the session stays attached."""
        with self._lock:
            self._closed = True
            self._end()


# ------------------------------------------------------------ Admin


class Admin:
    """The operator calls (``client.admin``): stats, sessions, resize,
    evict, drain. Errors as in statecache.proto's StateCacheAdmin."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def _call(self, name: str, request: Any,
              timeout: float | None = None) -> Any:
        return self._client._call(getattr(self._client._admin_stub, name),
                                  request, name, timeout)

    def stats(self) -> Stats:
        """GetStats as a :class:`Stats`."""
        return _plain(Stats, self._call("GetStats", _pb.GetStatsRequest()))

    def sessions(self) -> list[SessionInfo]:
        """Every attached session, a list of :class:`SessionInfo` in attach
        order (the daemon's pages, read one after another). Raises
        PermissionDenied unless this peer is an operator (--admin_allow)."""
        sessions = []
        request = _pb.ListSessionsRequest(page_size=1000)
        while True:
            response = self._call("ListSessions", request)
            sessions.extend(_plain(SessionInfo, s) for s in response.sessions)
            if not response.next_page_token:
                return sessions
            request.page_token = response.next_page_token

    def resize(self, n: int | None = None, deadline: float | None = None,
               host_tier_bytes: int | None = None) -> ResizeResult:
        """Grows or shrinks the pool to `n` slots, and (`host_tier_bytes`
        given) sets the host tier's room first, at once (0 turns it off);
        returns a :class:`ResizeResult` when done. A shrink retries pinned
        or stuck top slots as passes run until `deadline` seconds (None:
        the daemon's default, 10 s). A request's live slot moves only in
        its own session's ``begin_pass``: a shrink over slots this process's
        own scheduler holds must be called from another thread while the
        passes run, or it waits out its deadline.

        Raises InvalidArgument (n < 1 or past --max_slots, a negative
        host_tier_bytes), FailedPrecondition (a tier without state
        memory), Aborted (another resize runs), DeadlineExceeded (the
        slots given up so far stay given up; the message says how far it
        got).
        """
        if n is None and host_tier_bytes is None:
            raise TypeError("resize: give n, host_tier_bytes or both")
        deadline_ms = 0 if deadline is None else max(1, int(deadline * 1000))
        wait = (10.0 if deadline is None else deadline) + self._client.timeout
        request = _pb.ResizeRequest(target_slots=n or 0,
                                    deadline_ms=deadline_ms)
        if host_tier_bytes is not None:
            request.host_tier_bytes = host_tier_bytes
        response = self._call("Resize", request, timeout=wait)
        return _plain(ResizeResult, response)

    def evict(self, handle: str) -> int:
        """Ends the session with this handle (:attr:`SessionInfo.handle`)
        as if its lease had lapsed; returns the requests released. Raises
        NotFound for an unknown session, PermissionDenied unless this peer
        is an operator."""
        response = self._call("EvictSession",
                              _pb.EvictSessionRequest(handle=handle))
        return response.requests_released

    def drain(self, resume: bool = False) -> DrainResult:
        """Stops admitting (Attach and admit refused UNAVAILABLE; admitted
        requests run on), or with `resume` admits again. Returns a
        :class:`DrainResult`; poll stats().requests for 0 to know the daemon
        is idle."""
        return _plain(DrainResult,
                      self._call("Drain", _pb.DrainRequest(resume=resume)))


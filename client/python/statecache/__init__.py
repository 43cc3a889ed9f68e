"""statecache: the Python client of statecached, the recurrent-state cache.

A scheduler connects, attaches a session with its model's identity, and runs
one step per scheduler pass: the pass's operations (begin_pass, admit,
checkpoint, release, ...) built with a StepBuilder and answered with one
result per operation. Every operation, argument and refusal is documented
in proto/statecache/v1/statecache.proto; this package mirrors it in
snake_case, with the proto's field names as keyword arguments and result
attributes. One request's first turn, with the engine's parts (the
``prompt``'s tokens, ``block_hashes``, ``run_forward``) left to you::

    import statecache

    BLOCK = 64                                  # hash_block_size
    with statecache.Client.connect() as client, \\
            client.attach(model_id="Qwen/Qwen3-Next-80B-A3B-Instruct",
                          hash_block_size=BLOCK, client_name="worker-0") as s:
        # A 300-token prompt has 4 full blocks. A later turn resumes it at
        # most from its end rounded down to a block, token 256: its anchor.
        hashes = block_hashes(prompt)           # 4 chained hashes
        anchor = len(prompt) // BLOCK * BLOCK   # 256
        # Before the forward: a new pass, an admission (cold: the KV cache
        # holds none of its blocks yet).
        results = (s.step()
                   .begin_pass()
                   .admit("r1", width=1, num_tokens=len(prompt),
                          anchor_pos=anchor, block_hashes=hashes,
                          kv_hit_blocks=0)
                   .send())
        admit = results[1].check()          # an AdmitResult; raises if refused
        # A cold slot holds its last holder's bytes: start from the zero
        # state (read=None), and stop at the anchor...
        run_forward(read=None, write=admit.slots[0], tokens=prompt[:anchor])
        # ...so the state sits exactly at token 256, after 4 blocks: file it
        # under the hash of the block ending there.
        ck = s.step().checkpoint("r1", boundary_blocks=anchor // BLOCK,
                                 hash=hashes[anchor // BLOCK - 1]).send()[0]
        # The next pass's forward reads the checkpoint (or, dropped for
        # want of a slot, carries on in place) and writes state_slot; the
        # fork it read is consumed after it.
        s.step().begin_pass().send()
        run_forward(read=ck.fork_src if ck.kept else ck.state_slot,
                    write=ck.state_slot, tokens=prompt[anchor:])
        s.step().consume_fork("r1").release("r1").send()   # finished

A later turn whose prompt extends this one admits with ``kv_hit_blocks=4``
and gets ``blocks_resumed == 4``: its forward starts at token 256, reading
``fork_src`` (or slot 0 when ``adopted``). client/README.md walks through
every step. The examples here run as tests (test_docstrings.py, in
client/python/tests), so they stay true.

Steps always travel in the packed form (PackedOperations). ``s.stream()``
gives the same builder over one StepStream (the lowest-latency path from
C++; from Python it saves little, since grpc's Python API feeds a stream
through a thread of its own: bench/python_step_bench.py measures both)::

    with s.stream() as stream:
        results = stream.step().begin_pass().release("r1").send()

Columnar passes: ``s.columns()`` gives a :class:`ColumnarStep`, whose
methods (the same kinds and argument names) each add one operation per
element of numpy arrays or sequences and return a :class:`Batch`; its
``send()`` returns :class:`ColumnarResults`, read by batch as numpy arrays
(``results[batch].state_slot``), with no Python object per operation.

Transports: over the daemon's Unix socket a session's steps go through a
step channel (shared memory with the daemon) unless
``attach(transport="grpc")``; ``s.transport`` says which, and the results
and errors are the same either way (client/README.md, "Transports").

Errors: an RPC refused as a whole raises an :class:`Error` subclass
(``.code`` a grpc.StatusCode, ``.message`` the daemon's); an operation
refused inside a step is a result whose ``.code`` is non-zero (``.ok`` is
False; ``.check()`` raises it). A session the daemon lost (lease lapsed,
evicted: :class:`LeaseLost`; daemon restarted: :class:`EpochChanged`, a
LeaseLost) raises on its next call: attach again and re-admit.

State memory: ``s.memory`` (None without --model/--layout) describes the
region; on the host backend ``s.memory.tensor("ssm", layer)`` is a writable
zero-copy numpy view of shape (capacity_slots, *shape); on GPUs see
:func:`cuda_views`.

TCP: a daemon serving a TCP address over TLS (its --tls_cert; mutual TLS
with --tls_client_ca) is reached with ``connect(address, tls=...)``, a
:class:`TlsConfig`: ``TlsConfig.from_files(ca_file=, cert_file=,
key_file=)`` reads the CA, client certificate and key from PEM files.

Operators: ``client.admin.stats()``, ``.sessions()``, ``.resize(n)``,
``.evict(session_id)``, ``.drain()``.

Cost: a step's Python work is building it (a few list appends per
operation, or one columnar call per kind), encoding the columns and reading
the results (dataclasses, or arrays); the rest is the transport: grpc's
Python call, or the step channel's round trip. bench/python_step_bench.py
measures each.

Tests: :mod:`statecache.testing` starts a real daemon on a private socket.
The raw generated stubs are ``statecache.v1.statecache_pb2`` and
``statecache.v1.statecache_pb2_grpc``.
"""

from typing import Any

from ._errors import (Aborted, AlreadyExists, DeadlineExceeded, EpochChanged,
                      Error, FailedPrecondition, Internal, InvalidArgument,
                      LeaseLost, NotFound, PermissionDenied,
                      ResourceExhausted, Unavailable)
from ._memory import (StateMemory, StateTensor, TensorPlacement, cuda_views,
                      numpy_dtype, open_gpu_region, torch_dtype)
from ._step import (AdmitResult, AdoptForkSourceResult, BeginPassResult,
                    CancelResult, CheckpointResult, ClearIndexResult,
                    ConsumeForkResult, CopyResult, LookupResult,
                    MidstepPosition, PublishResult, Reservation,
                    ReserveResult, ReleaseResult, ResumableHitResult,
                    SlotMove, SnapshotResult, StepBuilder, UnindexResult)
from ._columnar import (Batch, BatchResult, ColumnarResults, ColumnarStep,
                        Lists, RecordLists, RequestIds)
from ._columns import OperationColumns, ResultColumns
from ._client import (Admin, Client, DrainResult, Identity, ResizeResult,
                      Session, SessionInfo, Stats, StepStream, TlsConfig,
                      TransferConfig, WarmRestart, default_address)

__version__ = "0.1.0"


def connect(address: str | None = None, timeout: float = 5.0,
            **options: Any) -> Client:
    """Same as :meth:`Client.connect`."""
    return Client.connect(address, timeout, **options)


__all__ = [
    # connection, session, pass
    "connect", "default_address", "TlsConfig", "Client", "Session",
    "StepStream", "StepBuilder", "Admin",
    # columnar passes
    "ColumnarStep", "Batch", "RequestIds", "ColumnarResults", "BatchResult",
    "Lists", "RecordLists", "OperationColumns", "ResultColumns",
    # plain values
    "Identity", "TransferConfig", "Stats", "WarmRestart", "SessionInfo",
    "ResizeResult", "DrainResult", "MidstepPosition",
    # step results
    "BeginPassResult", "SlotMove", "AdmitResult", "ResumableHitResult",
    "LookupResult", "ReserveResult", "Reservation", "PublishResult",
    "CancelResult", "CheckpointResult", "ConsumeForkResult",
    "AdoptForkSourceResult", "ReleaseResult", "UnindexResult",
    "ClearIndexResult", "CopyResult", "SnapshotResult",
    # state memory
    "StateMemory", "StateTensor", "TensorPlacement", "cuda_views",
    "open_gpu_region", "numpy_dtype", "torch_dtype",
    # errors
    "Error", "InvalidArgument", "NotFound", "AlreadyExists",
    "ResourceExhausted", "PermissionDenied", "FailedPrecondition", "Aborted",
    "DeadlineExceeded", "Unavailable", "Internal", "LeaseLost",
    "EpochChanged",
]

"""statecache: the Python client of statecached, the recurrent-state cache.

A scheduler connects, attaches a session with its model's identity, and runs
one step per scheduler pass: the pass's operations (begin_pass, admit,
checkpoint, release, ...) built with a StepBuilder and answered with one
result per operation. Every operation, argument and refusal is documented
in proto/statecache/v1/statecache.proto; this package mirrors it in
snake_case, with the proto's field names as keyword arguments and result
attributes.

    import statecache

    with statecache.Client.connect() as client, \\
            client.attach(model_id="Qwen/Qwen3-Next-80B-A3B-Instruct",
                          hash_block_size=64, client_name="worker-0") as s:
        # Before the forward: a new pass, an admission resuming what it can
        # of the 4 blocks the KV cache holds.
        results = (s.step()
                   .begin_pass()
                   .admit("r1", width=1, num_tokens=300, anchor_pos=300,
                          block_hashes=hashes, kv_hit_blocks=4)
                   .send())
        admit = results[1].check()          # an AdmitResult; raises if refused
        run_forward(write=admit.slots[0], read=admit.fork_src)
        # After it: the fork it read is consumed; a checkpoint at 4 blocks.
        s.step().consume_fork("r1") \\
            .checkpoint("r1", boundary_blocks=4, hash=hashes[3]).send()
        s.step().release("r1").send()       # the request finished

Steps always travel in the packed form (PackedOperations). ``s.stream()``
gives the same builder over one StepStream (the lowest-latency path from
C++; from Python it saves little, since grpc's Python API feeds a stream
through a thread of its own: bench/python_step_bench.py measures both):

    with s.stream() as stream:
        results = stream.step().begin_pass().release("r1").send()

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

Operators: ``client.admin.stats()``, ``.sessions()``, ``.resize(n)``,
``.evict(session_id)``, ``.drain()``.

Cost (on the 2-core development VM): a step's Python work is about a
quarter of a microsecond per operation to build, as much again to encode
and twice that to decode into dataclasses; the rest is grpc's Python call
(bench/python_step_bench.py measures each).

Tests: :mod:`statecache.testing` starts a real daemon on a private socket.
The raw generated stubs are ``statecache.v1.statecache_pb2`` and
``statecache.v1.statecache_pb2_grpc``.
"""

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
from ._client import (Admin, Client, DrainResult, Identity, ResizeResult,
                      Session, SessionInfo, Stats, StepStream, TransferConfig,
                      WarmRestart, default_address)

__version__ = "0.1.0"


def connect(address=None, timeout=5.0, **options):
    """Same as :meth:`Client.connect`."""
    return Client.connect(address, timeout, **options)


__all__ = [
    # connection, session, pass
    "connect", "default_address", "Client", "Session", "StepStream",
    "StepBuilder", "Admin",
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

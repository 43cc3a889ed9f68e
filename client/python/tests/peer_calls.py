"""Calls a daemon the way another tenant would, for test_access.py: run as
another user (``subprocess.Popen(..., user=...)``), it makes each call named
on the command line and prints one JSON object: call -> [status code name,
message].

    peer_calls.py ADDRESS MODEL_ID BLOCK VICTIM_SESSION_ID CALL...

CALL is one of: ping, attach, stats, sessions, resize, drain, evict (handle
s1), keep_alive, step, detach (the last three name VICTIM_SESSION_ID), and
map: attach, then map the state region read-write as an engine does and
write and read back its first byte (an OSError is reported by its name).
"""

import json
import mmap
import os
import sys

import grpc

from statecache.v1 import statecache_pb2 as pb
from statecache.v1 import statecache_pb2_grpc as pb_grpc


def map_region(scheduler, identity):
    """Maps the region an Attach names, as an engine would."""
    memory = scheduler.Attach(
        pb.AttachRequest(identity=identity, client_name="engine"),
        timeout=5).memory
    fd = os.open("/dev/shm/" + memory.handle.decode().lstrip("/"), os.O_RDWR)
    try:
        region = mmap.mmap(fd, memory.region_bytes, flags=mmap.MAP_SHARED)
    finally:
        os.close(fd)
    region[0] = 0x5A
    assert region[0] == 0x5A
    region.close()


def main():
    address, model_id, block, victim = sys.argv[1:5]
    channel = grpc.insecure_channel(address)
    scheduler = pb_grpc.StateCacheStub(channel)
    admin = pb_grpc.StateCacheAdminStub(channel)
    identity = pb.Identity(model_id=model_id, hash_block_size=int(block))
    begin = pb.Operation(begin_pass=pb.BeginPass())
    calls = {
        "ping": lambda: scheduler.Ping(pb.PingRequest(), timeout=5),
        "attach": lambda: scheduler.Attach(
            pb.AttachRequest(identity=identity, client_name="neighbour"),
            timeout=5),
        "stats": lambda: admin.GetStats(pb.GetStatsRequest(), timeout=5),
        "sessions": lambda: admin.ListSessions(pb.ListSessionsRequest(),
                                               timeout=5),
        "resize": lambda: admin.Resize(pb.ResizeRequest(target_slots=4),
                                       timeout=5),
        "drain": lambda: admin.Drain(pb.DrainRequest(), timeout=5),
        "evict": lambda: admin.EvictSession(
            pb.EvictSessionRequest(handle="s1"), timeout=5),
        "keep_alive": lambda: scheduler.KeepAlive(
            pb.KeepAliveRequest(session_id=victim), timeout=5),
        "step": lambda: scheduler.Step(
            pb.StepRequest(session_id=victim, operations=[begin]), timeout=5),
        "detach": lambda: scheduler.Detach(
            pb.DetachRequest(session_id=victim), timeout=5),
        "map": lambda: map_region(scheduler, identity),
    }
    out = {}
    for name in sys.argv[5:]:
        try:
            calls[name]()
            out[name] = ["OK", ""]
        except grpc.RpcError as e:
            out[name] = [e.code().name, e.details()]
        except OSError as e:
            out[name] = [type(e).__name__, str(e)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()

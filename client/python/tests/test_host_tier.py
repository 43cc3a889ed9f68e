"""The host tier against a real daemon: a working set twice the device
pool, written through the mapped region, resumes from the tier with the
bytes that were written; the operators' resize turns it on and off; the
list form, GetStats and /metrics say where a resume came from."""

import re
import urllib.request

import grpc
import pytest

import statecache
from statecache.v1 import statecache_pb2 as pb
from statecache.v1 import statecache_pb2_grpc as pb_grpc

from conftest import BLOCK, MODEL_ID, SMALL_LAYOUT, attach
from test_memory import fill, holds

POOL = 8
PROMPTS = 2 * POOL


def prompt_hashes(p):
    return [(p + 1) * 1000 + 1, (p + 1) * 1000 + 2]


def ok(results):
    for r in results:
        r.check()
    return results


def publish(session, p):
    """Prompt p's turn: a cold admit, its state written (seed p) and
    checkpointed at 2 blocks, then released with its pins cleared."""
    h = prompt_hashes(p)
    admit, = ok(session.step().admit(
        "w%d" % p, width=1, num_tokens=2 * BLOCK + 10, anchor_pos=2 * BLOCK,
        block_hashes=h, kv_hit_blocks=0).send())
    fill(session.memory, admit.slots[0], seed=p)
    ok(session.step().checkpoint("w%d" % p, boundary_blocks=2, hash=h[1])
       .consume_fork("w%d" % p).release("w%d" % p).send())
    ok(session.step().begin_pass().send())
    ok(session.step().begin_pass().send())


def resume_all(session):
    """Admits every prompt again with its whole prefix hit; returns how
    many resumed from the device and from the tier, each resume's bytes
    checked."""
    device = tier = 0
    for p in range(PROMPTS):
        admit, = ok(session.step().admit(
            "r%d" % p, width=1, num_tokens=2 * BLOCK + 10,
            anchor_pos=2 * BLOCK, block_hashes=prompt_hashes(p),
            kv_hit_blocks=2).send())
        if admit.blocks_resumed == 2 and admit.adopted:
            # From the tier (or adopted on the device): slot 0 holds it.
            assert holds(session.memory, admit.slots[0], seed=p), p
            tier += 1
        elif admit.blocks_resumed == 2:
            assert holds(session.memory, admit.fork_src, seed=p), p
            device += 1
            ok(session.step().consume_fork("r%d" % p).send())
        # What the engine's forward does to the slot it continues in.
        fill(session.memory, admit.slots[0], seed=200)
        ok(session.step().release("r%d" % p).begin_pass().begin_pass()
           .send())
    return device, tier


def run(start_daemon, tier_slots):
    daemon = start_daemon("--metrics_address=127.0.0.1:0",
                          layout=SMALL_LAYOUT, num_slots=POOL)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        slot_bytes = session.memory.bytes_per_slot
        if tier_slots:
            resized = client.admin.resize(
                host_tier_bytes=tier_slots * slot_bytes)
            assert resized.host_tier_bytes == tier_slots * slot_bytes
            assert resized.num_slots == POOL
        for p in range(PROMPTS):
            publish(session, p)
        device, tier = resume_all(session)
        stats = client.admin.stats()
    return daemon, device, tier, stats, slot_bytes


def test_a_working_set_twice_the_pool_resumes_from_the_tier(start_daemon):
    _, device_off, tier_off, stats_off, _ = run(start_daemon, tier_slots=0)
    daemon, device, tier, stats, slot_bytes = run(start_daemon,
                                                  tier_slots=2 * PROMPTS)
    # Without the tier, no more than the pool's worth resumes (here the
    # resumes' own admissions spend the rest); with it, every prompt does.
    assert device_off + tier_off <= POOL
    assert stats_off.resumes_tier == 0
    assert device + tier == PROMPTS
    assert tier >= PROMPTS - POOL
    assert stats.resumes_tier == tier
    assert stats.host_tier_capacity_bytes == 2 * PROMPTS * slot_bytes
    assert stats.host_tier_demotions >= PROMPTS - POOL
    assert stats.host_tier_entries * slot_bytes == stats.host_tier_bytes
    assert stats.host_tier_demotions_failed == 0
    assert stats.resume_blocks_resumed == 2 * PROMPTS
    port = re.search(r"metrics on http://\S+:(\d+)/", daemon.log())[1]
    text = urllib.request.urlopen(
        "http://127.0.0.1:%s/metrics" % port).read().decode()
    assert re.search(r'statecache_resumes_total\{outcome="tier"\} %d\b'
                     % tier, text), text
    assert re.search(r'statecache_host_tier_bytes\{state="capacity"\} %d\b'
                     % (2 * PROMPTS * slot_bytes), text)
    assert 'statecache_copy_bytes_total{reason="promotion"}' in text


def test_the_list_form_says_the_resume_came_from_the_tier(start_daemon):
    daemon = start_daemon(layout=SMALL_LAYOUT, num_slots=POOL)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        client.admin.resize(host_tier_bytes=4 * session.memory.bytes_per_slot)
        publish(session, 0)
        for p in range(1, POOL + 1):  # spends prompt 0's checkpoint
            publish(session, p)
        # Another session, in the list form (raw stubs): the index and the
        # tier are the daemon's, not a session's.
        stub = pb_grpc.StateCacheStub(grpc.insecure_channel(daemon.address))
        other = stub.Attach(pb.AttachRequest(identity=pb.Identity(
            model_id=MODEL_ID, hash_block_size=BLOCK)), timeout=5)
        h = prompt_hashes(0)
        response = stub.Step(pb.StepRequest(
            session_id=other.session_id, operations=[
            pb.Operation(lookup=pb.Lookup(hash=h[1])),
            pb.Operation(resumable_hit=pb.ResumableHit(
                num_tokens=2 * BLOCK + 10, block_hashes=h, kv_hit_blocks=2)),
            pb.Operation(admit=pb.Admit(
                request_id="t", width=1, num_tokens=2 * BLOCK + 10,
                block_hashes=h, kv_hit_blocks=2))]))
        lookup, hit, admit = response.results
        assert lookup.lookup.slot == -1 and lookup.lookup.in_tier
        assert hit.resumable_hit.blocks == 0
        assert hit.resumable_hit.tier_blocks == 2
        assert admit.code == 0, admit.message
        assert admit.admit.from_tier and admit.admit.adopted
        assert admit.admit.blocks_resumed == 2
        assert holds(session.memory, admit.admit.slots[0], seed=0)


def test_resize_refuses_a_bad_tier_and_changes_nothing(start_daemon):
    bare = start_daemon(num_slots=POOL)  # no state memory
    with statecache.Client.connect(bare.address) as client:
        with pytest.raises(statecache.FailedPrecondition,
                           match="without state memory"):
            client.admin.resize(host_tier_bytes=1 << 20)
        with pytest.raises(statecache.InvalidArgument,
                           match="host_tier_bytes must be >= 0"):
            client.admin.resize(host_tier_bytes=-1)
        assert client.admin.stats().host_tier_capacity_bytes == 0
    daemon = start_daemon(layout=SMALL_LAYOUT, num_slots=POOL)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        with pytest.raises(statecache.InvalidArgument, match="hold no slot"):
            client.admin.resize(host_tier_bytes=1)
        # Off again drops what it held.
        client.admin.resize(host_tier_bytes=4 * session.memory.bytes_per_slot)
        publish(session, 0)
        for p in range(1, POOL + 1):
            publish(session, p)
        assert client.admin.stats().host_tier_entries > 0
        assert client.admin.resize(host_tier_bytes=0).host_tier_bytes == 0
        stats = client.admin.stats()
        assert stats.host_tier_entries == 0 and stats.slots_total == POOL


def test_the_tier_flag_needs_state_memory(tmp_path):
    from statecache.testing import Daemon
    from conftest import identity_flags
    with pytest.raises(Exception, match="host_tier_bytes"):
        Daemon(identity_flags() + ["--host_tier_bytes=1048576"])

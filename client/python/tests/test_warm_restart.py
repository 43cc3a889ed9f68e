"""Warm restart (--state_dir) against the real daemon process: checkpoints
published with known bytes (written through the mapped region) survive a
SIGKILL and a SIGTERM, and a new session's resumes return exactly those
bytes; a corrupted byte, a truncated index and a changed model each give
the documented outcome, with nothing wrong served."""

import glob
import json
import os
import re
import subprocess
import time

import pytest

import statecache

from conftest import BLOCK, MODEL_ID, SMALL_LAYOUT, attach
from test_host_tier import ok, prompt_hashes, publish
from test_memory import holds

POOL = 8
SAVE_INTERVAL = "--state_save_interval=5ms"


@pytest.fixture
def state_dir(tmp_path):
    """A state directory; every region a daemon kept for it (named in the
    daemons' logs) is removed at the end, as an operator would."""
    path = str(tmp_path / "state")
    yield path
    for log in glob.glob("/tmp/statecache-test-*/statecached.log"):
        try:
            text = open(log, errors="replace").read()
        except OSError:
            continue
        if path not in text:
            continue
        for handle in set(re.findall(r"handle=/(\S+-kept)", text)):
            try:
                os.unlink("/dev/shm/" + handle)
            except FileNotFoundError:
                pass


def start(start_daemon, state_dir, *flags, layout=SMALL_LAYOUT,
          num_slots=POOL):
    return start_daemon("--state_dir=" + state_dir, SAVE_INTERVAL, *flags,
                        layout=layout, num_slots=num_slots)


def warm(client):
    return client.admin.stats().warm_restart


def wait_saved(client, count, timeout=10.0):
    """Until the index on disk holds `count` checkpoints (GetStats says
    what the last write held; polled, not slept on)."""
    deadline = time.monotonic() + timeout
    while warm(client).saved_checkpoints != count:
        assert time.monotonic() < deadline, warm(client)


def resume(session, p):
    """Admits prompt p with its whole prefix hit; returns the slot the
    resume reads its state from (None for a miss), the request left
    holding it."""
    admit, = ok(session.step().admit(
        "r%d" % p, width=1, num_tokens=2 * BLOCK + 10, anchor_pos=2 * BLOCK,
        block_hashes=prompt_hashes(p), kv_hit_blocks=2).send())
    if admit.blocks_resumed != 2:
        return None
    return admit.slots[0] if admit.adopted else admit.fork_src


def resume_checked(session, prompts):
    """Resumes each prompt in turn, checking each hit's bytes, releasing it
    as the engine would; returns the prompts that missed."""
    missed = []
    for p in prompts:
        slot = resume(session, p)
        if slot is None:
            missed.append(p)
        else:
            assert holds(session.memory, slot, seed=p), p
        ok(session.step().release("r%d" % p).begin_pass().begin_pass()
           .send())
    return missed


@pytest.mark.parametrize("arrangement", ["slot_major", "layer_major"])
def test_sigkill_keeps_the_checkpoints_and_their_bytes(start_daemon,
                                                       state_dir,
                                                       arrangement):
    flags = (["--layer_major", "--max_slots=%d" % POOL]
             if arrangement == "layer_major" else [])
    daemon = start(start_daemon, state_dir, *flags)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        assert warm(client).outcome == "cold"
        assert session.memory.arrangement == arrangement
        for p in range(4):
            publish(session, p)
        wait_saved(client, 4)
        epoch = client.admin.stats().epoch
        daemon.kill()
    daemon.start()
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        stats = client.admin.stats()
        assert stats.epoch != epoch  # its requests are gone...
        assert stats.requests == 0
        w = stats.warm_restart
        assert (w.outcome, w.restored_checkpoints, w.dropped_bad_checksum) \
            == ("restored", 4, 0), w
        assert stats.indexed_hashes == 4  # ...its checkpoints are not
        assert resume_checked(session, range(4)) == []
    # What an operator reads at 3 a.m.
    ctl = os.path.join(os.path.dirname(daemon.binary), "statecachectl")
    out = subprocess.run([ctl, "--address=" + daemon.address, "stats"],
                         capture_output=True, text=True, check=True).stdout
    assert re.search(r"this start\s+restored\n", out), out
    assert re.search(r"restored\s+4 checkpoints, 0 tier entries", out), out
    js = json.loads(subprocess.run(
        [ctl, "--address=" + daemon.address, "--json", "stats"],
        capture_output=True, text=True, check=True).stdout)
    assert js["warm_restart"]["restored_checkpoints"] == 4


def test_sigterm_saves_the_tier_and_a_working_set_twice_the_pool_comes_back(
        start_daemon, state_dir):
    prompts = 2 * POOL
    tier = "--host_tier_bytes=%d" % (2 * prompts * 17920)
    daemon = start(start_daemon, state_dir, tier)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        assert session.memory.bytes_per_slot == 17920
        for p in range(prompts):
            publish(session, p)
        held = client.admin.stats()
        assert held.host_tier_entries >= prompts - POOL
        region = "/dev/shm" + session.memory.handle.decode()
        assert os.path.exists(region)
    # SIGTERM: the device checkpoints' and the tier's images go to the
    # directory, and the region, no longer needed, goes.
    assert daemon.stop() == 0
    assert glob.glob(os.path.join(state_dir, "device-*.images"))
    assert glob.glob(os.path.join(state_dir, "tier-*.images"))
    assert not os.path.exists(region)
    daemon.start()
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        w = warm(client)
        assert w.outcome == "restored", w
        assert w.restored_checkpoints + w.restored_tier_entries >= prompts
        assert w.restored_tier_entries >= prompts - POOL
        assert w.dropped_bad_checksum == 0
        assert resume_checked(session, range(prompts)) == []
        assert client.admin.stats().resumes_tier >= prompts - POOL
    # The device images are in the new region now (the index names it).
    assert not glob.glob(os.path.join(state_dir, "device-*.images"))


def test_a_corrupted_byte_drops_that_checkpoint_only(start_daemon,
                                                     state_dir):
    daemon = start(start_daemon, state_dir)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        for p in range(4):
            publish(session, p)
        wait_saved(client, 4)
        looked, = ok(session.step().lookup(prompt_hashes(0)[1]).send())
        victim = looked.slot
        daemon.kill()
        # At rest, after the crash: one byte of prompt 0's checkpoint,
        # through this process's mapping of the region the daemon left.
        view = session.memory.tensor("ssm", 2)
        view[victim].view("uint8").flat[7] ^= 0x40
    daemon.start()
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        w = warm(client)
        assert (w.outcome, w.restored_checkpoints, w.dropped_bad_checksum) \
            == ("restored", 3, 1), w
        looked, = ok(session.step().lookup(prompt_hashes(0)[1]).send())
        assert looked.slot == -1
        assert resume_checked(session, range(4)) == [0]


def start_with_a_full_tier(start_daemon, state_dir):
    """A 4-slot daemon whose tier holds 8 images, 8 prompts published into
    it; returns the daemon and its stats then."""
    tier = "--host_tier_bytes=%d" % (8 * 17920)
    daemon = start(start_daemon, state_dir, tier, num_slots=4)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        for p in range(8):
            publish(session, p)
        held = client.admin.stats()
    assert held.host_tier_entries >= 4
    return daemon, held


def test_a_corrupted_tier_image_is_dropped(start_daemon, state_dir):
    daemon, held = start_with_a_full_tier(start_daemon, state_dir)
    entries = held.host_tier_entries
    daemon.stop()
    images, = glob.glob(os.path.join(state_dir, "tier-*.images"))
    with open(images, "r+b") as f:  # the first image, byte 100
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    daemon.start()
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        w = warm(client)
        assert w.outcome == "restored"
        assert w.dropped_bad_checksum == 1
        assert w.restored_tier_entries == entries - 1
        missed = resume_checked(session, range(8))
        assert len(missed) == 1, missed


def test_a_truncated_index_is_an_empty_start(start_daemon, state_dir):
    daemon = start(start_daemon, state_dir)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        for p in range(3):
            publish(session, p)
    daemon.stop()
    index = os.path.join(state_dir, "index")
    size = os.path.getsize(index)
    os.truncate(index, size // 2)
    daemon.start()
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        w = warm(client)
        assert w.outcome == "unreadable", w
        assert "state index" in w.reason
        assert client.admin.stats().indexed_hashes == 0
        assert resume_checked(session, range(3)) == [0, 1, 2]
        assert w.saves >= 1  # a fresh index replaced the torn one
    assert "starting empty" in daemon.log()
    assert os.path.getsize(index) > 0


@pytest.mark.parametrize("change", ["model", "model_id"])
def test_a_changed_model_is_an_empty_start(start_daemon, state_dir, change):
    if change == "model":
        first = ["--model=jamba-v0.1"]
        second = ["--model=nemotron-h-8b"]
        layout = None
    else:
        first = []
        second = ["--model_id=another/model"]
        layout = SMALL_LAYOUT
    daemon = start(start_daemon, state_dir, *first, layout=layout,
                   num_slots=4)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        publish(session, 0)
        wait_saved(client, 1)
    daemon.stop()
    flags = [f for f in daemon.flags if not f.startswith(
        ("--model=", "--model_id="))]
    if change == "model_id":
        flags = second + flags
    else:
        flags = ["--model_id=" + MODEL_ID] + second + flags
    daemon.restart(flags)
    with statecache.Client.connect(daemon.address) as client:
        w = warm(client)
        assert w.outcome == "mismatch", w
        assert "the index was made under" in w.reason
        assert client.admin.stats().indexed_hashes == 0
    assert os.path.exists(os.path.join(state_dir, "index.rejected"))


def test_two_daemons_cannot_share_a_state_dir(start_daemon, state_dir):
    start(start_daemon, state_dir)
    with pytest.raises(RuntimeError, match="in use by another daemon"):
        start(start_daemon, state_dir)


def test_a_state_dir_needs_state_memory(start_daemon, state_dir):
    with pytest.raises(RuntimeError, match="--state_dir needs state memory"):
        start_daemon("--state_dir=" + state_dir)


# ---- a crafted index -------------------------------------------------------
#
# The index's own checksum vouches for its encoding, not for its numbers: an
# index sealed with a valid checksum may still name image locations no file
# holds. The records are rewritten here and sealed again with the daemon's
# own checksum (XXH3-64, through Debian's libxxhash), so the daemon reads
# past the checksum into the locations.

def _xxh3(data):
    import ctypes
    lib = ctypes.CDLL("libxxhash.so.0")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib.XXH3_64bits(data, len(data))


def _tier_record_offsets(index):
    """Byte offsets of each tier record's location field, read by the
    encoding of daemon/core/saved_state.cc."""
    import struct
    at = 8 + 4  # magic, version

    def u64():
        nonlocal at
        value, = struct.unpack_from("<Q", index, at)
        at += 8
        return value

    def skip(size_of_each=1):
        # The count first: `at += u64()` would add to `at` as it was
        # before u64() moved it.
        nonlocal at
        count = u64()
        at += count * size_of_each

    skip()                     # fingerprint
    u64(), u64()               # epoch, bytes_per_slot
    skip()                     # region handle
    u64(), u64(), u64()        # capacity, num_slots, region_bytes
    skip()                     # device images
    skip(25)                   # device records
    skip()                     # tier images
    count = u64()
    return [at + k * 25 + 8 for k in range(count)]


@pytest.mark.parametrize("location", [(1 << 54) - 1, 1 << 55, (1 << 63) - 1])
def test_an_index_naming_images_past_its_file_starts_without_them(
        start_daemon, state_dir, location):
    """A location past the images file, a huge one whose byte offset wraps
    (2^54-1) or lands on image 0 (2^55 x 17920 = 35 x 2^64): the daemon
    starts, the tier section that names it is dropped as unreadable (its
    index is not to be trusted), the device checkpoints come back with
    their bytes, and no resume reads another image's state."""
    import struct
    daemon, held = start_with_a_full_tier(start_daemon, state_dir)
    entries, on_device = held.host_tier_entries, held.indexed_hashes
    assert on_device >= 1
    assert daemon.stop() == 0
    path = os.path.join(state_dir, "index")
    index = bytearray(open(path, "rb").read())
    offsets = _tier_record_offsets(index)
    assert len(offsets) == entries
    # The second entry's image: 2^55 would alias image 0.
    struct.pack_into("<Q", index, offsets[1], location)
    struct.pack_into("<Q", index, len(index) - 8, _xxh3(bytes(index[:-8])))
    with open(path, "wb") as f:
        f.write(index)
    daemon.start()
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        w = warm(client)
        assert w.outcome == "restored", w
        assert "tier entries" in w.reason, w
        assert "image %d lies outside" % location in w.reason, w
        assert w.dropped_unreadable == entries, w
        assert w.restored_tier_entries == 0, w
        assert w.restored_checkpoints == on_device, w
        # The device's checkpoints resume with their own bytes; the tier's
        # prompts miss rather than read anything else.
        missed = resume_checked(session, range(8))
        assert len(missed) == 8 - on_device, missed
        assert client.admin.stats().resumes_tier == 0


def kept_regions_of(pid):
    """The regions kept for a warm restart by the daemon process `pid`."""
    return glob.glob("/dev/shm/statecache-*-%d-*-kept" % pid)


def test_orphaned_regions_are_reclaimed_by_their_own_daemon_only(
        start_daemon, state_dir):
    """A daemon killed before its index named its region (a
    SIGKILL during the shutdown save) left the region in /dev/shm for
    good. A later start on the same address reclaims it, with or without
    --state_dir, unless an index (or index.rejected) still names it; a
    daemon on another address never touches it."""
    daemon = start(start_daemon, state_dir, num_slots=4)
    pid = daemon.process.pid
    orphan, = kept_regions_of(pid)
    daemon.kill()
    assert os.path.exists(orphan)

    # Another daemon (another address) on the node: not its region.
    other = start_daemon(layout=SMALL_LAYOUT, num_slots=4)
    other.stop()
    assert os.path.exists(orphan)

    # The same address with another model: the index is rejected, and the
    # region it names is spared (the right flags could still restore it).
    flags = [f for f in daemon.flags if not f.startswith("--model_id=")]
    daemon.restart(["--model_id=another/model"] + flags)
    with statecache.Client.connect(daemon.address) as client:
        assert warm(client).outcome == "mismatch"
    daemon.stop()
    assert os.path.exists(orphan)
    assert "removed orphaned region" not in daemon.log()

    # The same address without --state_dir: nothing will restore from it.
    flags = [f for f in daemon.flags if not f.startswith("--state_dir=")]
    daemon.restart(flags)
    assert not os.path.exists(orphan)
    assert "removed orphaned region " + os.path.basename(orphan) in \
        daemon.log()

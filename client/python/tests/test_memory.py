"""State memory on the host backend: zero-copy numpy views over the
daemon's POSIX shared memory, seen by a second process, and moved by the
daemon's copy engine."""

import hashlib
import importlib.util
import inspect
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import statecache

from conftest import SMALL_LAYOUT, attach


def pattern(seed, tensor_index, layer, shape, dtype):
    """Distinct contents for each (seed, tensor, layer) piece."""
    n = int(np.prod(shape))
    values = (np.arange(n, dtype=np.int64) * 7 + seed * 1009
              + layer * 101 + tensor_index * 13)
    if np.dtype(dtype).kind == "f":
        return (values % 4093).astype(dtype).reshape(shape) / 8
    return (values % np.iinfo(dtype).max).astype(dtype).reshape(shape)


def pieces(memory):
    """(name, layer, tensor index) of every piece, in placement order."""
    for p in memory.placements:
        yield memory.tensors[p.tensor].name, p.layer, p.tensor


def fill(memory, slot, seed):
    for name, layer, t in pieces(memory):
        view = memory.tensor(name, layer)
        view[slot] = pattern(seed, t, layer, view.shape[1:], view.dtype)


def holds(memory, slot, seed):
    for name, layer, t in pieces(memory):
        view = memory.tensor(name, layer)
        if not np.array_equal(view[slot], pattern(seed, t, layer,
                                                  view.shape[1:], view.dtype)):
            return False
    return True


def digest(memory, slot):
    h = hashlib.sha256()
    for name, layer, _ in pieces(memory):
        h.update(memory.tensor(name, layer)[slot].tobytes())
    return h.hexdigest()


@pytest.fixture
def memory_daemon(start_daemon):
    return start_daemon(layout=SMALL_LAYOUT, num_slots=12)


def test_memory_describes_the_region(memory_daemon):
    with statecache.Client.connect(memory_daemon.address) as client, \
            attach(client) as session:
        memory = session.memory
        assert memory.backend == "host"
        assert memory.device_ordinal == -1
        assert memory.handle.startswith(b"/")
        assert memory.num_slots == memory.capacity_slots == 12
        assert memory.arrangement == "slot_major"
        assert memory.layout_name == "py-small" and memory.num_layers == 4
        assert [(t.name, t.dtype, t.shape) for t in memory.tensors] == [
            ("conv", "bf16", (3, 64)), ("ssm", "f32", (4, 16, 16))]
        assert len(memory.placements) == 8
        assert memory.region_bytes == 12 * memory.bytes_per_slot
        conv = memory.tensor("conv", 2)
        ssm = memory.tensor("ssm", 3)
        assert conv.shape == (12, 3, 64) and ssm.shape == (12, 4, 16, 16)
        assert ssm.dtype == np.float32
        assert conv.dtype == statecache.numpy_dtype("bf16")
        assert conv.dtype.itemsize == 2
        assert conv.flags.writeable and not conv.flags.owndata
        p = memory.placement("ssm", 3)
        assert ssm.strides == (p.slot_stride,) + p.strides
        with pytest.raises(KeyError, match="conv, ssm"):
            memory.tensor("kv", 0)
        with pytest.raises(KeyError):
            memory.tensor("conv", 4)


def test_memory_is_none_without_a_layout(session):
    assert session.memory is None


CHILD = """
import hashlib, sys
import numpy as np
import statecache
from conftest import attach

{pattern}
{pieces}
{digest}

address, slot_a, slot_b, seed = sys.argv[1], *map(int, sys.argv[2:5])
with statecache.Client.connect(address) as client, \\
        attach(client, client_name="second-process") as session:
    memory = session.memory
    print(memory.handle.decode())
    print(digest(memory, slot_a))
    for name, layer, t in pieces(memory):
        view = memory.tensor(name, layer)
        view[slot_b] = pattern(seed, t, layer, view.shape[1:], view.dtype)
    print("written")
"""


def test_a_second_process_sees_the_same_bytes(memory_daemon, tmp_path):
    with statecache.Client.connect(memory_daemon.address) as client, \
            attach(client) as session:
        a, b = session.step().admit("a", width=1, num_tokens=1) \
            .admit("b", width=1, num_tokens=1).send()
        slot_a, slot_b = a.slots[0], b.slots[0]
        memory = session.memory
        fill(memory, slot_a, seed=1)
        fill(memory, slot_b, seed=0)
        script = tmp_path / "child.py"
        script.write_text(CHILD.format(**{
            name: textwrap.dedent(inspect.getsource(f))
            for name, f in [("pattern", pattern), ("pieces", pieces),
                            ("digest", digest)]}))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.dirname(__file__)] + sys.path)
        child = subprocess.run(
            [sys.executable, str(script), memory_daemon.address,
             str(slot_a), str(slot_b), "2"],
            capture_output=True, text=True, env=env, timeout=60)
        assert child.returncode == 0, child.stderr
        handle, child_digest, written = child.stdout.split()
        assert handle == memory.handle.decode()
        # What this process wrote, the other read ...
        assert child_digest == digest(memory, slot_a)
        # ... and what it wrote, this one reads.
        assert written == "written"
        assert holds(memory, slot_b, seed=2)
        assert holds(memory, slot_a, seed=1)


@pytest.mark.parametrize("arrangement", ["slot_major", "layer_major"])
def test_copy_moves_a_rollback_slot_into_the_committed_one(start_daemon,
                                                           arrangement):
    flags = (["--layer_major", "--max_slots=12"]
             if arrangement == "layer_major" else [])
    daemon = start_daemon(*flags, layout=SMALL_LAYOUT, num_slots=12)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        memory = session.memory
        assert memory.arrangement == arrangement
        admit, = session.step().admit("e", width=2, num_tokens=1).send()
        committed, rollback = admit.slots
        fill(memory, committed, seed=5)
        fill(memory, rollback, seed=6)
        assert holds(memory, committed, seed=5)
        copy, = session.step().copy("e", from_index=1, to_index=0).send()
        assert copy.ok and copy.bytes == memory.bytes_per_slot
        assert holds(memory, committed, seed=6)
        assert holds(memory, rollback, seed=6)
        if arrangement == "slot_major":
            raw = memory.slot_bytes(committed)
            assert raw.shape == (memory.bytes_per_slot,)
            assert raw.tobytes() == memory.slot_bytes(rollback).tobytes()


def test_torch_and_gpu_views_need_torch(memory_daemon):
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed: this checks the message without it")
    with statecache.Client.connect(memory_daemon.address) as client, \
            attach(client) as session:
        with pytest.raises(ImportError, match="torch"):
            session.memory.torch("conv", 0)
        with pytest.raises(ImportError, match="torch"):
            statecache.cuda_views(session.memory)
        with pytest.raises(ValueError, match="not a GPU region"):
            statecache.open_gpu_region(session.memory)


def test_dtypes():
    assert statecache.numpy_dtype("f32") == np.float32
    assert statecache.numpy_dtype("f16") == np.float16
    assert statecache.numpy_dtype("bf16").itemsize == 2
    assert statecache.numpy_dtype("f8_e4m3").itemsize == 1
    assert statecache.numpy_dtype("f8_e5m2").itemsize == 1
    with pytest.raises(ValueError):
        statecache.numpy_dtype("f64")


def test_a_layout_files_arrangement_stands(start_daemon):
    """The file's "arrangement" decides unless --layer_major is given (the
    flag used to replace it either way)."""
    layout = dict(SMALL_LAYOUT, arrangement="layer_major")
    daemon = start_daemon("--max_slots=16", layout=layout, num_slots=8)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        assert session.memory.arrangement == "layer_major"
    slot_major = dict(SMALL_LAYOUT, arrangement="slot_major")
    daemon = start_daemon("--max_slots=16", "--layer_major", num_slots=8,
                          layout=slot_major)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        assert session.memory.arrangement == "layer_major"

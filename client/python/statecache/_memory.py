"""The state memory an Attach returns: where every slot's bytes are, and
zero-copy views over them.

Host backend (POSIX shared memory): :meth:`StateMemory.tensor` maps the
region (``/dev/shm/<handle>``, MAP_SHARED, read-write) on first use and
returns numpy views; :meth:`StateMemory.torch` the same as torch tensors.

GPU backends ("cuda", "hip"): the daemon owns the allocation and exports an
IPC handle; :func:`cuda_views` opens it in this process (through the CUDA or
HIP runtime, by ctypes) and returns torch tensors on the device. The plain
values (``handle``, ``device_ordinal``, ``placements``) are there for
runners that open it themselves.

For piece (tensor t, layer l, slot s) the proto's rule is: the placement p
with p.tensor == t and p.layer == l starts at base + p.offset + s *
p.slot_stride and its elements follow p.strides (bytes, row-major over the
tensor's shape). Every view here is that rule: shape (capacity_slots,
*tensor.shape), byte strides (slot_stride, *strides).
"""

from __future__ import annotations

import ctypes
import mmap
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - optional dependencies
    import numpy
    import torch as torch_module

__all__ = ["StateMemory", "StateTensor", "TensorPlacement", "cuda_views",
           "numpy_dtype", "torch_dtype"]

# Bytes per element of each dtype name the daemon uses (daemon/device/
# dtype.h).
DTYPE_SIZES = {"bf16": 2, "f16": 2, "f32": 4, "f8_e4m3": 1, "f8_e5m2": 1}


@dataclass(slots=True)
class StateTensor:
    """One state tensor of the layout, per slot and layer."""

    name: str = ""
    dtype: str = ""  # "bf16", "f16", "f32", "f8_e4m3", "f8_e5m2"
    shape: tuple[int, ...] = ()


@dataclass(slots=True)
class TensorPlacement:
    """Where (tensor, layer)'s pieces lie in the region (bytes)."""

    tensor: int = 0
    layer: int = 0
    offset: int = 0
    slot_stride: int = 0
    bytes: int = 0
    strides: tuple[int, ...] = ()


def numpy_dtype(name: str) -> numpy.dtype:
    """The numpy dtype of a state dtype name. bf16 and the f8 types are
    ml_dtypes' when ml_dtypes is importable, else the same-sized unsigned
    integer (uint16, uint8: the raw bits)."""
    import numpy as np
    if name == "f16":
        return np.dtype(np.float16)
    if name == "f32":
        return np.dtype(np.float32)
    raw = {"bf16": np.uint16, "f8_e4m3": np.uint8, "f8_e5m2": np.uint8}
    if name not in raw:
        raise ValueError("unknown state dtype %r" % name)
    try:
        import ml_dtypes
    except ImportError:
        return np.dtype(raw[name])
    return np.dtype({"bf16": ml_dtypes.bfloat16,
                     "f8_e4m3": ml_dtypes.float8_e4m3fn,
                     "f8_e5m2": ml_dtypes.float8_e5m2}[name])


def torch_dtype(name: str) -> torch_module.dtype:
    """The torch dtype of a state dtype name (imports torch)."""
    torch = _import_torch()
    return {"bf16": torch.bfloat16, "f16": torch.float16,
            "f32": torch.float32, "f8_e4m3": torch.float8_e4m3fn,
            "f8_e5m2": torch.float8_e5m2}[name]


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ImportError("statecache: torch views need PyTorch (import "
                          "torch failed: %s); numpy views (memory.tensor) "
                          "do not" % e) from e
    return torch


@dataclass(eq=False)
class StateMemory:
    """AttachResponse.memory: the region holding every slot.

    Attributes (as the proto's StateMemory): backend ("host", "cuda",
    "hip"), handle (bytes: the shared-memory name on the host, the raw
    64-byte IPC handle on GPUs), device_ordinal (-1 on the host),
    region_bytes, num_slots, capacity_slots, layout_name,
    layout_fingerprint, arrangement ("slot_major" or "layer_major"),
    num_layers, tensors (list of StateTensor), placements (list of
    TensorPlacement, [layer][tensor] order), bytes_per_slot.

    The host mapping is made on the first :meth:`tensor` / :meth:`torch`
    and lives as long as this object or a view over it. It covers the
    region as Attach described it: after a resize grows the pool, attach
    again for views over the new slots.
    """

    backend: str = ""
    handle: bytes = b""
    device_ordinal: int = -1
    region_bytes: int = 0
    num_slots: int = 0
    capacity_slots: int = 0
    layout_name: str = ""
    layout_fingerprint: str = ""
    arrangement: str = ""
    num_layers: int = 0
    tensors: list[StateTensor] = field(default_factory=list)
    placements: list[TensorPlacement] = field(default_factory=list)
    bytes_per_slot: int = 0
    _mmap: mmap.mmap | None = field(default=None, init=False, repr=False)

    @classmethod
    def _from_proto(cls, m: Any) -> StateMemory:
        return cls(
            backend=m.backend, handle=bytes(m.handle),
            device_ordinal=m.device_ordinal, region_bytes=m.region_bytes,
            num_slots=m.num_slots, capacity_slots=m.capacity_slots,
            layout_name=m.layout_name,
            layout_fingerprint=m.layout_fingerprint,
            arrangement=m.arrangement, num_layers=m.num_layers,
            tensors=[StateTensor(t.name, t.dtype, tuple(t.shape))
                     for t in m.tensors],
            placements=[TensorPlacement(p.tensor, p.layer, p.offset,
                                        p.slot_stride, p.bytes,
                                        tuple(p.strides))
                        for p in m.placements],
            bytes_per_slot=m.bytes_per_slot)

    # ---- finding pieces

    def tensor_index(self, name: str) -> int:
        """The index of the tensor called `name` (KeyError if none)."""
        for i, t in enumerate(self.tensors):
            if t.name == name:
                return i
        raise KeyError("no state tensor %r (the layout has %s)" % (
            name, ", ".join(t.name for t in self.tensors)))

    def placement(self, name: str, layer: int) -> TensorPlacement:
        """The TensorPlacement of tensor `name` in `layer`."""
        index = self.tensor_index(name)
        for p in self.placements:
            if p.tensor == index and p.layer == layer:
                return p
        raise KeyError("no placement for tensor %r layer %d (%d layers)" % (
            name, layer, self.num_layers))

    # ---- host views

    def _host_map(self) -> mmap.mmap:
        if self.backend != "host":
            raise ValueError(
                "memory.tensor maps host (shared-memory) regions; this one "
                "is on %r: use statecache.cuda_views(memory)" % self.backend)
        if self._mmap is None:
            path = "/dev/shm/" + self.handle.decode().lstrip("/")
            fd = os.open(path, os.O_RDWR)
            try:
                self._mmap = mmap.mmap(fd, self.region_bytes,
                                       flags=mmap.MAP_SHARED,
                                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
        return self._mmap

    def tensor(self, name: str, layer: int) -> numpy.ndarray:
        """A writable numpy view of tensor `name` in `layer` for every slot:
        shape (capacity_slots, *shape), zero-copy over the shared memory
        (``view[slot]`` is that slot's piece). Host backend only."""
        import numpy as np
        t = self.tensors[self.tensor_index(name)]
        p = self.placement(name, layer)
        return np.ndarray(shape=(self.capacity_slots,) + tuple(t.shape),
                          dtype=numpy_dtype(t.dtype), buffer=self._host_map(),
                          offset=p.offset,
                          strides=(p.slot_stride,) + tuple(p.strides))

    def slot_bytes(self, slot: int) -> numpy.ndarray:
        """A writable numpy uint8 view of one whole slot (slot-major
        regions: one contiguous range, padding included)."""
        import numpy as np
        if self.arrangement != "slot_major":
            raise ValueError("slot_bytes needs a slot_major region")
        return np.ndarray(shape=(self.bytes_per_slot,), dtype=np.uint8,
                          buffer=self._host_map(),
                          offset=slot * self.bytes_per_slot)

    def torch(self, name: str, layer: int) -> torch_module.Tensor:
        """:meth:`tensor` as a torch tensor (CPU, zero-copy). Needs torch
        (ImportError otherwise). Host backend only."""
        torch = _import_torch()
        raw = torch.frombuffer(self._host_map(), dtype=torch.uint8)
        return _strided(torch, raw, self, name, layer)

    def close(self) -> None:
        """Unmaps the host region if no view over it is alive (views keep
        it mapped otherwise; it goes with the last of them)."""
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:
                return
            self._mmap = None


def _strided(torch: Any, raw: Any, memory: StateMemory, name: str,
             layer: int) -> Any:
    """The placement's view over `raw` (a 1-D uint8 tensor over the region
    base), by the proto's PyTorch recipe."""
    t = memory.tensors[memory.tensor_index(name)]
    p = memory.placement(name, layer)
    size = DTYPE_SIZES[t.dtype]
    typed = raw.view(torch_dtype(t.dtype))
    return typed.as_strided(
        size=(memory.capacity_slots,) + tuple(t.shape),
        stride=(p.slot_stride // size,) + tuple(s // size for s in p.strides),
        storage_offset=p.offset // size)


# ---------------------------------------------------------------- GPU


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


def _gpu_runtime(backend: str) -> ctypes.CDLL:
    names = {"cuda": ["libcudart.so", "libcudart.so.12", "libcudart.so.11.0"],
             "hip": ["libamdhip64.so", "libamdhip64.so.6",
                     "libamdhip64.so.5"]}[backend]
    for library in names:
        try:
            return ctypes.CDLL(library)
        except OSError:
            continue
    raise OSError("statecache: no %s runtime library found (tried %s)"
                  % (backend, ", ".join(names)))


def open_gpu_region(memory: StateMemory) -> int:
    """Opens a GPU region's IPC handle in this process and returns the base
    device pointer (an int): cudaIpcOpenMemHandle (or hipIpcOpenMemHandle)
    with lazy peer access, on device ``memory.device_ordinal``. The mapping
    lasts as long as the process (cudaIpcCloseMemHandle it to end it
    earlier)."""
    if memory.backend not in ("cuda", "hip"):
        raise ValueError("not a GPU region (backend %r)" % memory.backend)
    prefix = "cuda" if memory.backend == "cuda" else "hip"
    rt = _gpu_runtime(memory.backend)
    if len(memory.handle) != 64:
        raise ValueError("IPC handle of %d bytes, not 64" % len(memory.handle))
    set_device = getattr(rt, prefix + "SetDevice")
    err = set_device(ctypes.c_int(memory.device_ordinal))
    if err != 0:
        raise OSError("%sSetDevice(%d) failed: error %d" % (
            prefix, memory.device_ordinal, err))
    handle = _IpcHandle()
    ctypes.memmove(ctypes.byref(handle), memory.handle, 64)
    base = ctypes.c_void_p()
    open_handle = getattr(rt, prefix + "IpcOpenMemHandle")
    open_handle.argtypes = [ctypes.POINTER(ctypes.c_void_p), _IpcHandle,
                            ctypes.c_uint]
    err = open_handle(ctypes.byref(base), handle, ctypes.c_uint(1))
    if err != 0:  # flag 1: cuda/hipIpcMemLazyEnablePeerAccess
        raise OSError("%sIpcOpenMemHandle failed: error %d" % (prefix, err))
    return base.value


class _DeviceBytes:
    """A uint8 device buffer for torch.as_tensor (__cuda_array_interface__
    v3)."""

    def __init__(self, pointer: int, size: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (size,), "typestr": "|u1", "data": (pointer, False),
            "version": 3, "strides": None}


def cuda_views(memory: StateMemory, base: int | None = None
               ) -> dict[tuple[str, int], torch_module.Tensor]:
    """Torch tensors over a GPU region (backend "cuda", or "hip" with a ROCm
    build of torch), zero-copy: a dict {(tensor name, layer): tensor of
    shape (capacity_slots, *shape)} on device ``cuda:<device_ordinal>``.

    Opens the IPC handle with :func:`open_gpu_region` unless `base` (a
    device pointer already opened) is given. Needs torch; importing
    statecache does not. Not exercised by the test suite (no GPU there):
    the arithmetic is the host views', over a device pointer.
    """
    torch = _import_torch()
    if base is None:
        base = open_gpu_region(memory)
    device = torch.device("cuda", memory.device_ordinal)
    raw = torch.as_tensor(_DeviceBytes(base, memory.region_bytes),
                          device=device)
    views = {}
    for p in memory.placements:
        name = memory.tensors[p.tensor].name
        views[(name, p.layer)] = _strided(torch, raw, memory, name, p.layer)
    return views

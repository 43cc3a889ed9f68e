// RegionExport: everything a process other than the daemon needs to open the
// state region and find every piece of every slot in it. Device::Export()
// produces it; the service puts it in AttachResponse; HostRegion (and a GPU
// model runner) opens it.
//
// How a client uses it:
//   host backend: shm_open(handle, O_RDWR), mmap region_bytes MAP_SHARED
//     (HostRegion does this);
//   hip / cuda backends: `handle` is the raw hipIpcMemHandle_t /
//     cudaIpcMemHandle_t of the allocation's base (64 bytes): on the device
//     `device_ordinal` (same physical GPU), hipIpcOpenMemHandle(&base, handle,
//     hipIpcMemLazyEnablePeerAccess) gives the base pointer. In PyTorch, wrap
//     each placement with torch.as_strided over a tensor built from that
//     pointer (e.g. via __cuda_array_interface__ / DLPack).
// Then piece (tensor t, layer l, slot s) starts at
//   base + placements[l * layout.num_tensors() + t].offset
//        + s * placements[...].slot_stride
// and its elements follow placements[...].strides (bytes).
//
// An export describes the region at one moment: Resize changes num_slots and,
// for a slot-major host region, region_bytes (the handle stays the same;
// HostRegion::Remap follows it). Placements never change for a given
// capacity_slots.
#ifndef STATECACHE_VOCABULARY_REGION_EXPORT_H_
#define STATECACHE_VOCABULARY_REGION_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "vocabulary/layout.h"

namespace statecache {

struct RegionExport {
  std::string backend;      // "host", "hip" or "cuda"
  std::string handle;       // shm name ("/statecache-...") or IPC handle bytes
  int device_ordinal = -1;  // GPU backends: the daemon's device; host: -1
  // Bytes a client maps: covers every slot in [0, num_slots), and for a
  // layer-major region the whole capacity.
  uint64_t region_bytes = 0;
  int64_t num_slots = 0;       // slots in use (the pool's size)
  int64_t capacity_slots = 0;  // the capacity the placements are laid out for
  StateLayout layout;
  std::string layout_fingerprint;  // layout.FingerprintHex()
  // layout.Placements(capacity_slots): [layer][tensor] order.
  std::vector<TensorPlacement> placements;
};

}  // namespace statecache

#endif  // STATECACHE_VOCABULARY_REGION_EXPORT_H_

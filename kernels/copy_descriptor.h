// CopyDescriptor: one contiguous byte range to copy, the unit of every copy
// table the daemon runs (the GPU kernel and its host twin read the same
// table).
//
// Plain data with no dependencies, so host code and device code (hipcc,
// nvcc) include the same definition. Offsets are 64-bit, from the base of
// the source and destination regions the runner is given.
#ifndef STATECACHE_KERNELS_COPY_DESCRIPTOR_H_
#define STATECACHE_KERNELS_COPY_DESCRIPTOR_H_

#include <cstdint>

namespace statecache {

struct CopyDescriptor {
  uint64_t src_offset;
  uint64_t dst_offset;
  uint64_t bytes;
};

static_assert(sizeof(CopyDescriptor) == 24, "the device reads this layout");

}  // namespace statecache

#endif  // STATECACHE_KERNELS_COPY_DESCRIPTOR_H_

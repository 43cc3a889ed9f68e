// The batched copy kernel's launcher (kernels/copy_kernel.hip): copies a
// whole CopyDescriptor table in one launch. Host code includes this header;
// only GPU builds (STATECACHE_WITH_HIP / STATECACHE_WITH_CUDA) have it.
//
// Scheme: one block per descriptor, grid-stride over the table, after the
// host cut every descriptor to at most kDeviceCopyChunkBytes
// (SplitCopyTable). Why: with uniform chunks every block does at most the
// same work, so one 38 MB slot spreads over ~600 blocks (every compute unit
// busy) while a table of 4 KiB pieces costs one block per piece and no
// per-byte index search; the chunk table costs 24 bytes per 64 KiB copied
// (0.04%). Inside a block, 256 threads move 16-byte vectors (uint4), four in
// flight per thread, when source, destination and size are 16-byte aligned
// (the layout guarantees it), then a byte tail; an unaligned piece falls back
// to bytes. Offsets are 64-bit.
//
// Thread-safety: as the runtime's stream semantics.
#ifndef STATECACHE_KERNELS_COPY_KERNEL_H_
#define STATECACHE_KERNELS_COPY_KERNEL_H_

#include <cstdint>

#include "kernels/copy_descriptor.h"
#include "kernels/gpu_runtime.h"

namespace statecache {

// Largest descriptor the kernel is given (bytes, a multiple of 16).
inline constexpr uint64_t kDeviceCopyChunkBytes = uint64_t{64} << 10;
// Threads per block of the copy kernel.
inline constexpr int kCopyKernelThreads = 256;

// Enqueues the copy of every descriptor of `device_table` (in device
// memory, num_descriptors entries) from src_base to dst_base on `stream`:
// one launch of min(num_descriptors, max_blocks) blocks. Returns the launch
// status (hipSuccess when enqueued); completion follows the stream.
// REQUIRES: the ranges lie inside their buffers; no destination overlaps
// another destination or any source; max_blocks >= 1.
hipError_t LaunchCopyTable(const CopyDescriptor* device_table,
                           int64_t num_descriptors, const void* src_base,
                           void* dst_base, int max_blocks, hipStream_t stream);

}  // namespace statecache

#endif  // STATECACHE_KERNELS_COPY_KERNEL_H_

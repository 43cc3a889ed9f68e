// StreamingCopy: memcpy with non-temporal stores, for copies much larger
// than the caches.
//
// A slot copy's destination is not read again by the daemon, so writing it
// through the caches evicts what is hot and first reads every destination
// line (read-for-ownership): a third more memory traffic. Non-temporal
// stores skip both. glibc's memcpy switches to them on its own only above a
// threshold derived from the last-level cache size, which on large-cache
// machines is far above one slot (bench/copy_bench measures the gap); this
// routine applies them to every piece of a large table. Like glibc's large-copy
// loop, it streams two pages at once (loads from page p and p+1 interleaved,
// prefetched), which keeps more DRAM pages open than one sequential stream.
//
// Copies under two pages (8 KiB) use memcpy: they gain nothing measurable
// from streaming and glibc's small-copy paths are tighter. x86-64: AVX2 when
// the CPU has it, SSE2 otherwise; other architectures fall back to memcpy.
//
// Thread-safe. The stores are weakly ordered: call StreamingFence() before
// telling another thread (or process) the bytes are there.
#ifndef STATECACHE_KERNELS_STREAMING_COPY_H_
#define STATECACHE_KERNELS_STREAMING_COPY_H_

#include <cstddef>

namespace statecache {

// Copies `bytes` bytes from src to dst. REQUIRES: the ranges do not overlap.
void StreamingCopy(void* dst, const void* src, size_t bytes);

// Orders every earlier streaming store before later stores (sfence).
void StreamingFence();

}  // namespace statecache

#endif  // STATECACHE_KERNELS_STREAMING_COPY_H_

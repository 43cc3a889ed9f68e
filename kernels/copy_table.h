// Copy tables: a batch of (src slot, dst slot) copies turned into the
// CopyDescriptor ranges the copy runners execute in one go.
//
// The runners (HostCopier, the GPU kernel) copy every descriptor at once in
// no particular order, so a table is only correct when no destination range
// overlaps another destination or any source. BuildCopyTable guarantees this
// at the slot level (distinct slots are disjoint in every arrangement) by
// refusing batches whose result would depend on the order of the copies.
//
// Thread-safe: pure functions.
#ifndef STATECACHE_KERNELS_COPY_TABLE_H_
#define STATECACHE_KERNELS_COPY_TABLE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/device/layout.h"
#include "kernels/copy_descriptor.h"

namespace statecache {

// (source slot, destination slot).
using SlotPair = std::pair<int64_t, int64_t>;

struct CopyTable {
  std::vector<CopyDescriptor> descriptors;
  uint64_t total_bytes = 0;  // sum of descriptors' bytes
};

// The table that copies, for every pair, every piece (each tensor of each
// layer, padding included) of the source slot onto the destination slot, in
// a region of `capacity` slots laid out by `layout`.
//
// Coalesced: pieces that are adjacent in both source and destination become
// one descriptor. In slot-major a pair is one descriptor (a slot is one
// range), and pairs (s, d), (s+1, d+1) merge into one; in layer-major each
// (layer, tensor) block contributes one descriptor per run of such pairs.
// Every descriptor's offsets and size are multiples of kLayoutAlignment.
//
// A slot may be the source of several pairs (fan-out). Pairs are independent:
// their order does not matter.
// REQUIRES: 0 <= num_slots <= capacity <= kMaxLayoutSlots.
// Errors (INVALID_ARGUMENT, naming the pair, nothing built):
//   a slot outside [0, num_slots); src == dst; a slot that is the
//   destination of two pairs; a slot that is a source of one pair and the
//   destination of another (the result would depend on the order).
absl::StatusOr<CopyTable> BuildCopyTable(const StateLayout& layout,
                                         int64_t capacity, int64_t num_slots,
                                         absl::Span<const SlotPair> pairs);

// Checks a table built by other means (benchmarks, tests): every source
// range inside [0, src_region_bytes), every destination range inside
// [0, dst_region_bytes), no zero-length descriptor, no destination range
// overlapping another destination range, and, when `same_region` (source
// and destination are one buffer), no destination overlapping any source.
// O(n log n). Errors: INVALID_ARGUMENT naming a descriptor.
absl::Status ValidateCopyTable(absl::Span<const CopyDescriptor> table,
                               uint64_t src_region_bytes,
                               uint64_t dst_region_bytes, bool same_region);

// The same copies with no descriptor longer than `max_bytes`: longer ones are
// cut into max_bytes pieces (the last one shorter), in order. The GPU runner
// uses it so one large slot spreads over every compute unit.
// REQUIRES: max_bytes > 0 and a multiple of kLayoutAlignment (so the pieces
// of an aligned descriptor stay aligned).
std::vector<CopyDescriptor> SplitCopyTable(
    absl::Span<const CopyDescriptor> table, uint64_t max_bytes);

}  // namespace statecache

#endif  // STATECACHE_KERNELS_COPY_TABLE_H_

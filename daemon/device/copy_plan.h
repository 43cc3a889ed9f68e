// Copy plans: a batch of (src slot, dst slot) copies turned into the copy
// table (kernels/copy_table.h) that the copy runners execute in one go.
//
// The runners copy every descriptor at once in no particular order, so
// BuildCopyTable guarantees at the slot level that no destination overlaps
// another destination or any source (distinct slots are disjoint in every
// arrangement), by refusing batches whose result would depend on the order
// of the copies.
//
// Thread-safe: pure functions.
#ifndef STATECACHE_DAEMON_DEVICE_COPY_PLAN_H_
#define STATECACHE_DAEMON_DEVICE_COPY_PLAN_H_

#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/device/layout.h"
#include "kernels/copy_table.h"

namespace statecache {

// (source slot, destination slot).
using SlotPair = std::pair<int64_t, int64_t>;

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

}  // namespace statecache

#endif  // STATECACHE_DAEMON_DEVICE_COPY_PLAN_H_

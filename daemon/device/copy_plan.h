// Copy plans: a batch of (src slot, dst slot) copies, or of slots to and from
// slot images in host staging memory, turned into the copy table
// (kernels/copy_table.h) that the copy runners execute in one go.
//
// The runners copy every descriptor at once in no particular order, so
// BuildCopyTable guarantees at the slot level that no destination overlaps
// another destination or any source (distinct slots are disjoint in every
// arrangement), by refusing batches whose result would depend on the order
// of the copies; BuildImageCopyTable does the same for images (disjoint
// images, no slot written twice).
//
// Thread-safe: pure functions.
#ifndef STATECACHE_DAEMON_DEVICE_COPY_PLAN_H_
#define STATECACHE_DAEMON_DEVICE_COPY_PLAN_H_

#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/copy_table.h"
#include "vocabulary/layout.h"

namespace statecache {

// (source slot, destination slot).
using SlotPair = std::pair<int64_t, int64_t>;

// One slot's image in staging memory: bytes_per_slot() bytes from `offset`,
// the slot's pieces (each tensor of each layer, padding included) in
// [layer][tensor] order, as a slot-major region lays out one slot.
struct SlotImage {
  int64_t slot = -1;
  uint64_t offset = 0;
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

// The table that copies every piece of each image's slot, in a region of
// `capacity` slots laid out by `layout`, to its place in the image (region
// to staging: offsets are region offsets on the source side and staging
// offsets on the destination side), or with `to_region` the reverse (each
// image onto its slot). The staging memory is `staging_bytes` long.
//
// Coalesced as BuildCopyTable, in order of offset: in slot-major an image is
// one descriptor, and images of consecutive slots at consecutive offsets
// merge into one; in layer-major an image is one descriptor per (layer,
// tensor) piece. Offsets that are multiples of kLayoutAlignment keep every
// descriptor aligned (the GPU kernel's 16-byte path); others are copied,
// more slowly.
//
// A slot may be read into several images (fan-out) unless `to_region`.
// Images are independent: their order does not matter.
// REQUIRES: 0 <= num_slots <= capacity <= kMaxLayoutSlots.
// Errors (INVALID_ARGUMENT, naming the image, nothing built):
//   a slot outside [0, num_slots); an image not inside [0, staging_bytes);
//   two images that overlap; with `to_region`, a slot named twice.
absl::StatusOr<CopyTable> BuildImageCopyTable(
    const StateLayout& layout, int64_t capacity, int64_t num_slots,
    uint64_t staging_bytes, absl::Span<const SlotImage> images, bool to_region);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_DEVICE_COPY_PLAN_H_

// Copy tables: the CopyDescriptor ranges the copy runners execute in one go,
// and the checks and cuts the runners apply to them. Layout-free: turning
// slot pairs into a table is the device layer's (daemon/device/copy_plan.h).
//
// The runners (HostCopier, the GPU kernel) copy every descriptor at once in
// no particular order, so a table is only correct when no destination range
// overlaps another destination or any source.
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
#include "kernels/copy_descriptor.h"

namespace statecache {

struct CopyTable {
  std::vector<CopyDescriptor> descriptors;
  uint64_t total_bytes = 0;  // sum of descriptors' bytes
};

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
// REQUIRES: max_bytes > 0 and a multiple of the descriptors' alignment (so the
// pieces of an aligned descriptor stay aligned).
std::vector<CopyDescriptor> SplitCopyTable(
    absl::Span<const CopyDescriptor> table, uint64_t max_bytes);

}  // namespace statecache

#endif  // STATECACHE_KERNELS_COPY_TABLE_H_

#include "daemon/core/placement_advice.h"

#include <limits>

namespace statecache {

PlacementAdvice AdvisePlacement(BranchPoints& table, const SlotMemory& memory,
                                const AdmitSpec& spec, int64_t blocks_resumed,
                                int64_t ladder_blocks) {
  const int64_t block_size = memory.pool().hash_block_size();
  PlacementAdvice advice;
  if (spec.anchor_pos > 0 && spec.anchor_pos % block_size == 0 &&
      spec.anchor_pos / block_size <= std::numeric_limits<int32_t>::max()) {
    advice.continuation_blocks = spec.anchor_pos / block_size;
  }
  const int64_t branch = table.Record(spec.block_hashes);
  const int64_t end = advice.continuation_blocks > 0
                          ? advice.continuation_blocks
                          : static_cast<int64_t>(spec.block_hashes.size());
  if (ladder_blocks > 0) {
    const int64_t rungs =
        (end - 1) / ladder_blocks - blocks_resumed / ladder_blocks;
    if (rungs > 0 && memory.pool().GetOccupancy().vacant >= rungs) {
      advice.ladder_blocks = ladder_blocks;
    }
  }
  if (branch <= blocks_resumed || branch >= end) return advice;
  // Already filed (the KV hit stopped short of it): nothing to take.
  absl::StatusOr<int64_t> filed = memory.Lookup(spec.block_hashes[branch - 1]);
  if (filed.ok() && *filed >= 0) return advice;
  advice.branch_blocks = branch;
  return advice;
}

bool IsContinuation(const PlacementAdvice& advice, int64_t block_size,
                    int64_t position) {
  return advice.continuation_blocks > 0 &&
         position >= advice.continuation_blocks * block_size;
}

bool IsAdvisedPosition(const PlacementAdvice& advice, int64_t block_size,
                       int64_t position) {
  return IsContinuation(advice, block_size, position) ||
         (advice.branch_blocks > 0 &&
          position == advice.branch_blocks * block_size);
}

}  // namespace statecache

// SlotPool: growing and shrinking the index range (extend, retire_top and
// the relocations a retirement makes).
#include <algorithm>
#include <limits>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/core/pool_call.h"
#include "daemon/core/slot_pool.h"
#include "daemon/core/slot_pool_observed.h"
#include "daemon/core/slot_sort.h"

namespace statecache {

// ---------------------------------------------------------------- resizing

absl::Status SlotPool::Extend(int64_t count) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kExtend, .a = count},
                    [&] { return Extend(count); });
  }
  if (count < 0 || count > kMaxSlots - num_slots_) {
    return absl::InvalidArgumentError(
        absl::StrCat("extend: count must be in [0, ", kMaxSlots - num_slots_,
                     "], got ", count));
  }
  GrowTo(num_slots_ + count);
  for (int64_t slot = num_slots_; slot < num_slots_ + count; ++slot) {
    // Reuses a retired index's entry without touching hash_to_slot, as the
    // reference does.
    slots_[slot].hash = -1;
    ReleaseUnchecked(slot);
  }
  num_slots_ += count;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SlotRetirement>> SlotPool::RetireTop() {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kRetireTop},
                    [&] { return RetireTop(); });
  }
  const int64_t top = num_slots_ - 1;
  if (top < 0) {
    return absl::FailedPreconditionError("retire_top: the pool has no slots");
  }
  if (slots_[top].pins > 0) return std::optional<SlotRetirement>();
  const bool held = Is(top, kInLru);
  if (Is(top, kFree) && !held) {
    ClaimUnchecked(top);
    --num_slots_;
    return std::optional<SlotRetirement>(SlotRetirement{top, -1, false});
  }
  const int64_t dst = TakeRelocationTarget(top);
  if (dst < 0 && !held) return std::optional<SlotRetirement>();
  if (dst < 0) {
    // Nothing free anywhere: the top slot is the only checkpoint left, and
    // spending it is what LRU asks for regardless.
    SpendCheckpoint(top);
  } else if (held) {
    RehomeCheckpoint(top, dst);
    // The mark follows the content (corrections.py, second defect).
    if (Is(top, kSpeculative)) {
      Clear(top, kSpeculative);
      Set(dst, kSpeculative);
    }
  } else if (Is(top, kReserved)) {
    // A live reservation moves with its bytes.
    Clear(top, kReserved);
    Set(dst, kReserved);
    reservation_[dst] = reservation_[top];
  }
  --num_slots_;
  return std::optional<SlotRetirement>(SlotRetirement{top, dst, held});
}

void SlotPool::SpendCheckpoint(int64_t slot) {
  if (log_spent_) {
    spent_.push_back(Spent{slot, slots_[slot].hash, Is(slot, kSpeculative)});
  }
  ClaimUnchecked(slot);
  ++fates_.evicted;  // corrections.py, first defect: shrinking evicts too
  Clear(slot, kSpeculative);
  InvalidateUnchecked(slot);
}

int64_t SlotPool::TakeRelocationTarget(int64_t exclude) {
  const int64_t vacant = PopVacant();
  if (vacant >= 0) return vacant;
  if (checkpointed_.empty()) return -1;
  int64_t slot = checkpointed_.Front();
  if (slot == exclude) slot = decltype(checkpointed_)::Next(slots_, slot);
  if (slot == kNilSlot) return -1;
  SpendCheckpoint(slot);
  return slot;
}

void SlotPool::RehomeCheckpoint(int64_t src, int64_t dst) {
  const int64_t hash = slots_[src].hash;
  checkpointed_.Replace(slots_, src, dst);
  Clear(src, kFree | kInLru);
  Set(dst, kFree | kInLru);  // dst was taken off the list by the search
  slots_[src].hash = -1;
  slots_[dst].hash = hash;
  hash_to_slot_.InsertOrAssign(hash, dst);
}

}  // namespace statecache

// SlotPool: what a warm restart saves and brings back (slot_pool.h, "warm
// restart").
#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/core/pool_call.h"
#include "daemon/core/slot_pool.h"
#include "daemon/core/slot_pool_observed.h"

namespace statecache {

std::vector<SlotPool::Spent> SlotPool::SavableCheckpoints() const {
  std::vector<Spent> out;
  if (!enabled_) return out;
  out.reserve(hash_to_slot_.size());
  for (int64_t slot = checkpointed_.Front(); slot != kNilSlot;
       slot = decltype(checkpointed_)::Next(slots_, slot)) {
    out.push_back(Spent{slot, slots_[slot].hash, Is(slot, kSpeculative)});
  }
  std::vector<int32_t> pinned(pinned_.begin(), pinned_.end());
  std::sort(pinned.begin(), pinned.end());
  for (int64_t slot : pinned) {
    const int64_t hash = slots_[slot].hash;
    if (hash == -1 || hash_to_slot_.Find(hash) != slot) continue;
    out.push_back(Spent{slot, hash, Is(slot, kSpeculative)});
  }
  return out;
}

absl::Status SlotPool::RestoreCheckpoint(int64_t slot, int64_t hash,
                                         bool speculative) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    PoolCallObserver* const observer = std::exchange(observer_, nullptr);
    absl::Status status = RestoreCheckpoint(slot, hash, speculative);
    observer_ = observer;
    observer->OnRestoreCheckpoint(slot, hash, speculative, status);
    return status;
  }
  if (!enabled_) {
    return absl::FailedPreconditionError(
        "restore_checkpoint: the pool is disabled");
  }
  RETURN_IF_ERROR(CheckSlot(slot, "restore_checkpoint"));
  RETURN_IF_ERROR(CheckHash(hash, "restore_checkpoint: hash"));
  if (!Is(slot, kFree) || slots_[slot].hash != -1) {
    return absl::FailedPreconditionError(
        absl::StrCat("restore_checkpoint: slot ", slot, " is not vacant"));
  }
  if (hash_to_slot_.Find(hash) != -1) {
    return absl::FailedPreconditionError(
        absl::StrCat("restore_checkpoint: hash ", hash, " is already filed"));
  }
  ClaimUnchecked(slot);
  slots_[slot].hash = hash;
  hash_to_slot_.InsertOrAssign(hash, slot);
  Set(slot, kFree | kInLru);
  ++num_free_;
  checkpointed_.PushBack(slots_, slot);
  if (speculative) {
    Set(slot, kSpeculative);
  } else {
    Clear(slot, kSpeculative);
  }
  return absl::OkStatus();
}

}  // namespace statecache

// SlotPool: telling an observer of the calls made on it (slot_pool.h,
// "observing"; pool_call.h).
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/core/pool_call.h"
#include "daemon/core/slot_pool.h"
#include "daemon/core/slot_pool_observed.h"

namespace statecache {

void SlotPool::SetCallObserver(PoolCallObserver* observer) {
  // Unset while it looks at the pool: what it reads there is not a call.
  observer_ = nullptr;
  if (observer != nullptr) observer->OnStart(*this);
  observer_ = observer;
}

absl::StatusOr<bool> SlotPool::ObservedQuery(PoolOp op, int64_t arg) const {
  return Observed(PoolCall{.op = op, .a = arg}, [&]() -> absl::StatusOr<bool> {
    switch (op) {
      case PoolOp::kHasFree:
        return HasFree(arg);
      case PoolOp::kIsFree:
        return IsFree(arg);
      case PoolOp::kHoldsCheckpoint:
        return HoldsCheckpoint(arg);
      case PoolOp::kIsPinned:
        return IsPinned(arg);
      default:
        return absl::InternalError("not a query");
    }
  });
}

absl::StatusOr<int64_t> SlotPool::ObservedCount(PoolOp op, int64_t arg) const {
  return Observed(PoolCall{.op = op, .a = arg},
                  [&]() -> absl::StatusOr<int64_t> {
                    switch (op) {
                      case PoolOp::kLookup:
                        return Lookup(arg);
                      case PoolOp::kPinCount:
                        return PinCount(arg);
                      default:
                        return absl::InternalError("not a count");
                    }
                  });
}

int64_t SlotPool::ObservedNumFree() const {
  return Observed(PoolCall{.op = PoolOp::kNumFree}, [&] { return NumFree(); });
}

bool SlotPool::ObservedApplies(const Sequence& seq) const {
  return Observed(PoolCall{.op = PoolOp::kApplies, .seq = seq},
                  [&] { return Applies(seq); });
}

CheckpointFates SlotPool::ObservedFates() const {
  return Observed(PoolCall{.op = PoolOp::kCheckpointFates},
                  [&] { return Fates(); });
}

}  // namespace statecache

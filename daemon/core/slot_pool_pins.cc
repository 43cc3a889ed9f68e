// SlotPool: pins, the references a forward that will read a slot holds on
// it, and the pin clock that returns them.
#include <algorithm>
#include <limits>
#include <utility>
#include <variant>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/core/pool_call.h"
#include "daemon/core/slot_pool.h"
#include "daemon/core/slot_pool_observed.h"
#include "daemon/core/slot_sort.h"

namespace statecache {

// ---------------------------------------------------------------- pins

absl::Status SlotPool::Pin(int64_t slot, bool reader_is_next_batch) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(
        PoolCall{.op = PoolOp::kPin, .a = slot, .flag = reader_is_next_batch},
        [&] { return Pin(slot, reader_is_next_batch); });
  }
  RETURN_IF_ERROR(CheckSlot(slot, "pin"));
  if (Is(slot, kFree)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pin: slot ", slot,
        " is free; claim it (or hold it live) before pinning it as a fork "
        "source"));
  }
  PinUnchecked(slot, reader_is_next_batch);
  return absl::OkStatus();
}

absl::Status SlotPool::Unpin(int64_t slot) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kUnpin, .a = slot},
                    [&] { return Unpin(slot); });
  }
  RETURN_IF_ERROR(CheckSlot(slot, "unpin"));
  if (slots_[slot].pins == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("unpin: slot ", slot, " is not pinned"));
  }
  UnpinUnchecked(slot);
  return absl::OkStatus();
}

void SlotPool::UnpinUnchecked(int64_t slot) {
  SlotState& st = slots_[slot];
  if (st.pins == 0) return;
  if (--st.pins > 0) return;
  // Off the pinned list: swap the last entry into this one's place.
  const int32_t pos = st.pinned_pos;
  const int32_t last = pinned_.back();
  pinned_[pos] = last;
  slots_[last].pinned_pos = pos;
  pinned_.pop_back();
  st.pinned_pos = -1;
  Clear(slot, kDeferred);
}

absl::Status SlotPool::DropReader(int64_t slot) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kDropReader, .a = slot},
                    [&] { return DropReader(slot); });
  }
  if (slot == -1) return absl::OkStatus();
  RETURN_IF_ERROR(CheckSlot(slot, "drop_reader"));
  if (slots_[slot].pins == 0) return absl::OkStatus();
  UnpinUnchecked(slot);
  if (slots_[slot].pins == 0) ReleaseUnchecked(slot);
  return absl::OkStatus();
}

void SlotPool::ReleasePins() {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    Observed(PoolCall{.op = PoolOp::kReleasePins}, [&] {
      ReleasePins();
      return std::monostate{};
    });
    return;
  }
  if (pinned_.empty()) return;
  // Slot order, as the reference's sorted(); deferred pins survive one pass
  // and lose their deferral. The list holds only pinned slots, so this is
  // O(p) in the pins (a radix sort from 64 up), not in the pool; it is
  // sorted and compacted in place (no allocation once the scratch has grown).
  SortBySlot(pinned_, sort_scratch_, [](int32_t slot) { return slot; });
  size_t kept = 0;
  for (size_t i = 0; i < pinned_.size(); ++i) {
    const int32_t slot = pinned_[i];
    if (Is(slot, kDeferred)) {
      Clear(slot, kDeferred);
      slots_[slot].pinned_pos = static_cast<int32_t>(kept);
      pinned_[kept++] = slot;
      continue;
    }
    slots_[slot].pins = 0;
    slots_[slot].pinned_pos = -1;
    ReleaseUnchecked(slot);
  }
  pinned_.resize(kept);
}

absl::Status SlotPool::ReleasePin(int64_t slot, int64_t count) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    PoolCallObserver* const observer = std::exchange(observer_, nullptr);
    absl::Status status = ReleasePin(slot, count);
    observer_ = observer;
    observer->OnReleasePin(slot, count, status);
    return status;
  }
  RETURN_IF_ERROR(CheckSlot(slot, "release_pin"));
  const int64_t pins = slots_[slot].pins;
  if (count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("release_pin: count must be >= 1, got ", count));
  }
  if (count > pins) {
    return absl::FailedPreconditionError(
        absl::StrCat("release_pin: cannot drop ", count, " pins of slot ", slot,
                     ", which has ", pins));
  }
  if (count < pins) {
    slots_[slot].pins -= static_cast<int32_t>(count);
    return absl::OkStatus();
  }
  slots_[slot].pins = 1;
  UnpinUnchecked(slot);
  ReleaseUnchecked(slot);
  return absl::OkStatus();
}

absl::Status SlotPool::EndDeferral(int64_t slot) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    PoolCallObserver* const observer = std::exchange(observer_, nullptr);
    absl::Status status = EndDeferral(slot);
    observer_ = observer;
    observer->OnEndDeferral(slot, status);
    return status;
  }
  RETURN_IF_ERROR(CheckSlot(slot, "end_deferral"));
  Clear(slot, kDeferred);
  return absl::OkStatus();
}

}  // namespace statecache

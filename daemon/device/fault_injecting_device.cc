#include "daemon/device/fault_injecting_device.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/string_view_compat.h"

namespace statecache {

FaultInjectingDevice::FaultInjectingDevice(std::shared_ptr<Device> base)
    : base_(std::move(base)) {}

bool FaultInjectingDevice::Fires(OneShot& shot) {
  if (shot.remaining <= 0) return false;
  return --shot.remaining == 0;
}

absl::Status FaultInjectingDevice::Injected(const absl::Status& error,
                                            std::string_view call) {
  // An OK "error" (a caller's mistake) still fails the call.
  const absl::StatusCode code =
      error.ok() ? absl::StatusCode::kInternal : error.code();
  return absl::Status(code, absl::StrCat(Av(call), ": ", error.message(),
                                         " (an injected fault)"));
}

void FaultInjectingDevice::FailNthCopy(int64_t n, absl::Status error,
                                       bool forward) {
  absl::MutexLock lock(&mu_);
  nth_copy_ = OneShot{n, std::move(error), forward};
}

void FaultInjectingDevice::FailCopiesTouching(int64_t slot,
                                              absl::Status error) {
  absl::MutexLock lock(&mu_);
  failing_slots_.insert_or_assign(slot, std::move(error));
}

void FaultInjectingDevice::FailAllCopies(absl::Status error) {
  absl::MutexLock lock(&mu_);
  all_copies_ = std::move(error);
}

void FaultInjectingDevice::FailNthResize(int64_t n, absl::Status error) {
  absl::MutexLock lock(&mu_);
  nth_resize_ = OneShot{n, std::move(error), false};
}

void FaultInjectingDevice::FailGrowth(absl::Status error) {
  absl::MutexLock lock(&mu_);
  growth_ = std::move(error);
}

void FaultInjectingDevice::ClearFaults() {
  absl::MutexLock lock(&mu_);
  nth_copy_ = OneShot{};
  failing_slots_.clear();
  all_copies_.reset();
  nth_resize_ = OneShot{};
  growth_.reset();
}

FaultInjectingDevice::Counts FaultInjectingDevice::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

absl::Status FaultInjectingDevice::Resize(int64_t new_num_slots) {
  std::optional<absl::Status> fault;
  {
    absl::MutexLock lock(&mu_);
    ++counts_.resizes;
    // Count the one-shot down on every call, whether or not a standing
    // fault fails it first, so "the Nth" means the Nth call.
    if (Fires(nth_resize_)) {
      fault = Injected(nth_resize_.error,
                       absl::StrCat("resize to ", new_num_slots, " slots"));
    } else if (growth_.has_value() && new_num_slots > base_->num_slots()) {
      fault = Injected(*growth_,
                       absl::StrCat("growing to ", new_num_slots, " slots"));
    }
    if (fault.has_value()) ++counts_.resizes_failed;
  }
  if (fault.has_value()) return *std::move(fault);
  return base_->Resize(new_num_slots);
}

absl::StatusOr<CopyResult> FaultInjectingDevice::Copy(
    absl::Span<const SlotPair> pairs) {
  std::optional<absl::Status> fault;
  bool forward = false;
  {
    absl::MutexLock lock(&mu_);
    const int64_t call = ++counts_.copies;
    const std::string what = absl::StrCat(
        "copy #", call, " (", pairs.size(),
        pairs.size() == 1 ? " pair" : " pairs",
        pairs.empty()
            ? std::string()
            : absl::StrCat(", first ", pairs[0].first, " -> ", pairs[0].second),
        ")");
    if (Fires(nth_copy_)) {
      fault = Injected(nth_copy_.error, what);
      forward = nth_copy_.forward;
    } else {
      for (const SlotPair& pair : pairs) {
        for (const int64_t slot : {pair.first, pair.second}) {
          if (auto it = failing_slots_.find(slot); it != failing_slots_.end()) {
            fault = Injected(it->second,
                             absl::StrCat(what, ", touching slot ", slot));
            break;
          }
        }
        if (fault.has_value()) break;
      }
      if (!fault.has_value() && all_copies_.has_value()) {
        fault = Injected(*all_copies_, what);
      }
    }
    if (fault.has_value()) ++counts_.copies_failed;
  }
  if (!fault.has_value()) return base_->Copy(pairs);
  if (forward) {
    // The bytes move (or the wrapped device fails on its own); the caller
    // is told of the injected failure either way.
    absl::StatusOr<CopyResult> ran = base_->Copy(pairs);
    if (!ran.ok()) return ran.status();
  }
  return *std::move(fault);
}

}  // namespace statecache

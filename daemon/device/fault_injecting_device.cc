#include "daemon/device/fault_injecting_device.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
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

std::optional<FaultInjectingDevice::CopyFault> FaultInjectingDevice::CountCopy(
    std::string_view description, absl::Span<const int64_t> slots) {
  absl::MutexLock lock(&mu_);
  const int64_t call = ++counts_.copies;
  const std::string what =
      absl::StrCat("copy #", call, " (", Av(description), ")");
  std::optional<CopyFault> fault;
  if (Fires(nth_copy_)) {
    fault = CopyFault{Injected(nth_copy_.error, what), nth_copy_.forward};
  } else {
    for (const int64_t slot : slots) {
      if (auto it = failing_slots_.find(slot); it != failing_slots_.end()) {
        fault = CopyFault{
            Injected(it->second, absl::StrCat(what, ", touching slot ", slot))};
        break;
      }
    }
    if (!fault.has_value() && all_copies_.has_value()) {
      fault = CopyFault{Injected(*all_copies_, what)};
    }
  }
  if (fault.has_value()) ++counts_.copies_failed;
  return fault;
}

namespace {

std::vector<int64_t> ImageSlots(absl::Span<const SlotImage> images) {
  std::vector<int64_t> slots;
  slots.reserve(images.size());
  for (const SlotImage& image : images) slots.push_back(image.slot);
  return slots;
}

std::string DescribeImages(std::string_view kind,
                           absl::Span<const SlotImage> images) {
  return absl::StrCat(
      Av(kind), " of ", images.size(), images.size() == 1 ? " slot" : " slots",
      images.empty() ? std::string()
                     : absl::StrCat(", first slot ", images[0].slot,
                                    " at offset ", images[0].offset));
}

}  // namespace

// The bytes move (or the wrapped device fails on its own) under a forwarded
// fault; the caller is told of the injected failure either way.
template <typename CopyFn>
absl::StatusOr<CopyResult> FaultInjectingDevice::RunUnlessFaulted(
    std::optional<CopyFault> fault, CopyFn copy) {
  if (!fault.has_value()) return copy();
  if (fault->forward) {
    absl::StatusOr<CopyResult> ran = copy();
    if (!ran.ok()) return ran.status();
  }
  return std::move(fault->error);
}

absl::StatusOr<CopyResult> FaultInjectingDevice::Copy(
    absl::Span<const SlotPair> pairs) {
  std::vector<int64_t> slots;
  slots.reserve(pairs.size() * 2);
  for (const SlotPair& pair : pairs) {
    slots.push_back(pair.first);
    slots.push_back(pair.second);
  }
  const std::string description = absl::StrCat(
      pairs.size(), pairs.size() == 1 ? " pair" : " pairs",
      pairs.empty()
          ? std::string()
          : absl::StrCat(", first ", pairs[0].first, " -> ", pairs[0].second));
  return RunUnlessFaulted(CountCopy(description, slots),
                          [&] { return base_->Copy(pairs); });
}

absl::StatusOr<CopyResult> FaultInjectingDevice::ReadSlots(
    HostStaging& staging, absl::Span<const SlotImage> images) {
  return RunUnlessFaulted(
      CountCopy(DescribeImages("read", images), ImageSlots(images)),
      [&] { return base_->ReadSlots(staging, images); });
}

absl::Status FaultInjectingDevice::ChecksumSlots(
    absl::Span<const int64_t> slots, absl::Span<uint64_t> out) {
  // A read of the slots, failing as ReadSlots would.
  return RunUnlessFaulted(
             CountCopy(absl::StrCat("checksum of ", slots.size(), " slots"),
                       std::vector<int64_t>(slots.begin(), slots.end())),
             [&]() -> absl::StatusOr<CopyResult> {
               RETURN_IF_ERROR(base_->ChecksumSlots(slots, out));
               return CopyResult{};
             })
      .status();
}

absl::StatusOr<CopyResult> FaultInjectingDevice::WriteSlots(
    const HostStaging& staging, absl::Span<const SlotImage> images) {
  return RunUnlessFaulted(
      CountCopy(DescribeImages("write", images), ImageSlots(images)),
      [&] { return base_->WriteSlots(staging, images); });
}

}  // namespace statecache

// StateCache: the pieces of a warm restart (state_cache.h, "warm restart").
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/service/state_cache.h"

namespace statecache {

std::string StateCache::StateFingerprint() const {
  const v1::Identity& id = options_.identity;
  std::string fingerprint = absl::StrCat(
      "model_id=", id.model_id(), ";hash_block_size=", id.hash_block_size(),
      ";hash_namespace=", id.hash_namespace(), ";num_spec=", id.num_spec(),
      ";transfer=", options_.transfer.DebugString());
  if (const Device* device = options_.device.get(); device != nullptr) {
    absl::StrAppend(&fingerprint, ";backend=", std::string(device->backend()),
                    ";layout=", device->layout().name(), "/",
                    device->Export().layout_fingerprint);
  }
  return fingerprint;
}

std::string_view StateCache::backend() const {
  return options_.device == nullptr ? std::string_view("none")
                                    : options_.device->backend();
}

absl::Status StateCache::EnableChecksums() {
  absl::MutexLock lock(&mu_);
  return memory_.EnableChecksums();
}

absl::StatusOr<StateCache::Checkpoints> StateCache::SaveCheckpoints() {
  absl::MutexLock lock(&mu_);
  if (memory_.device() == nullptr) {
    return absl::FailedPreconditionError(
        "saving checkpoints: this daemon runs without state memory");
  }
  RETURN_IF_ERROR(memory_.SealCheckpoints());
  return Checkpoints{memory_.SaveCheckpoints(), memory_.device()->Export()};
}

absl::StatusOr<std::unique_ptr<HostStaging>> StateCache::ReadCheckpointImages(
    std::vector<SlotMemory::SavedCheckpoint>& device) {
  absl::MutexLock lock(&mu_);
  return memory_.ReadCheckpointImages(device);
}

std::string StateCache::CopyTierImages(
    std::vector<SlotMemory::SavedCheckpoint>& tier) {
  absl::MutexLock lock(&mu_);
  return memory_.CopyTierImages(tier);
}

absl::StatusOr<SlotMemory::RestoreCounts> StateCache::RestoreCheckpoints(
    absl::Span<const SlotMemory::RestoreImage> device,
    absl::Span<const SlotMemory::RestoreImage> tier) {
  absl::MutexLock lock(&mu_);
  if (sessions_.size() != 0) {
    return absl::FailedPreconditionError(
        "restore: sessions are attached already");
  }
  return memory_.Restore(device, tier);
}

void StateCache::SetWarmRestartStats(const v1::WarmRestartStats& stats) {
  absl::MutexLock lock(&mu_);
  warm_restart_ = stats;
}

}  // namespace statecache

#include "daemon/service/state_keeper.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/string_view_compat.h"
#include "daemon/device/retained_region.h"
#include "daemon/service/log.h"

namespace statecache {
namespace {

std::string ImagesName(std::string_view what, uint64_t epoch) {
  return absl::StrCat(Av(what), "-", epoch, ".images");
}

// The images `saved` names, image k at k * image_bytes of `file`.
// Errors: FAILED_PRECONDITION the file is shorter than that.
absl::StatusOr<std::vector<SlotMemory::RestoreImage>> ImagesIn(
    const MappedFile& file,
    const std::vector<SlotMemory::SavedCheckpoint>& saved, uint64_t image_bytes,
    std::string_view name) {
  std::vector<SlotMemory::RestoreImage> images;
  images.reserve(saved.size());
  for (const SlotMemory::SavedCheckpoint& c : saved) {
    absl::StatusOr<uint64_t> offset =
        ImageOffset(c.location, image_bytes, file.size());
    if (!offset.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(Av(name), ": ", offset.status().message()));
    }
    images.push_back({c, file.data() + *offset});
  }
  return images;
}

}  // namespace

StateKeeper::StateKeeper(std::unique_ptr<StateDir> dir, StateCache* cache,
                         std::string shm_prefix)
    : dir_(std::move(dir)),
      cache_(cache),
      shm_prefix_(std::move(shm_prefix)),
      region_outlives_(cache->backend() == "host") {
  stats_.set_outcome("cold");
}

v1::WarmRestartStats StateKeeper::Restore() {
  const absl::Time start = absl::Now();
  if (absl::Status st = cache_->EnableChecksums(); !st.ok()) {
    stats_.set_outcome("unreadable");
    stats_.set_reason(std::string(st.message()));
  }
  absl::StatusOr<SavedState> saved = dir_->ReadIndex();
  if (absl::IsNotFound(saved.status())) {
    LOG_INFO("state dir %s: no index yet: a cold start", dir_->path());
  } else if (!saved.ok()) {
    stats_.set_outcome("unreadable");
    stats_.set_reason(std::string(saved.status().message()));
    LOG_WARNING("state dir %s: %s: starting empty", dir_->path(),
                stats_.reason());
  } else if (saved->fingerprint != cache_->StateFingerprint()) {
    stats_.set_outcome("mismatch");
    stats_.set_reason(absl::StrCat("the index was made under \"",
                                   saved->fingerprint, "\", this daemon is \"",
                                   cache_->StateFingerprint(), "\""));
    LOG_WARNING(
        "state dir %s: %s: starting empty; the index is kept as "
        "index.rejected (its region %s is left as it is)",
        dir_->path(), stats_.reason(),
        saved->region.handle.empty() ? "(none)" : saved->region.handle);
    if (absl::Status st = dir_->RejectIndex(); !st.ok()) {
      LOG_WARNING("state dir: %s", st.ToString());
    }
  } else if (absl::Status st = RestoreFrom(*saved); !st.ok()) {
    stats_.set_outcome("unreadable");
    stats_.set_reason(std::string(st.message()));
    LOG_WARNING("state dir %s: %s: starting empty", dir_->path(),
                stats_.reason());
  }
  stats_.set_restore_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  if (absl::Status st = Save(); !st.ok()) {
    LOG_WARNING("state dir %s: %s", dir_->path(), st.ToString());
  }
  Publish();
  if (stats_.outcome() == "restored") {
    LOG_INFO(
        "state dir %s: restored %d checkpoints and %d tier entries in %.3fs "
        "(dropped: %d bad checksum, %d unreadable, %d no room)",
        dir_->path(), stats_.restored_checkpoints(),
        stats_.restored_tier_entries(), stats_.restore_seconds(),
        stats_.dropped_bad_checksum(), stats_.dropped_unreadable(),
        stats_.dropped_no_room());
  }
  return stats_;
}

absl::Status StateKeeper::MapSection(
    const std::string& name,
    const std::vector<SlotMemory::SavedCheckpoint>& saved, uint64_t image_bytes,
    std::unique_ptr<MappedFile>& file,
    std::vector<SlotMemory::RestoreImage>& images) const {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapped, dir_->MapImages(name));
  ASSIGN_OR_RETURN(images, ImagesIn(*mapped, saved, image_bytes, name));
  file = std::move(mapped);
  return absl::OkStatus();
}

absl::Status StateKeeper::RestoreFrom(const SavedState& saved) {
  ASSIGN_OR_RETURN(const StateCache::Checkpoints now,
                   cache_->SaveCheckpoints());
  const StateLayout& layout = now.region.layout;
  const uint64_t image_bytes = layout.bytes_per_slot();
  if (saved.bytes_per_slot != image_bytes) {
    return absl::DataLossError(
        absl::StrCat("the index says ", saved.bytes_per_slot,
                     " bytes per slot, the layout ", image_bytes));
  }
  // The device checkpoints' bytes: the old region, or an images file.
  std::optional<RetainedRegion> region;
  std::vector<char> region_images;
  std::unique_ptr<MappedFile> device_file;
  std::vector<SlotMemory::RestoreImage> device;
  std::string device_trouble;
  if (!saved.region.handle.empty() && !saved.device.empty()) {
    absl::StatusOr<RetainedRegion> opened = RetainedRegion::Open(
        saved.region.handle, shm_prefix_, saved.region.region_bytes);
    absl::Status st = opened.status();
    if (st.ok()) {
      region.emplace(*std::move(opened));
      if (layout.arrangement() == Arrangement::kSlotMajor) {
        // Each image is one range of the old region: checked and copied
        // from where it lies.
        for (const SlotMemory::SavedCheckpoint& c : saved.device) {
          absl::StatusOr<const char*> at =
              region->ImageInPlace(layout, c.location);
          if (!at.ok()) {
            st = at.status();
            break;
          }
          device.push_back({c, *at});
        }
      } else {
        std::vector<int64_t> slots;
        for (const auto& c : saved.device) slots.push_back(c.location);
        region_images.resize(slots.size() * image_bytes);
        st = region->ReadImages(layout, saved.region.capacity, slots,
                                absl::MakeSpan(region_images));
        for (size_t k = 0; st.ok() && k < saved.device.size(); ++k) {
          device.push_back(
              {saved.device[k], region_images.data() + k * image_bytes});
        }
      }
    }
    if (!st.ok()) {
      device.clear();
      device_trouble = std::string(st.message());
    }
  } else if (!saved.device_images.empty()) {
    if (absl::Status st = MapSection(saved.device_images, saved.device,
                                     image_bytes, device_file, device);
        st.ok()) {
      device_images_ = saved.device_images;
      device_carried_ = saved.device;
    } else {
      device_trouble = std::string(st.message());
    }
  }
  if (!device_trouble.empty()) {
    stats_.set_dropped_unreadable(stats_.dropped_unreadable() +
                                  static_cast<int64_t>(saved.device.size()));
    stats_.set_reason(absl::StrCat("device checkpoints: ", device_trouble));
    LOG_WARNING("state dir %s: device checkpoints unreadable: %s", dir_->path(),
                device_trouble);
  }
  std::unique_ptr<MappedFile> tier_file;
  std::vector<SlotMemory::RestoreImage> tier;
  if (!saved.tier_images.empty()) {
    if (absl::Status st = MapSection(saved.tier_images, saved.tier, image_bytes,
                                     tier_file, tier);
        st.ok()) {
      tier_images_ = saved.tier_images;
      tier_carried_ = saved.tier;
    } else {
      stats_.set_dropped_unreadable(stats_.dropped_unreadable() +
                                    static_cast<int64_t>(saved.tier.size()));
      stats_.set_reason(absl::StrCat(stats_.reason(),
                                     stats_.reason().empty() ? "" : "; ",
                                     "tier entries: ", st.message()));
      LOG_WARNING("state dir %s: tier entries unreadable: %s", dir_->path(),
                  st.message());
    }
  }
  ASSIGN_OR_RETURN(const SlotMemory::RestoreCounts counts,
                   cache_->RestoreCheckpoints(device, tier));
  stats_.set_outcome("restored");
  stats_.set_restored_checkpoints(counts.device);
  stats_.set_restored_tier_entries(counts.tier);
  stats_.set_dropped_bad_checksum(counts.bad_checksum);
  stats_.set_dropped_no_room(counts.no_room);
  if (region_outlives_) {
    // Its checkpoints are in this daemon's region now: once the index
    // names that one, the old region and images file can go.
    RETURN_IF_ERROR(Save());
    if (region.has_value()) {
      if (absl::Status st = region->Remove(); !st.ok()) {
        LOG_WARNING("state dir: %s", st.ToString());
      }
    }
    if (!device_images_.empty()) {
      if (absl::Status st = dir_->RemoveImages(device_images_); !st.ok()) {
        LOG_WARNING("state dir: %s", st.ToString());
      }
      device_images_.clear();
      device_carried_.clear();
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> StateKeeper::SparedRegions() const {
  std::vector<std::string> spared;
  for (const absl::StatusOr<SavedState>& saved :
       {dir_->ReadIndex(), dir_->ReadRejectedIndex()}) {
    if (saved.ok() && !saved->region.handle.empty()) {
      spared.push_back(saved->region.handle);
    }
  }
  return spared;
}

absl::StatusOr<SavedState> StateKeeper::Compose() {
  ASSIGN_OR_RETURN(StateCache::Checkpoints now, cache_->SaveCheckpoints());
  SavedState state;
  state.fingerprint = cache_->StateFingerprint();
  state.epoch = cache_->epoch();
  state.bytes_per_slot = now.region.layout.bytes_per_slot();
  if (region_outlives_ && !stopped_) {
    state.region = SavedRegion{now.region.handle, now.region.capacity_slots,
                               now.region.num_slots, now.region.region_bytes};
    state.device = std::move(now.saved.device);
  } else {
    state.device_images = device_images_;
    state.device = device_carried_;
  }
  state.tier_images = tier_images_;
  state.tier = tier_carried_;
  return state;
}

absl::Status StateKeeper::Write(const SavedState& state) {
  if (last_written_.has_value() && *last_written_ == state) {
    return absl::OkStatus();
  }
  stats_.set_saves(stats_.saves() + 1);
  if (absl::Status st = dir_->WriteIndex(state); !st.ok()) {
    stats_.set_save_failures(stats_.save_failures() + 1);
    Publish();
    return st;
  }
  last_written_ = state;
  stats_.set_saved_checkpoints(
      static_cast<int64_t>(state.device.size() + state.tier.size()));
  stats_.set_last_save_unix_seconds(absl::ToUnixMicros(absl::Now()) / 1e6);
  Publish();
  return absl::OkStatus();
}

void StateKeeper::Publish() { cache_->SetWarmRestartStats(stats_); }

absl::Status StateKeeper::Save() {
  absl::StatusOr<SavedState> state = Compose();
  if (!state.ok()) {
    stats_.set_save_failures(stats_.save_failures() + 1);
    Publish();
    return state.status();
  }
  return Write(*state);
}

absl::Status StateKeeper::SaveForShutdown() {
  ASSIGN_OR_RETURN(StateCache::Checkpoints now, cache_->SaveCheckpoints());
  const uint64_t image_bytes = now.region.layout.bytes_per_slot();
  const std::string old_device = device_images_;
  const std::string old_tier = tier_images_;
  {
    std::vector<SlotMemory::SavedCheckpoint> device = now.saved.device;
    ASSIGN_OR_RETURN(std::unique_ptr<HostStaging> images,
                     cache_->ReadCheckpointImages(device));
    for (size_t k = 0; k < device.size(); ++k) {
      device[k].location = static_cast<int64_t>(k);
    }
    const std::string name = ImagesName("device", cache_->epoch());
    RETURN_IF_ERROR(
        dir_->WriteImages(name, images->data(), device.size() * image_bytes));
    device_images_ = name;
    device_carried_ = std::move(device);
  }
  std::vector<SlotMemory::SavedCheckpoint> tier = now.saved.tier;
  const std::string tier_bytes = cache_->CopyTierImages(tier);
  if (tier.empty()) {
    tier_images_.clear();
    tier_carried_.clear();
  } else {
    const std::string name = ImagesName("tier", cache_->epoch());
    RETURN_IF_ERROR(
        dir_->WriteImages(name, tier_bytes.data(), tier_bytes.size()));
    tier_images_ = name;
    tier_carried_ = std::move(tier);
  }
  stopped_ = true;
  if (absl::Status st = Save(); !st.ok()) {
    stopped_ = false;  // the last index written, naming the region, stands
    return st;
  }
  // The index no longer names the files the last shutdown wrote.
  for (const std::string& old : {old_device, old_tier}) {
    if (!old.empty() && old != device_images_ && old != tier_images_) {
      if (absl::Status st = dir_->RemoveImages(old); !st.ok()) {
        LOG_WARNING("state dir: %s", st.ToString());
      }
    }
  }
  LOG_INFO("state dir %s: saved %d device checkpoints and %d tier entries",
           dir_->path(), static_cast<int64_t>(last_written_->device.size()),
           static_cast<int64_t>(last_written_->tier.size()));
  return absl::OkStatus();
}

}  // namespace statecache

// SlotMemory: checksums, and what a warm restart saves and brings back
// (slot_memory.h, "warm restart").
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/checksum.h"
#include "daemon/common/status_macros.h"
#include "daemon/core/slot_memory.h"

namespace statecache {
namespace {

// The checkpoints of `images` that match their checksums, of each hash the
// last that does (in their order), counting the rest into `counts`.
std::vector<const SlotMemory::RestoreImage*> Verified(
    absl::Span<const SlotMemory::RestoreImage> images, uint64_t image_bytes,
    SlotMemory::RestoreCounts& counts) {
  absl::flat_hash_set<int64_t> kept_hashes;
  std::vector<const SlotMemory::RestoreImage*> kept;
  for (auto it = images.rbegin(); it != images.rend(); ++it) {
    if (kept_hashes.contains(it->saved.hash)) {
      ++counts.duplicate;
      continue;
    }
    if (Checksum(it->bytes, image_bytes) != it->saved.checksum) {
      ++counts.bad_checksum;
      continue;
    }
    kept_hashes.insert(it->saved.hash);
    kept.push_back(&*it);
  }
  std::reverse(kept.begin(), kept.end());
  return kept;
}

// The most staging memory Restore copies images through at once.
constexpr uint64_t kRestoreStagingBytes = uint64_t{64} << 20;

// At least `bytes` of staging memory in `memory`, reusing it when it is
// big enough (grown by doubling, so a run of passes allocates rarely).
absl::Status EnsureStaging(Device& device, uint64_t bytes,
                           std::unique_ptr<HostStaging>& memory) {
  if (memory != nullptr && memory->size() >= bytes) return absl::OkStatus();
  uint64_t size = memory == nullptr ? bytes : memory->size();
  while (size < bytes) size *= 2;
  ASSIGN_OR_RETURN(memory, device.AllocateStaging(size));
  return absl::OkStatus();
}

// Packs the images at k * image_bytes of `images` that match saved[k]'s
// checksum to the front, in order, and keeps only their records in `saved`.
void KeepMatching(char* images, uint64_t image_bytes,
                  std::vector<SlotMemory::SavedCheckpoint>& saved) {
  size_t kept = 0;
  for (size_t i = 0; i < saved.size(); ++i) {
    const char* image = images + i * image_bytes;
    if (Checksum(image, image_bytes) != saved[i].checksum) continue;
    if (kept != i) {
      std::memmove(images + kept * image_bytes, image, image_bytes);
    }
    saved[kept++] = saved[i];
  }
  saved.resize(kept);
}

}  // namespace

absl::Status SlotMemory::EnableChecksums() {
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        "checksums: this daemon runs without state memory");
  }
  if (checksums_on_) return absl::OkStatus();
  checksums_on_ = true;
  pool_.LogIndexed(true);
  pool_.ClearIndexed();
  // What is filed already is vouched for from now on.
  if (tier_.has_value()) {
    for (int64_t hash : tier_->Dump()) {
      const int64_t entry = tier_->Find(hash);
      tier_checksums_[entry] = TierChecksum(entry);
    }
  }
  std::vector<int64_t> hashes;
  for (const SlotPool::Spent& c : pool_.SavableCheckpoints()) {
    hashes.push_back(c.hash);
  }
  return SealHashes(hashes);
}

absl::Status SlotMemory::SealCheckpoints() {
  if (!checksums_on_ || pool_.indexed().empty()) return absl::OkStatus();
  std::vector<int64_t> hashes = pool_.indexed();
  pool_.ClearIndexed();
  return SealHashes(hashes);
}

absl::Status SlotMemory::SealHashes(absl::Span<const int64_t> hashes) {
  const uint64_t image_bytes = device_->layout().bytes_per_slot();
  std::vector<SlotImage> images;
  std::vector<int64_t> sealed;
  absl::flat_hash_set<int64_t> slots;
  for (int64_t hash : hashes) {
    const absl::StatusOr<int64_t> slot = pool_.Lookup(hash);
    if (!slot.ok() || *slot < 0 || !slots.insert(*slot).second) continue;
    images.push_back(SlotImage{*slot, images.size() * image_bytes});
    sealed.push_back(hash);
  }
  if (images.empty()) return absl::OkStatus();
  std::vector<uint64_t> sums(images.size());
  absl::Status read;
  if (device_->CanChecksumInPlace()) {
    // Where the bytes lie: no copy on the pass.
    std::vector<int64_t> slots_in_order;
    slots_in_order.reserve(images.size());
    for (const SlotImage& image : images) slots_in_order.push_back(image.slot);
    read = device_->ChecksumSlots(slots_in_order, absl::MakeSpan(sums));
  } else {
    read = EnsureStaging(*device_, images.size() * image_bytes, seal_staging_);
    if (read.ok()) read = device_->ReadSlots(*seal_staging_, images).status();
    if (read.ok()) {
      ChecksumImages(*seal_staging_, images, absl::MakeSpan(sums));
    }
  }
  if (!read.ok()) {
    // Unvouched: not saved, so never brought back.
    for (int64_t hash : sealed) checksums_.erase(hash);
    return absl::Status(read.code(),
                        absl::StrCat("checksums: reading ", images.size(),
                                     " checkpoints failed: ", read.message()));
  }
  for (size_t i = 0; i < sealed.size(); ++i) checksums_[sealed[i]] = sums[i];
  // Forget hashes the index no longer holds, now and then, so the table
  // stays the size of the index.
  if (checksums_.size() > 2 * static_cast<size_t>(pool_.NumIndexed()) + 1024) {
    absl::erase_if(checksums_, [this](const auto& entry) {
      const absl::StatusOr<int64_t> slot = pool_.Lookup(entry.first);
      return !slot.ok() || *slot < 0;
    });
  }
  return absl::OkStatus();
}

void SlotMemory::ChecksumImages(const HostStaging& memory,
                                absl::Span<const SlotImage> images,
                                absl::Span<uint64_t> out) const {
  const uint64_t image_bytes = device_->layout().bytes_per_slot();
  for (size_t i = 0; i < images.size(); ++i) {
    out[i] = Checksum(memory.data() + images[i].offset, image_bytes);
  }
}

uint64_t SlotMemory::TierChecksum(int64_t entry) const {
  const uint64_t image_bytes = device_->layout().bytes_per_slot();
  return Checksum(tier_memory_->data() + entry * image_bytes, image_bytes);
}

bool SlotMemory::TierImageIntact(int64_t entry) const {
  return !checksums_on_ || TierChecksum(entry) == tier_checksums_[entry];
}

SlotMemory::Saved SlotMemory::SaveCheckpoints() const {
  Saved saved;
  for (const SlotPool::Spent& c : pool_.SavableCheckpoints()) {
    if (OwnerOf(c.slot).holding != nullptr) continue;
    auto it = checksums_.find(c.hash);
    if (it == checksums_.end()) continue;
    saved.device.push_back(
        SavedCheckpoint{c.hash, c.slot, c.speculative, it->second});
  }
  if (tier_.has_value() && checksums_on_) {
    for (int64_t hash : tier_->Dump()) {
      const int64_t entry = tier_->Find(hash);
      saved.tier.push_back(
          SavedCheckpoint{hash, entry, false, tier_checksums_[entry]});
    }
  }
  return saved;
}

absl::StatusOr<std::unique_ptr<HostStaging>> SlotMemory::ReadCheckpointImages(
    std::vector<SavedCheckpoint>& saved) {
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        "checkpoint images: this daemon runs without state memory");
  }
  const uint64_t image_bytes = device_->layout().bytes_per_slot();
  std::unique_ptr<HostStaging> memory;
  RETURN_IF_ERROR(EnsureStaging(
      *device_, std::max<uint64_t>(1, saved.size()) * image_bytes, memory));
  std::vector<SlotImage> images;
  images.reserve(saved.size());
  for (const SavedCheckpoint& c : saved) {
    images.push_back(SlotImage{c.location, images.size() * image_bytes});
  }
  if (!images.empty()) {
    RETURN_IF_ERROR(device_->ReadSlots(*memory, images).status());
  }
  KeepMatching(memory->data(), image_bytes, saved);
  return memory;
}

std::string SlotMemory::CopyTierImages(std::vector<SavedCheckpoint>& tier) {
  if (!tier_.has_value()) {
    tier.clear();
    return {};
  }
  const uint64_t image_bytes = device_->layout().bytes_per_slot();
  // Only entries the tier has: the index may name others.
  std::erase_if(tier, [this](const SavedCheckpoint& c) {
    return c.location < 0 || c.location >= tier_->capacity();
  });
  std::string images(tier.size() * image_bytes, '\0');
  for (size_t k = 0; k < tier.size(); ++k) {
    std::memcpy(images.data() + k * image_bytes,
                tier_memory_->data() + tier[k].location * image_bytes,
                image_bytes);
  }
  KeepMatching(images.data(), image_bytes, tier);
  images.resize(tier.size() * image_bytes);
  for (size_t k = 0; k < tier.size(); ++k) {
    tier[k].location = static_cast<int64_t>(k);
  }
  return images;
}

absl::StatusOr<SlotMemory::RestoreCounts> SlotMemory::Restore(
    absl::Span<const RestoreImage> device,
    absl::Span<const RestoreImage> tier) {
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        "restore: this daemon runs without state memory");
  }
  // Every slot free and none a checkpoint: nothing held, pinned, reserved
  // or filed that the images could land on.
  if (pool_.NumIndexed() != 0 || NumOwned() != 0 ||
      pool_.NumFree() != pool_.num_slots() ||
      (tier_.has_value() && tier_->size() != 0)) {
    return absl::FailedPreconditionError(
        "restore: the pool already holds checkpoints or requests");
  }
  for (absl::Span<const RestoreImage> images : {device, tier}) {
    for (const RestoreImage& image : images) {
      if (image.saved.hash < 0 || image.bytes == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "restore: checkpoint ", image.saved.hash,
            image.bytes == nullptr ? " has no image" : ": negative hash"));
      }
    }
  }
  const uint64_t image_bytes = device_->layout().bytes_per_slot();
  RestoreCounts counts;
  std::vector<const RestoreImage*> onto_device =
      Verified(device, image_bytes, counts);
  std::vector<const RestoreImage*> into_tier =
      Verified(tier, image_bytes, counts);
  // The most recent that fit.
  auto keep_last = [&counts](std::vector<const RestoreImage*>& v,
                             int64_t room) {
    if (static_cast<int64_t>(v.size()) <= room) return;
    counts.no_room += static_cast<int64_t>(v.size()) - room;
    v.erase(v.begin(), v.end() - room);
  };
  keep_last(onto_device, pool_.num_slots());
  keep_last(into_tier, tier_.has_value() ? tier_->capacity() : 0);

  RETURN_IF_ERROR(EnableChecksums());
  if (!onto_device.empty()) {
    // In batches through one staging memory of bounded size: a pool-sized
    // one would cost more in fresh pages than the copy itself.
    const size_t batch = std::max<size_t>(
        1, std::min<size_t>(onto_device.size(),
                            kRestoreStagingBytes / image_bytes));
    std::unique_ptr<HostStaging> staging;
    RETURN_IF_ERROR(EnsureStaging(*device_, batch * image_bytes, staging));
    std::vector<SlotImage> images;
    for (size_t first = 0; first < onto_device.size(); first += batch) {
      images.clear();
      const size_t end = std::min(onto_device.size(), first + batch);
      for (size_t slot = first; slot < end; ++slot) {
        const uint64_t offset = images.size() * image_bytes;
        std::memcpy(staging->data() + offset, onto_device[slot]->bytes,
                    image_bytes);
        images.push_back(SlotImage{static_cast<int64_t>(slot), offset});
      }
      RETURN_IF_ERROR(device_->WriteSlots(*staging, images).status());
    }
    for (size_t slot = 0; slot < onto_device.size(); ++slot) {
      const SavedCheckpoint& c = onto_device[slot]->saved;
      if (absl::Status st = pool_.RestoreCheckpoint(static_cast<int64_t>(slot),
                                                    c.hash, c.speculative);
          !st.ok()) {
        return Broken(st, "restore_checkpoint");
      }
      checksums_[c.hash] = c.checksum;
    }
    counts.device = static_cast<int64_t>(onto_device.size());
  }
  for (const RestoreImage* image : into_tier) {
    const HostTier::Filed filed = tier_->Restore(image->saved.hash);
    std::memcpy(tier_memory_->data() + filed.entry * image_bytes, image->bytes,
                image_bytes);
    tier_checksums_[filed.entry] = image->saved.checksum;
  }
  counts.tier = static_cast<int64_t>(into_tier.size());
  pool_.ClearIndexed();
  return counts;
}

}  // namespace statecache

// SlotMemory's host tier half: an admission resumed from the tier, the
// demotions of the checkpoints the pool spends, the tier's room and counts.
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/core/slot_memory.h"

namespace statecache {

absl::StatusOr<Admission> SlotMemory::AdmitFromTier(SlotHolding& holding,
                                                    const AdmitSpec& spec,
                                                    int64_t blocks,
                                                    int64_t entry) {
  // Read now: the most recent, so the demotions the pops below cause spend
  // other entries first.
  tier_->Touch(entry);
  holding.slots.resize(spec.width);
  RETURN_IF_ERROR(pool_.PopMany(spec.width, absl::MakeSpan(holding.slots)));
  for (int32_t i = 0; i < static_cast<int32_t>(holding.slots.size()); ++i) {
    SetOwner(holding.slots[i], &holding, i);
  }
  Admission admission{ResumeOutcome::kMiss, 0};
  // The pops may have spent checkpoints, even into the slot about to be
  // written: their images go first. If that fails, or made the tier spend
  // the entry after all, the resume is a miss (the pool already made a
  // miss's decisions).
  if (!FlushDemotions().ok()) {
    ++tier_promotions_failed_;
    return admission;
  }
  entry = tier_->Find(spec.block_hashes[blocks - 1]);
  if (entry < 0) return admission;
  if (!TierImageIntact(entry)) {
    // Never resume from bytes that changed after they were demoted.
    tier_->Erase(spec.block_hashes[blocks - 1]);
    ++tier_promotions_failed_;
    return admission;
  }
  const SlotImage image{
      holding.slots[0],
      static_cast<uint64_t>(entry) * device_->layout().bytes_per_slot()};
  if (!RunImageCopy({&image, 1}, CopyReason::kPromotion).ok()) {
    // The committed slot holds what the copy left: a miss's forward starts
    // it afresh.
    ++tier_promotions_failed_;
    return admission;
  }
  ++tier_promotions_;
  admission.outcome = ResumeOutcome::kTier;
  admission.blocks_resumed = blocks;
  return admission;
}

namespace {

void AddCounts(const HostTierCounts& from, HostTierCounts& to) {
  to.demotions += from.demotions;
  to.evictions += from.evictions;
  to.hits += from.hits;
  to.erased += from.erased;
  to.restored += from.restored;
}

}  // namespace

absl::StatusOr<uint64_t> SlotMemory::RunImageCopy(
    absl::Span<const SlotImage> images, CopyReason reason) {
  const bool demoting = reason == CopyReason::kDemotion;
  absl::StatusOr<CopyResult> done =
      demoting ? device_->ReadSlots(*tier_memory_, images)
               : device_->WriteSlots(*tier_memory_, images);
  if (!done.ok()) {
    return absl::Status(
        done.status().code(),
        absl::StrCat(CopyReasonName(reason), ": the state memory failed to ",
                     demoting ? "copy out " : "copy in ", images.size(),
                     images.size() == 1 ? " slot (" : " slots (first ",
                     images[0].slot, "): ", done.status().message()));
  }
  for (CopyObserver* o : copy_observers_) {
    o->OnCopy(reason, static_cast<int64_t>(done->bytes),
              absl::ToDoubleSeconds(done->elapsed));
  }
  return done->bytes;
}

absl::Status SlotMemory::FlushDemotions() {
  if (!tier_.has_value() || pool_.spent().empty()) return absl::OkStatus();
  const uint64_t image_bytes = device_->layout().bytes_per_slot();
  images_.clear();
  image_hashes_.clear();
  // Entry -> its image in the batch: a hash filed twice, or an entry spent
  // and reused within the batch, keeps one image, the latest.
  absl::flat_hash_map<int64_t, size_t> batch_entry;
  for (const SlotPool::Spent& spent : pool_.spent()) {
    const HostTier::Filed put = tier_->Insert(spent.hash, spent.speculative);
    const SlotImage image{spent.slot,
                          static_cast<uint64_t>(put.entry) * image_bytes};
    auto [it, inserted] = batch_entry.try_emplace(put.entry, images_.size());
    if (inserted) {
      images_.push_back(image);
      image_hashes_.push_back(spent.hash);
    } else {
      images_[it->second] = image;
      image_hashes_[it->second] = spent.hash;
    }
  }
  pool_.ClearSpent();
  // A slot spent twice (popped, released, popped again) was written by
  // nobody in between: its bytes are the first hash's, and the later hash
  // is not filed over them.
  absl::flat_hash_set<int64_t> seen;
  size_t kept = 0;
  for (size_t i = 0; i < images_.size(); ++i) {
    if (!seen.insert(images_[i].slot).second) {
      tier_->Erase(image_hashes_[i]);
      continue;
    }
    images_[kept] = images_[i];
    image_hashes_[kept++] = image_hashes_[i];
  }
  images_.resize(kept);
  image_hashes_.resize(kept);
  if (images_.empty()) return absl::OkStatus();
  absl::StatusOr<uint64_t> copied =
      RunImageCopy(images_, CopyReason::kDemotion);
  if (copied.ok()) {
    if (checksums_on_) {
      std::vector<uint64_t> sums(images_.size());
      ChecksumImages(*tier_memory_, images_, absl::MakeSpan(sums));
      for (size_t i = 0; i < images_.size(); ++i) {
        tier_checksums_[images_[i].offset / image_bytes] = sums[i];
      }
    }
    return absl::OkStatus();
  }
  // Nothing is served from images that were not copied.
  for (int64_t hash : image_hashes_) {
    if (tier_->Erase(hash)) ++tier_demotions_failed_;
  }
  return copied.status();
}

absl::Status SlotMemory::ResizeHostTier(uint64_t bytes) {
  if (bytes == 0) {
    if (tier_.has_value()) AddCounts(tier_->counts(), retired_tier_counts_);
    tier_.reset();
    tier_memory_.reset();
    tier_checksums_.clear();
    pool_.LogSpent(false);
    pool_.ClearSpent();
    return absl::OkStatus();
  }
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        "host tier: this daemon runs without state memory");
  }
  if (pool_.transfer().replays()) {
    return absl::FailedPreconditionError(
        "host tier: the transfer replays (keeps no state to demote)");
  }
  const uint64_t image_bytes = device_->layout().bytes_per_slot();
  const int64_t entries = static_cast<int64_t>(bytes / image_bytes);
  if (entries < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("host tier: ", bytes, " bytes hold no slot (one is ",
                     image_bytes, " bytes)"));
  }
  // Pending images go to the old memory first, so the move carries them.
  RETURN_IF_ERROR(FlushDemotions());
  ASSIGN_OR_RETURN(std::unique_ptr<HostStaging> memory,
                   device_->AllocateStaging(entries * image_bytes));
  std::vector<uint64_t> checksums(entries, 0);
  if (!tier_.has_value()) {
    tier_.emplace(entries);
  } else {
    for (const auto& [from, to] : tier_->Resize(entries)) {
      std::memcpy(memory->data() + to * image_bytes,
                  tier_memory_->data() + from * image_bytes, image_bytes);
      checksums[to] = tier_checksums_[from];
    }
  }
  tier_memory_ = std::move(memory);
  tier_checksums_ = std::move(checksums);
  pool_.LogSpent(true);
  return absl::OkStatus();
}

SlotMemory::HostTierStats SlotMemory::host_tier_stats() const {
  HostTierStats stats;
  if (tier_.has_value()) {
    const uint64_t image_bytes = device_->layout().bytes_per_slot();
    stats.capacity_bytes = tier_->capacity() * image_bytes;
    stats.entries = tier_->size();
    stats.held_bytes = tier_->size() * image_bytes;
    stats.counts = tier_->counts();
  }
  AddCounts(retired_tier_counts_, stats.counts);
  stats.promotions = tier_promotions_;
  stats.demotions_failed = tier_demotions_failed_;
  stats.promotions_failed = tier_promotions_failed_;
  return stats;
}

}  // namespace statecache

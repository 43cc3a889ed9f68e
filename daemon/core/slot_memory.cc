#include "daemon/core/slot_memory.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"

namespace statecache {
namespace {

absl::Status CheckHashes(absl::Span<const int64_t> hashes, const char* what) {
  for (int64_t h : hashes) {
    if (h < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " contains ", h, "; hashes are in [0, 2^63)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* CopyReasonName(CopyReason reason) {
  switch (reason) {
    case CopyReason::kRelocation:
      return "relocation";
    case CopyReason::kCopy:
      return "copy";
    case CopyReason::kSnapshot:
      return "snapshot";
    case CopyReason::kDemotion:
      return "demotion";
    case CopyReason::kPromotion:
      return "promotion";
    case CopyReason::kCount:
      break;
  }
  return "copy";
}

absl::StatusOr<SlotMemory> SlotMemory::Create(int64_t num_slots,
                                              StateTransfer transfer,
                                              int64_t hash_block_size,
                                              std::shared_ptr<Device> device) {
  if (num_slots < 1 || num_slots > kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_slots must be in [1, ", kMaxSlots, "], got ", num_slots));
  }
  if (device && device->num_slots() != num_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("the device holds ", device->num_slots(),
                     " slots, the pool is to have ", num_slots));
  }
  ASSIGN_OR_RETURN(SlotPool pool,
                   SlotPool::Create(num_slots, transfer, hash_block_size));
  return SlotMemory(std::move(pool), std::move(device));
}

SlotMemory::SlotMemory(SlotPool pool, std::shared_ptr<Device> device)
    : pool_(std::move(pool)), device_(std::move(device)) {
  owners_.resize(pool_.capacity());
}

absl::Status SlotMemory::Broken(const absl::Status& status, const char* call) {
  return absl::InternalError(absl::StrCat(
      call, " failed after its checks passed (a broken invariant): ",
      status.ToString()));
}

Sequence SlotMemory::SequenceOf(const SlotHolding& holding) const {
  Sequence seq;
  seq.state_slot = holding.slots.empty() ? -1 : holding.slots[0];
  seq.num_tokens = holding.num_tokens;
  seq.has_per_req_cache = true;
  seq.midstep_anchor_pos = holding.anchor_pos;
  seq.checkpoint_end_pos = 0;
  return seq;
}

void SlotMemory::SetOwner(int64_t slot, SlotHolding* holding, int32_t index) {
  if (slot >= static_cast<int64_t>(owners_.size())) owners_.resize(slot + 1);
  owners_[slot] = Owner{holding, index};
}

void SlotMemory::ClearOwner(int64_t slot) {
  if (slot >= 0 && slot < static_cast<int64_t>(owners_.size())) {
    owners_[slot] = Owner{};
  }
}

int64_t SlotMemory::NumOwned() const {
  int64_t n = 0;
  for (const Owner& owner : owners_) n += owner.holding != nullptr;
  return n;
}

// ------------------------------------------------------------------ admit

absl::StatusOr<Admission> SlotMemory::Admit(SlotHolding& holding,
                                            const AdmitSpec& spec) {
  if (spec.width < 1 || spec.width > pool_.num_slots()) {
    return absl::InvalidArgumentError(
        absl::StrCat("width must be in [1, ", pool_.num_slots(),
                     "] (the pool's size), got ", spec.width));
  }
  if (spec.num_tokens < 0 || spec.anchor_pos < 0) {
    return absl::InvalidArgumentError("num_tokens and anchor_pos must be >= 0");
  }
  const int64_t given = static_cast<int64_t>(spec.block_hashes.size());
  if (spec.kv_hit_blocks < 0 || spec.kv_hit_blocks > given) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_hit_blocks ", spec.kv_hit_blocks, " outside [0, ",
                     given, "] (the block hashes given)"));
  }
  RETURN_IF_ERROR(CheckHashes(spec.block_hashes, "block_hashes"));
  if (pool_.NumFree() < spec.width) {
    return absl::ResourceExhaustedError(
        absl::StrCat("admit needs ", spec.width, " free slots, ",
                     pool_.NumFree(), " are free; admit it later"));
  }
  holding.num_tokens = spec.num_tokens;
  holding.anchor_pos = spec.anchor_pos;
  // From here every pool call has had its preconditions checked above; a
  // failure is a broken invariant, reported as such.
  ASSIGN_OR_RETURN(int64_t hit,
                   pool_.ResumableHit(SequenceOf(holding), spec.kv_hit_blocks,
                                      spec.block_hashes, false));
  int64_t src = -1;
  bool src_pinned = false;
  if (hit > 0) {
    ASSIGN_OR_RETURN(src, pool_.Lookup(spec.block_hashes[hit - 1]));
    const bool in_range = src >= 0 && src < pool_.num_slots();
    src_pinned = in_range && *pool_.IsPinned(src);
    if (!in_range || (!src_pinned && !*pool_.IsFree(src))) {
      hit = 0;
      src = -1;
    }
  }
  if (tier_.has_value() && spec.kv_hit_blocks > hit) {
    const HostTier::Resume from_tier = tier_->Deepest(
        pool_, SequenceOf(holding), spec.kv_hit_blocks, spec.block_hashes, hit);
    if (from_tier.blocks > hit) {
      return AdmitFromTier(holding, spec, from_tier.blocks, from_tier.entry);
    }
  }
  Admission admission;
  admission.outcome =
      spec.kv_hit_blocks > 0 ? ResumeOutcome::kMiss : ResumeOutcome::kCold;
  if (hit > 0) {
    if (absl::Status st = pool_.Promote(src); !st.ok()) {
      return Broken(st, "promote");
    }
    if (!src_pinned) {
      if (absl::Status st = pool_.Claim(src); !st.ok()) {
        return Broken(st, "claim");
      }
    }
    if (pool_.NumFree() >= spec.width) {
      holding.slots.resize(spec.width);
      RETURN_IF_ERROR(pool_.PopMany(spec.width, absl::MakeSpan(holding.slots)));
      RETURN_IF_ERROR(pool_.Pin(src, /*reader_is_next_batch=*/false));
      holding.fork_src = src;
      admission.outcome = ResumeOutcome::kFork;
    } else {
      // Too few slots to fork: continue in the checkpoint's own slot (only
      // reachable when it was claimed: a pinned source costs no free slot).
      // The forward overwrites it, so it stops being a checkpoint, as
      // ATOM's BlockManager does.
      RETURN_IF_ERROR(pool_.Invalidate(src));
      holding.slots.resize(spec.width);
      holding.slots[0] = src;
      RETURN_IF_ERROR(pool_.PopMany(spec.width - 1,
                                    absl::MakeSpan(holding.slots).subspan(1)));
      admission.outcome = ResumeOutcome::kAdopt;
    }
    admission.blocks_resumed = hit;
  } else {
    holding.slots.resize(spec.width);
    RETURN_IF_ERROR(pool_.PopMany(spec.width, absl::MakeSpan(holding.slots)));
  }
  for (int32_t i = 0; i < static_cast<int32_t>(holding.slots.size()); ++i) {
    SetOwner(holding.slots[i], &holding, i);
  }
  return admission;
}

// ------------------------------------------------------------------ checkpoint

absl::StatusOr<CheckpointOutcome> SlotMemory::Checkpoint(
    SlotHolding& holding, int64_t anchor_pos, int64_t boundary_blocks,
    int64_t hash) {
  if (anchor_pos < 0) {
    return absl::InvalidArgumentError("anchor_pos must be >= 0");
  }
  Sequence seq = SequenceOf(holding);
  if (anchor_pos != 0) seq.midstep_anchor_pos = anchor_pos;
  ASSIGN_OR_RETURN(CheckpointResult forked,
                   pool_.Checkpoint(seq, boundary_blocks, hash));
  CheckpointOutcome out;
  out.state_slot = forked.state_slot;
  out.fork_src = forked.state_fork_src;
  out.kept = forked.state_fork_src >= 0;
  if (!out.kept) return out;
  const int64_t old = forked.state_fork_src;
  holding.slots[0] = forked.state_slot;
  SetOwner(forked.state_slot, &holding, 0);
  ClearOwner(old);
  out.replaced_fork_src = holding.fork_src;
  holding.fork_src = old;
  return out;
}

// ------------------------------------------------------------------ midstep

absl::StatusOr<absl::Span<const Reservation>> SlotMemory::Reserve(
    SlotHolding& holding,
    absl::Span<const std::pair<int64_t, int64_t>> positions) {
  for (const auto& [position, hash] : positions) {
    if (hash < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("position ", position, " has negative hash ", hash));
    }
  }
  // Earlier unpublished reservations are superseded.
  if (!holding.reservations.empty()) {
    RETURN_IF_ERROR(pool_.CancelMidstep(holding.reservations));
    for (const Reservation& r : holding.reservations) ClearOwner(r.slot);
    holding.reservations.clear();
  }
  ASSIGN_OR_RETURN(holding.reservations,
                   pool_.ReserveMidstep(SequenceOf(holding), positions));
  for (const Reservation& r : holding.reservations) {
    SetOwner(r.slot, &holding, -1);
  }
  return absl::MakeConstSpan(holding.reservations);
}

absl::StatusOr<int32_t> SlotMemory::Publish(SlotHolding& holding,
                                            bool keep_all) {
  std::optional<Sequence> seq;
  if (!keep_all) seq = SequenceOf(holding);
  RETURN_IF_ERROR(pool_.PublishMidstep(holding.reservations, seq));
  for (const Reservation& r : holding.reservations) ClearOwner(r.slot);
  const auto n = static_cast<int32_t>(holding.reservations.size());
  holding.reservations.clear();
  return n;
}

absl::StatusOr<int32_t> SlotMemory::Cancel(SlotHolding& holding) {
  RETURN_IF_ERROR(pool_.CancelMidstep(holding.reservations));
  for (const Reservation& r : holding.reservations) ClearOwner(r.slot);
  const auto n = static_cast<int32_t>(holding.reservations.size());
  holding.reservations.clear();
  return n;
}

// ------------------------------------------------------------------ the rest

absl::StatusOr<int64_t> SlotMemory::AdoptForkSource(SlotHolding& holding) {
  const int64_t src = holding.fork_src;
  if (src < 0) {
    return absl::FailedPreconditionError("it has no fork source to adopt");
  }
  ASSIGN_OR_RETURN(int64_t pins, pool_.PinCount(src));
  if (pins != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("its fork source ", src, " has ", pins,
                     " readers; it can be taken over only by its only reader"));
  }
  // ATOM's cancel_state_fork: the fresh slot goes back, the source stops
  // being a checkpoint (the holder writes it from now on), the pin goes.
  const int64_t fresh = holding.slots[0];
  RETURN_IF_ERROR(pool_.Release(fresh));
  if (absl::Status st = pool_.Invalidate(src); !st.ok()) {
    return Broken(st, "invalidate");
  }
  if (absl::Status st = pool_.Unpin(src); !st.ok()) return Broken(st, "unpin");
  ClearOwner(fresh);
  holding.slots[0] = src;
  holding.fork_src = -1;
  SetOwner(src, &holding, 0);
  return src;
}

absl::Status SlotMemory::Release(SlotHolding& holding, bool drop_reader) {
  // As the reference's caller deallocates: reservations back vacant, the
  // slot set back to the pool, then the request stops being a reader.
  if (!holding.reservations.empty()) {
    RETURN_IF_ERROR(pool_.CancelMidstep(holding.reservations));
    for (const Reservation& r : holding.reservations) ClearOwner(r.slot);
    holding.reservations.clear();
  }
  if (absl::Status st = pool_.ReleaseMany(holding.slots); !st.ok()) {
    return Broken(st, "release_many");
  }
  for (int64_t slot : holding.slots) ClearOwner(slot);
  holding.slots.clear();
  if (holding.fork_src >= 0 && drop_reader) {
    if (absl::Status st = pool_.DropReader(holding.fork_src); !st.ok()) {
      return Broken(st, "drop_reader");
    }
  }
  holding.fork_src = -1;
  return absl::OkStatus();
}

absl::Status SlotMemory::DropForkSource(SlotHolding& holding) {
  if (holding.fork_src < 0) return absl::OkStatus();
  RETURN_IF_ERROR(pool_.DropReader(holding.fork_src));
  holding.fork_src = -1;
  return absl::OkStatus();
}

absl::StatusOr<SlotMemory::Resumable> SlotMemory::ResumableHit(
    int64_t num_tokens, int32_t kv_hit_blocks, absl::Span<const int64_t> hashes,
    bool assume_checkpointed) const {
  if (num_tokens < 0) {
    return absl::InvalidArgumentError("num_tokens must be >= 0");
  }
  Sequence seq;
  seq.num_tokens = num_tokens;
  seq.has_per_req_cache = true;
  Resumable out;
  ASSIGN_OR_RETURN(out.blocks, pool_.ResumableHit(seq, kv_hit_blocks, hashes,
                                                  assume_checkpointed));
  if (!assume_checkpointed && tier_.has_value()) {
    out.tier_blocks =
        tier_->Deepest(pool_, seq, kv_hit_blocks, hashes, out.blocks).blocks;
  }
  return out;
}

absl::StatusOr<int32_t> SlotMemory::Unindex(absl::Span<const int64_t> hashes) {
  RETURN_IF_ERROR(CheckHashes(hashes, "hashes"));
  const int64_t before = pool_.Fates().orphaned;
  for (int64_t h : hashes) {
    if (absl::Status st = pool_.Unindex(h); !st.ok()) {
      return Broken(st, "unindex");
    }
    if (tier_.has_value()) tier_->Erase(h);
  }
  return static_cast<int32_t>(pool_.Fates().orphaned - before);
}

absl::StatusOr<bool> SlotMemory::Supersede(int64_t hash, int64_t slot) {
  RETURN_IF_ERROR(CheckHashes(absl::MakeConstSpan(&hash, 1), "hash"));
  if (tier_.has_value()) tier_->Erase(hash);
  ASSIGN_OR_RETURN(const int64_t filed, pool_.Lookup(hash));
  if (filed < 0 || filed != slot) return false;
  if (absl::Status st = pool_.Invalidate(slot); !st.ok()) {
    return Broken(st, "supersede");
  }
  return true;
}

void SlotMemory::ClearIndex() {
  pool_.ClearIndex();
  if (tier_.has_value()) tier_->Clear();
}

// ------------------------------------------------------------------ copies

absl::StatusOr<uint64_t> SlotMemory::RunCopy(
    absl::Span<const std::pair<int64_t, int64_t>> pairs, CopyReason reason) {
  // A spent checkpoint's image leaves its slot before anything writes it.
  RETURN_IF_ERROR(FlushDemotions());
  absl::StatusOr<CopyResult> done = device_->Copy(pairs);
  if (!done.ok()) {
    // The device's code, with what was being copied and why.
    std::string copying;
    for (size_t i = 0; i < pairs.size() && i < 4; ++i) {
      absl::StrAppend(&copying, i == 0 ? "" : ", ", pairs[i].first, " -> ",
                      pairs[i].second);
    }
    if (pairs.size() > 4) absl::StrAppend(&copying, ", ...");
    return absl::Status(
        done.status().code(),
        absl::StrCat(CopyReasonName(reason),
                     ": the state memory failed to copy ", pairs.size(),
                     pairs.size() == 1 ? " slot (" : " slots (", copying,
                     "): ", done.status().message()));
  }
  for (CopyObserver* o : copy_observers_) {
    o->OnCopy(reason, static_cast<int64_t>(done->bytes),
              absl::ToDoubleSeconds(done->elapsed));
  }
  return done->bytes;
}

absl::StatusOr<uint64_t> SlotMemory::Copy(const SlotHolding& holding,
                                          int32_t from_index,
                                          int32_t to_index) {
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        "copy: this daemon runs without state memory");
  }
  const auto n = static_cast<int32_t>(holding.slots.size());
  if (from_index < 0 || from_index >= n || to_index < 0 || to_index >= n ||
      from_index == to_index) {
    return absl::InvalidArgumentError(absl::StrCat(
        "copy: indices ", from_index, " -> ", to_index,
        " must be two different indices of the request's ", n, " slots"));
  }
  const std::pair<int64_t, int64_t> pair{holding.slots[from_index],
                                         holding.slots[to_index]};
  return RunCopy({&pair, 1}, CopyReason::kCopy);
}

absl::StatusOr<SnapshotOutcome> SlotMemory::Snapshot(const SlotHolding& holding,
                                                     int64_t position,
                                                     int64_t hash) {
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        "snapshot: this daemon runs without state memory");
  }
  if (hash < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot: hash ", hash, " is negative"));
  }
  if (!pool_.transfer().readable_midstep()) {
    return absl::FailedPreconditionError(
        "snapshot: built on the midstep primitives, which this daemon's "
        "transfer (readable_midstep=false) does not allow");
  }
  // The pool's own primitives: reserve a destination (pop), copy the
  // committed slot into it, publish it under the hash (index + LRU rules).
  const Sequence seq = SequenceOf(holding);
  const std::pair<int64_t, int64_t> wanted{position, hash};
  ASSIGN_OR_RETURN(std::vector<Reservation> reserved,
                   pool_.ReserveMidstep(seq, {&wanted, 1}));
  SnapshotOutcome out;
  if (reserved.empty()) return out;  // nothing free: counted as dropped
  const std::pair<int64_t, int64_t> pair{holding.slots[0], reserved[0].slot};
  absl::StatusOr<uint64_t> copied = RunCopy({&pair, 1}, CopyReason::kSnapshot);
  if (!copied.ok()) {
    // Nothing is filed over bytes that were not written.
    if (absl::Status st = pool_.CancelMidstep(reserved); !st.ok()) {
      return Broken(st, "cancel_midstep");
    }
    return copied.status();
  }
  if (absl::Status st = pool_.PublishMidstep(reserved, seq); !st.ok()) {
    return Broken(st, "publish_midstep");
  }
  out.kept = true;
  out.slot = reserved[0].slot;
  return out;
}

// ------------------------------------------------------------------ resizing

absl::Status SlotMemory::Grow(int64_t target) {
  const int64_t from = pool_.num_slots();
  if (target <= from || target > kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grow: target ", target, " must be in (", from, ", ", kMaxSlots, "]"));
  }
  if (device_ != nullptr) RETURN_IF_ERROR(device_->Resize(target));
  if (absl::Status st = pool_.Extend(target - from); !st.ok()) {
    return Broken(st, "extend");
  }
  if (static_cast<int64_t>(owners_.size()) < target) owners_.resize(target);
  return absl::OkStatus();
}

absl::Status SlotMemory::DropUncopied(const SlotRetirement* pending,
                                      int64_t& dropped) {
  for (int64_t dst : batch_checkpoints_) {
    // Where the checkpoint copied into `dst` is filed now: there, unless the
    // retirement that flushed the batch spent `dst` as its target (already
    // unfiled and counted) or retired `dst` itself (moved on with it).
    int64_t at = dst;
    if (pending != nullptr && pending->retired == dst) {
      at = pending->relocated_to;
    } else if (pending != nullptr && pending->relocated_to == dst) {
      continue;
    }
    if (at < 0 || at >= pool_.num_slots()) continue;
    ASSIGN_OR_RETURN(const bool holds, pool_.HoldsCheckpoint(at));
    if (!holds) continue;
    if (absl::Status st = pool_.Invalidate(at); !st.ok()) {
      return Broken(st, "invalidate");
    }
    ++dropped;
  }
  return absl::OkStatus();
}

SlotMemory::ShrinkProgress SlotMemory::ShrinkStep(
    int64_t target, std::vector<Relocation>& moved,
    absl::FunctionRef<bool(const SlotHolding&)> may_move_live) {
  ShrinkProgress progress;
  const int64_t from = pool_.num_slots();
  // Copies the batch; if the copy fails, no checkpoint is left filed over
  // bytes that were not moved. `pending` is the retirement that made the
  // batch flush (it has already happened in the pool), or null.
  auto flush = [&](const SlotRetirement* pending) {
    if (batch_.empty()) return;
    absl::StatusOr<uint64_t> copied = RunCopy(batch_, CopyReason::kRelocation);
    if (!copied.ok()) {
      int64_t dropped = 0;
      absl::Status st = DropUncopied(pending, dropped);
      const int64_t live =
          static_cast<int64_t>(batch_.size() - batch_checkpoints_.size());
      absl::Status failure(
          copied.status().code(),
          absl::StrCat(copied.status().message(), "; ", dropped,
                       " checkpoints moved in it were dropped from the index, ",
                       live, " live slots moved in it lost their contents"));
      if (!st.ok()) failure = st;
      if (progress.failure.ok()) progress.failure = std::move(failure);
    }
    batch_.clear();
    batch_checkpoints_.clear();
    touched_.clear();
  };
  while (pool_.num_slots() > target) {
    const int64_t top = pool_.num_slots() - 1;
    // A reservation's forward may be writing its slot: wait for its publish
    // or cancel rather than move bytes under it.
    const Owner owner = OwnerOf(top);
    if (owner.holding != nullptr && owner.index < 0) break;
    // A live slot moves only when its holder's forward cannot be writing
    // it: a write landing in the old slot after the copy would be lost.
    if (owner.holding != nullptr && !may_move_live(*owner.holding)) break;
    absl::StatusOr<std::optional<SlotRetirement>> retired = pool_.RetireTop();
    if (!retired.ok()) {
      progress.failure = Broken(retired.status(), "retire_top");
      break;
    }
    if (!retired->has_value()) break;  // pinned, or nowhere to go
    const SlotRetirement& ret = **retired;
    if (ret.relocated_to < 0) continue;
    ++progress.relocated;
    if (device_ != nullptr) {
      if (touched_.contains(ret.retired) ||
          touched_.contains(ret.relocated_to)) {
        flush(&ret);
      }
      batch_.emplace_back(ret.retired, ret.relocated_to);
      if (ret.held_checkpoint) batch_checkpoints_.push_back(ret.relocated_to);
      touched_.insert(ret.retired);
      touched_.insert(ret.relocated_to);
    }
    if (!ret.held_checkpoint && owner.holding != nullptr) {
      owner.holding->slots[owner.index] = ret.relocated_to;
      moved.push_back(Relocation{owner.holding, owner.index, ret.retired,
                                 ret.relocated_to});
      ClearOwner(ret.retired);
      SetOwner(ret.relocated_to, owner.holding, owner.index);
    }
  }
  flush(nullptr);
  // Checkpoints the shrink spent leave for the tier before the tail goes.
  if (absl::Status st = FlushDemotions(); !st.ok() && progress.failure.ok()) {
    progress.failure = st;
  }
  if (device_ != nullptr && pool_.num_slots() != from) {
    // The tail's content has moved down: give its memory back.
    if (absl::Status st = device_->Resize(pool_.num_slots());
        !st.ok() && progress.failure.ok()) {
      progress.failure = st;
    }
  }
  progress.reached = pool_.num_slots() == target;
  return progress;
}

}  // namespace statecache

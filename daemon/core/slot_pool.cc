#include "daemon/core/slot_pool.h"

#include <algorithm>
#include <limits>
#include <string>
#include <variant>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/core/pool_call.h"
#include "daemon/core/slot_pool_observed.h"
#include "daemon/core/slot_sort.h"

namespace statecache {

// ---------------------------------------------------------------- creation

absl::StatusOr<SlotPool> SlotPool::Create(int64_t num_slots,
                                          StateTransfer transfer,
                                          int64_t hash_block_size,
                                          bool enabled) {
  if (num_slots < 0 || num_slots > kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_slots must be in [0, ", kMaxSlots, "], got ", num_slots));
  }
  if (hash_block_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("hash_block_size must be >= 1, got ", hash_block_size));
  }
  if (transfer.copies()) {
    return absl::InvalidArgumentError(
        "PAGE-copy checkpoints do not belong to the slot pool (transfer kind "
        "copy)");
  }
  return SlotPool(num_slots, transfer, hash_block_size, enabled);
}

SlotPool::SlotPool(int64_t num_slots, StateTransfer transfer,
                   int64_t hash_block_size, bool enabled)
    : enabled_(enabled && num_slots > 0),
      num_slots_(num_slots),
      transfer_(transfer),
      hash_block_size_(hash_block_size) {
  GrowTo(num_slots);
  for (int64_t s = 0; s < num_slots; ++s) {
    Set(s, kFree);
    vacant_.Insert(s);
  }
  num_free_ = num_slots;
}

uint64_t SlotPool::BookkeepingBytes(int64_t slots) {
  const auto n = static_cast<uint64_t>(slots);
  // The hash index reserves bit_ceil(2n) buckets (each a Bucket and a tag):
  // at most 4n.
  const uint64_t per_slot = sizeof(SlotState) +
                            4 * (2 * sizeof(int64_t) + sizeof(uint8_t)) +
                            sizeof(std::pair<int64_t, int64_t>) +
                            sizeof(uint32_t) + 1;  // + vacant bits, rounded
  return n * per_slot;
}

void SlotPool::GrowTo(int64_t capacity) {
  if (capacity <= this->capacity()) return;
  slots_.resize(capacity);
  // One index entry per slot holding a checkpoint, so no rehash on the way
  // to a full pool.
  hash_to_slot_.Reserve(capacity);
  reservation_.resize(capacity);
  scratch_.resize(capacity, 0);
  vacant_.Grow(capacity);
}

// ---------------------------------------------------------------- checks

template <typename Item, typename HashOf>
absl::Status SlotPool::CheckHashes(absl::Span<const Item> items, HashOf hash_of,
                                   const char* what) {
  // The sign bits of all hashes at once (no branch per item); the slow loop
  // only to name the first negative one.
  uint64_t any_negative = 0;
  for (const Item& item : items) {
    any_negative |= static_cast<uint64_t>(hash_of(item));
  }
  if (ABSL_PREDICT_TRUE(static_cast<int64_t>(any_negative) >= 0)) {
    return absl::OkStatus();
  }
  for (const Item& item : items)
    RETURN_IF_ERROR(CheckHash(hash_of(item), what));
  return absl::OkStatus();
}

absl::Status SlotPool::NegativeCount(int64_t count, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": count must be >= 0, got ", count));
}

absl::Status SlotPool::NegativeHash(int64_t hash, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", hash, " is negative; hashes are in [0, 2^63)"));
}

absl::Status SlotPool::SlotOutOfRange(int64_t slot, const char* what) const {
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": slot ", slot, " out of range [0, ", num_slots_, ")"));
}

void SlotPool::NewScratchGeneration() const {
  if (++scratch_generation_ == 0) {
    // Wrapped: forget every old mark once in 2^32 calls.
    std::fill(scratch_.begin(), scratch_.end(), 0);
    scratch_generation_ = 1;
  }
}

bool SlotPool::SeenBefore(int64_t slot) const {
  if (scratch_[slot] == scratch_generation_) return true;
  scratch_[slot] = scratch_generation_;
  return false;
}

absl::Status SlotPool::CheckReservations(
    absl::Span<const Reservation> reservations, const char* what) const {
  NewScratchGeneration();
  for (const Reservation& r : reservations) {
    RETURN_IF_ERROR(CheckSlot(r.slot, what));
    if (SeenBefore(r.slot)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": slot ", r.slot, " is named twice"));
    }
    if (!Is(r.slot, kReserved)) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": slot ", r.slot,
          " holds no outstanding reservation (never reserved, or already "
          "published or cancelled)"));
    }
    const auto& [position, hash] = reservation_[r.slot];
    if (position != r.position || hash != r.hash) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": slot ", r.slot, " was reserved for position ", position,
          " hash ", hash, ", not position ", r.position, " hash ", r.hash));
    }
    if (slots_[r.slot].pins > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": reserved slot ", r.slot, " is pinned"));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- free list

absl::StatusOr<int64_t> SlotPool::Pop() {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kPop}, [&] { return Pop(); });
  }
  if (num_free_ < 1) {
    return absl::ResourceExhaustedError("pop: no free slot");
  }
  return PopUnchecked();
}

absl::StatusOr<std::vector<int64_t>> SlotPool::PopMany(int64_t count) {
  std::vector<int64_t> out;
  // Sized only for a count that passes the checks (a huge one must not
  // allocate before being refused).
  if (count >= 0 && count <= num_free_) out.resize(count);
  RETURN_IF_ERROR(PopMany(count, absl::MakeSpan(out)));
  return out;
}

absl::Status SlotPool::PopMany(int64_t count, absl::Span<int64_t> out) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kPopMany, .a = count},
                    [&]() -> absl::StatusOr<std::vector<int64_t>> {
                      RETURN_IF_ERROR(PopMany(count, out));
                      return std::vector<int64_t>(out.begin(), out.end());
                    })
        .status();
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pop_many: count must be >= 0, got ", count));
  }
  if (count > num_free_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "pop_many: ", count, " slots asked for, only ", num_free_, " free"));
  }
  if (static_cast<int64_t>(out.size()) != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("pop_many: room for ", out.size(), " slots, not ", count));
  }
  for (int64_t& slot : out) slot = PopUnchecked();
  return absl::OkStatus();
}

int64_t SlotPool::PopUnchecked() {
  int64_t slot = PopVacant();
  if (slot < 0) {
    slot = checkpointed_.Front();
    if (eviction_ == Eviction::kSecondChance) slot = SecondChance(slot);
    checkpointed_.Remove(slots_, slot);
    Clear(slot, kFree | kInLru);
    --num_free_;
    ++fates_.evicted;
    if (log_spent_) {
      spent_.push_back(Spent{slot, slots_[slot].hash, Is(slot, kSpeculative)});
    }
    // Evictions walk the LRU in order, so the next ones are known: start
    // fetching what they will touch. The new head's record was fetched by
    // the previous eviction, so reading it here is cheap; fetch its index
    // entry, and the record after it.
    if (Prefetches() && !checkpointed_.empty()) {
      const SlotState& head = slots_[checkpointed_.Front()];
      hash_to_slot_.Prefetch(head.hash);
      if (head.lru.next != kNilSlot)
        __builtin_prefetch(&slots_[head.lru.next], 1);
    }
  }
  // The guess goes with the content; not folded into Invalidate, which also
  // runs on the re-file inside Index and would clear a mark just made.
  Clear(slot, kSpeculative);
  InvalidateUnchecked(slot);
  return slot;
}

const char* EvictionName(Eviction eviction) {
  return eviction == Eviction::kSecondChance ? "second-chance" : "lru";
}

absl::StatusOr<Eviction> ParseEviction(std::string_view name) {
  for (Eviction e : {Eviction::kLru, Eviction::kSecondChance}) {
    if (name == EvictionName(e)) return e;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("eviction must be lru or second-chance, got \"",
                   std::string(name), "\""));
}

// Bounded: a pool whose every checkpoint was resumed from spends the head
// after this many passes, as LRU would have a moment earlier.
constexpr int kMaxSecondChances = 16;

int64_t SlotPool::SecondChance(int64_t head) {
  for (int i = 0;
       i < kMaxSecondChances && Is(head, kResumed) && checkpointed_.size() > 1;
       ++i) {
    Clear(head, kResumed);
    checkpointed_.Remove(slots_, head);
    checkpointed_.PushBack(slots_, head);
    head = checkpointed_.Front();
  }
  return head;
}

int64_t SlotPool::PopVacant() {
  const int64_t slot = vacant_.TakeMin();
  if (slot < 0) return -1;
  Clear(slot, kFree);
  --num_free_;
  return slot;
}

absl::Status SlotPool::Claim(int64_t slot) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kClaim, .a = slot},
                    [&] { return Claim(slot); });
  }
  RETURN_IF_ERROR(CheckSlot(slot, "claim"));
  if (!Is(slot, kFree)) {
    return absl::FailedPreconditionError(
        absl::StrCat("claim: slot ", slot, " is not free"));
  }
  ClaimUnchecked(slot);
  return absl::OkStatus();
}

void SlotPool::ClaimUnchecked(int64_t slot) {
  if (!Is(slot, kFree)) return;
  --num_free_;
  if (Is(slot, kInLru)) {
    checkpointed_.Remove(slots_, slot);
  } else {
    vacant_.Erase(slot);
  }
  Clear(slot, kFree | kInLru);
}

absl::Status SlotPool::MarkSpeculative(int64_t slot) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kMarkSpeculative, .a = slot},
                    [&] { return MarkSpeculative(slot); });
  }
  RETURN_IF_ERROR(CheckSlot(slot, "mark_speculative"));
  MarkSpeculativeUnchecked(slot);
  return absl::OkStatus();
}

void SlotPool::MarkSpeculativeUnchecked(int64_t slot) {
  if (enabled_) Set(slot, kSpeculative);
}

absl::Status SlotPool::Promote(int64_t slot) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kPromote, .a = slot},
                    [&] { return Promote(slot); });
  }
  RETURN_IF_ERROR(CheckSlot(slot, "promote"));
  if (enabled_ && eviction_ == Eviction::kSecondChance) Set(slot, kResumed);
  if (!enabled_ || !Is(slot, kSpeculative)) return absl::OkStatus();
  Clear(slot, kSpeculative);
  if (Is(slot, kInLru)) {
    checkpointed_.Remove(slots_, slot);
    checkpointed_.PushBack(slots_, slot);
  }
  return absl::OkStatus();
}

absl::Status SlotPool::Release(int64_t slot) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kRelease, .a = slot},
                    [&] { return Release(slot); });
  }
  RETURN_IF_ERROR(CheckSlot(slot, "release"));
  if (Is(slot, kFree)) {
    return absl::FailedPreconditionError(
        absl::StrCat("release: slot ", slot, " is already free"));
  }
  if (slots_[slot].pins > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "release: slot ", slot,
        " is pinned as a fork source; it goes back through release_pins, "
        "drop_reader or unpin"));
  }
  ReleaseUnchecked(slot);
  return absl::OkStatus();
}

void SlotPool::ReleaseUnchecked(int64_t slot) {
  Clear(slot, kReserved);
  Set(slot, kFree);
  ++num_free_;
  if (slots_[slot].hash != -1) {
    if (Is(slot, kSpeculative)) {
      checkpointed_.PushFront(slots_, slot);
    } else {
      checkpointed_.PushBack(slots_, slot);
    }
    Set(slot, kInLru);
    return;
  }
  Clear(slot, kSpeculative);
  vacant_.Insert(slot);
}

absl::Status SlotPool::ReleaseMany(absl::Span<const int64_t> slots) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(
        PoolCall{.op = PoolOp::kReleaseMany,
                 .ints = std::vector<int64_t>(slots.begin(), slots.end())},
        [&] { return ReleaseMany(slots); });
  }
  NewScratchGeneration();
  for (int64_t slot : slots) {
    if (slot == -1) continue;
    RETURN_IF_ERROR(CheckSlot(slot, "release_many"));
    if (SeenBefore(slot)) {
      return absl::InvalidArgumentError(
          absl::StrCat("release_many: slot ", slot, " is named twice"));
    }
    if (Is(slot, kFree)) {
      return absl::FailedPreconditionError(
          absl::StrCat("release_many: slot ", slot, " is already free"));
    }
    if (slots_[slot].pins > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "release_many: slot ", slot, " is pinned as a fork source"));
    }
  }
  for (int64_t slot : slots) {
    if (slot >= 0) ReleaseUnchecked(slot);
  }
  return absl::OkStatus();
}

void SlotPool::SetHash(int64_t slot, int64_t hash) {
  if (!Is(slot, kFree)) {
    slots_[slot].hash = hash;
    return;
  }
  // Re-file a free slot into the half its new content puts it in.
  ClaimUnchecked(slot);
  slots_[slot].hash = hash;
  ReleaseUnchecked(slot);
}

// ---------------------------------------------------------------- lookup

absl::StatusOr<int64_t> SlotPool::ResumableHit(
    const Sequence& seq, int64_t hit, absl::Span<const int64_t> block_hashes,
    bool assume_checkpointed) const {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kResumableHit,
                             .a = hit,
                             .flag = assume_checkpointed,
                             .seq = seq,
                             .ints = std::vector<int64_t>(block_hashes.begin(),
                                                          block_hashes.end())},
                    [&] {
                      return ResumableHit(seq, hit, block_hashes,
                                          assume_checkpointed);
                    });
  }
  if (hit < 0 || hit > static_cast<int64_t>(block_hashes.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("resumable_hit: hit ", hit, " outside [0, ",
                     block_hashes.size(), "] (the blocks given)"));
  }
  RETURN_IF_ERROR(CheckHashes(
      block_hashes, [](int64_t h) { return h; }, "resumable_hit: block hash"));
  if (!Applies(seq)) return hit;
  // Nothing is kept under replay: the resuming forward rebuilds the state.
  if (transfer_.replays()) return hit;
  // Block i leaves room to fork iff num_tokens - (i+1)*hbs >= fork_tokens,
  // i.e. (i+1)*hbs <= limit: blocks [0, deepest) do, and the walk starts
  // there instead of testing each block (caller-supplied values: no
  // overflow on the way).
  const int64_t min_fork_tokens = transfer_.fork_tokens();
  int64_t limit = 0;
  int64_t deepest = 0;
  if (__builtin_sub_overflow(seq.num_tokens, min_fork_tokens, &limit)) {
    // Beyond int64: below its range (no block has room) when fork_tokens is
    // positive, above it (every block has) when negative.
    deepest = min_fork_tokens > 0 ? 0 : hit;
  } else if (limit >= 0) {
    // min(hit, limit / hbs) without the division (tens of cycles) in the
    // usual case, where all `hit` blocks leave room: hit <= limit / hbs iff
    // hit * hbs <= limit.
    int64_t span = 0;
    const bool all_fit =
        !__builtin_mul_overflow(hit, hash_block_size_, &span) && span <= limit;
    deepest = all_fit ? hit : limit / hash_block_size_;
  }
  for (int64_t i = deepest - 1; i >= 0; --i) {
    if (assume_checkpointed || hash_to_slot_.Contains(block_hashes[i])) {
      return i + 1;
    }
  }
  return 0;
}

// ---------------------------------------------------------------- midstep

absl::StatusOr<std::vector<Reservation>> SlotPool::ReserveMidstep(
    const Sequence& seq,
    absl::Span<const std::pair<int64_t, int64_t>> positions) {
  std::vector<Reservation> out(positions.size());
  ASSIGN_OR_RETURN(const int64_t reserved,
                   ReserveMidstep(seq, positions, absl::MakeSpan(out)));
  out.resize(reserved);
  return out;
}

absl::StatusOr<int64_t> SlotPool::ReserveMidstep(
    const Sequence& seq,
    absl::Span<const std::pair<int64_t, int64_t>> positions,
    absl::Span<Reservation> out) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    absl::StatusOr<std::vector<Reservation>> reserved = Observed(
        PoolCall{.op = PoolOp::kReserveMidstep,
                 .seq = seq,
                 .pairs = {positions.begin(), positions.end()}},
        [&]() -> absl::StatusOr<std::vector<Reservation>> {
          ASSIGN_OR_RETURN(const int64_t n,
                           ReserveMidstep(seq, positions, out));
          return std::vector<Reservation>(out.begin(), out.begin() + n);
        });
    if (!reserved.ok()) return reserved.status();
    return static_cast<int64_t>(reserved->size());
  }
  RETURN_IF_ERROR(CheckHashes(
      positions, [](const auto& position) { return position.second; },
      "reserve_midstep: hash"));
  if (out.size() < positions.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reserve_midstep: room for ", out.size(),
                     " reservations, not ", positions.size()));
  }
  if (!Applies(seq) || !transfer_.readable_midstep()) return 0;
  int64_t reserved = 0;
  for (const auto& [pos, hash] : positions) {
    if (num_free_ < 1) {
      ++fates_.dropped;
      break;
    }
    const int64_t slot = PopUnchecked();
    Set(slot, kReserved);
    reservation_[slot] = {pos, hash};
    out[reserved++] = Reservation{slot, pos, hash};
  }
  return reserved;
}

std::optional<int64_t> SlotPool::AnchorOf(const Sequence* seq) {
  int64_t pos = 0;
  if (seq != nullptr) {
    pos = seq->midstep_anchor_pos != 0 ? seq->midstep_anchor_pos
                                       : seq->checkpoint_end_pos;
  }
  if (pos == 0) return std::nullopt;
  return pos;
}

absl::Status SlotPool::PublishMidstep(
    absl::Span<const Reservation> reservations,
    const std::optional<Sequence>& seq) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(
        PoolCall{.op = PoolOp::kPublishMidstep,
                 .seq = seq,
                 .reservations = {reservations.begin(), reservations.end()}},
        [&] { return PublishMidstep(reservations, seq); });
  }
  RETURN_IF_ERROR(CheckReservations(reservations, "publish_midstep"));
  const bool demotes = seq.has_value();
  const std::optional<int64_t> known = AnchorOf(seq ? &*seq : nullptr);
  for (const Reservation& r : reservations) {
    if (demotes && (!known || r.position != *known)) {
      MarkSpeculativeUnchecked(r.slot);
    }
    Index(r.hash, r.slot);
    ReleaseUnchecked(r.slot);
    ++fates_.kept;
  }
  return absl::OkStatus();
}

absl::Status SlotPool::CancelMidstep(
    absl::Span<const Reservation> reservations) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(
        PoolCall{.op = PoolOp::kCancelMidstep,
                 .reservations = {reservations.begin(), reservations.end()}},
        [&] { return CancelMidstep(reservations); });
  }
  RETURN_IF_ERROR(CheckReservations(reservations, "cancel_midstep"));
  for (const Reservation& r : reservations) ReleaseUnchecked(r.slot);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- checkpoint

absl::StatusOr<CheckpointResult> SlotPool::Checkpoint(const Sequence& seq,
                                                      int64_t boundary_blocks,
                                                      int64_t hash) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kCheckpoint,
                             .a = boundary_blocks,
                             .b = hash,
                             .seq = seq},
                    [&] { return Checkpoint(seq, boundary_blocks, hash); });
  }
  RETURN_IF_ERROR(CheckHash(hash, "checkpoint: hash"));
  if (boundary_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint: boundary_blocks must be >= 0, got ", boundary_blocks));
  }
  CheckpointResult result{seq.state_slot, -1};
  if (!Applies(seq) || !transfer_.forks()) return result;
  const int64_t old = seq.state_slot;
  if (old < 0) return result;
  RETURN_IF_ERROR(CheckSlot(old, "checkpoint: seq.state_slot"));
  if (Is(old, kFree)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint: seq.state_slot ", old,
        " is free; only a live committed slot can be checkpointed"));
  }
  if (num_free_ < 1) {
    ++fates_.dropped;
    return result;
  }
  // Start fetching the index entry Index() will write; Pop runs meanwhile.
  if (Prefetches()) hash_to_slot_.Prefetch(hash);
  const std::optional<int64_t> known = AnchorOf(&seq);
  int64_t boundary_pos = 0;
  const bool overflows =
      __builtin_mul_overflow(boundary_blocks, hash_block_size_, &boundary_pos);
  const bool guess = !known || overflows || boundary_pos != *known;
  result.state_slot = PopUnchecked();
  result.state_fork_src = old;
  // Not released: the request's next forward reads `old`, two passes off.
  Index(hash, old);
  if (guess) MarkSpeculativeUnchecked(old);
  PinUnchecked(old, /*reader_is_next_batch=*/true);
  ++fates_.kept;
  return result;
}

Occupancy SlotPool::GetOccupancy() const {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kOccupancy},
                    [&] { return GetOccupancy(); });
  }
  const int64_t held = checkpointed_.size();
  return Occupancy{num_slots_, num_slots_ - num_free_, held, num_free_ - held};
}

absl::Status SlotPool::RecordRelocation(int64_t src, int64_t dst) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(
        PoolCall{.op = PoolOp::kRecordRelocation, .a = src, .b = dst},
        [&] { return RecordRelocation(src, dst); });
  }
  for (int64_t s : {src, dst}) {
    if (s < 0 || s >= capacity()) {
      return absl::InvalidArgumentError(absl::StrCat("record_relocation: slot ",
                                                     s, " out of range [0, ",
                                                     capacity(), ")"));
    }
  }
  relocations_.emplace_back(src, dst);
  return absl::OkStatus();
}

std::vector<std::pair<int64_t, int64_t>> SlotPool::TakeRelocations() {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kTakeRelocations},
                    [&] { return TakeRelocations(); });
  }
  std::vector<std::pair<int64_t, int64_t>> out;
  out.swap(relocations_);
  return out;
}

void SlotPool::Index(int64_t hash, int64_t slot) {
  if (!enabled_) return;
  if (log_indexed_) indexed_.push_back(hash);
  InvalidateUnchecked(slot);
  const int64_t prev = hash_to_slot_.InsertOrAssign(hash, slot);
  SetHash(slot, hash);
  // Re-filing a hash onto a different slot orphans the old one; drop its
  // back-pointer directly (Invalidate would take the new entry with it).
  if (prev != -1 && prev != slot) SetHash(prev, -1);
}

absl::Status SlotPool::Unindex(int64_t hash) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kUnindex, .a = hash},
                    [&] { return Unindex(hash); });
  }
  RETURN_IF_ERROR(CheckHash(hash, "unindex: hash"));
  const int64_t slot = hash_to_slot_.Find(hash);
  if (slot < 0) return absl::OkStatus();
  InvalidateUnchecked(slot);
  ++fates_.orphaned;
  return absl::OkStatus();
}

void SlotPool::ClearIndex() {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    Observed(PoolCall{.op = PoolOp::kClearIndex}, [&] {
      ClearIndex();
      return std::monostate{};
    });
    return;
  }
  std::vector<int64_t> slots;
  slots.reserve(hash_to_slot_.size());
  hash_to_slot_.ForEach(
      [&slots](int64_t, int64_t slot) { slots.push_back(slot); });
  for (int64_t slot : slots) InvalidateUnchecked(slot);
}

absl::Status SlotPool::Invalidate(int64_t slot) {
  if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
    return Observed(PoolCall{.op = PoolOp::kInvalidate, .a = slot},
                    [&] { return Invalidate(slot); });
  }
  RETURN_IF_ERROR(CheckSlot(slot, "invalidate"));
  InvalidateUnchecked(slot);
  return absl::OkStatus();
}

void SlotPool::InvalidateHashed(int64_t slot) {
  const int64_t hash = slots_[slot].hash;
  Clear(slot, kResumed);
  SetHash(slot, -1);
  hash_to_slot_.EraseIfFiledUnder(hash, slot);
}

// Here rather than with the other pins: checkpoint, the hot path, inlines it.
void SlotPool::PinUnchecked(int64_t slot, bool reader_is_next_batch) {
  SlotState& st = slots_[slot];
  if (st.pins++ == 0) {
    st.pinned_pos = static_cast<int32_t>(pinned_.size());
    pinned_.push_back(static_cast<int32_t>(slot));
  }
  if (reader_is_next_batch) Set(slot, kDeferred);
}

}  // namespace statecache

// SlotPool: which slots of the state tensor are live, which hold a prefix
// checkpoint, and which are vacant; plus the index from chained block hash to
// checkpoint slot.
//
// A port of the reference pool (ATOM's StateSlotPool, with two corrections to
// its shrink path), whose rules docs/pool_rules.md summarises, call by call
// and with why each exists. The port makes the same observable decisions:
// fed the same calls it hands out the same slots, evicts the same
// checkpoints, files the same hashes and counts the same fates (checked on
// the pool traces of docs/trace_format.md). Each method's comment below
// states its rule, so this header (with daemon/core/slot_memory.h, the verbs
// a request's life is made of) is the contract. The rules in brief:
//   * A slot is live (a request writes it), pinned (a forward will read it),
//     a free checkpoint (on the LRU, filed under a hash, still worth
//     something) or vacant. Pop spends the lowest vacant slot first and only
//     then the LRU head, counting an eviction: the pool overwrites
//     checkpoints rather than refusing work.
//   * A checkpoint forks: the owner moves to a fresh slot and the old one,
//     filed under the boundary's hash, is pinned for two passes (the pass
//     that builds the batch reading it, and the one that issues it), because
//     freeing it at once let the same pass's admissions pop a slot one
//     kernel would read and write at once.
//   * A checkpoint whose position is not the request's own known resume
//     point (its prompt's end) is a guess: marked speculative, it goes to the
//     LRU head when released, so a shortage spends guesses before the
//     checkpoints that are almost always read back.
//   * A resumable hit is the largest L <= hit whose prefix has a checkpoint
//     and leaves at least the transfer's fork_tokens for the resuming
//     forward to write its own slot whole; 0 (start from scratch) always is.
//     Without it a hit would hand the forward a popped slot holding the
//     previous occupant's state.
//   * Fates: `dropped` counts checkpoints refused for want of a free slot;
//     capacity is read as `evicted` against `kept - num_slots` (equal: more
//     slots buy hits; below: the misses are elsewhere, most likely
//     `orphaned`, whose KV prefix died first).
//
// What differs from the reference:
//   * Cost. Every per-slot call is O(1) or O(log n) in the pool size: the
//     checkpoint LRU is an intrusive doubly linked list indexed by slot, and
//     the vacant half is a hierarchical bitmap that finds the lowest vacant
//     slot in O(log64 n). Only bulk calls (clear_index, Dump) are linear.
//   * Bad input. Every public method that returns a status checks its
//     arguments against the pool's state before it changes anything (the
//     Errors: lines below; see
//     docs/conventions.md). A refused call returns a non-OK absl::Status
//     naming the problem and leaves the pool exactly as it was (Dump()
//     unchanged). Codes: INVALID_ARGUMENT for a malformed argument (negative
//     count, slot out of range, duplicate slot, negative hash),
//     FAILED_PRECONDITION for a call the pool's current state does not allow
//     (releasing a free slot, unpinning an unpinned one), RESOURCE_EXHAUSTED
//     for popping more than is free.
//   * "out of range" means outside [0, num_slots()) unless a method says
//     otherwise. Hashes are in [0, 2^63): a negative one is refused
//     INVALID_ARGUMENT.
//
// Reference quirks kept on purpose, because parity is judged on them:
//   * claim() leaves a checkpoint's hash on the live slot; releasing the slot
//     files it as a checkpoint again.
//   * extend() resets slot_hash of a re-used index without touching
//     hash_to_slot, so an entry can outlive its slot's back-pointer (only
//     after retiring a live slot that carried a hash). CheckInvariants allows
//     exactly that.
//   * A speculative mark may sit on a live slot, or on an index above
//     num_slots() (a live slot relocated away keeps its mark on the old index).
//
// Thread safety: thread-compatible. Const methods may run concurrently; any
// mutation needs external synchronisation (the daemon holds one mutex).
#ifndef STATECACHE_DAEMON_CORE_SLOT_POOL_H_
#define STATECACHE_DAEMON_CORE_SLOT_POOL_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/core/checkpoint_lru.h"
#include "daemon/core/hash_index.h"
#include "daemon/core/huge_page_allocator.h"
#include "daemon/core/pool_op.h"
#include "daemon/core/sequence.h"
#include "daemon/core/slot_retirement.h"
#include "daemon/core/state_transfer.h"
#include "daemon/core/vacant_set.h"

namespace statecache {

class PoolCallObserver;  // pool_call.h

// Which checkpoint a shortage spends (after the vacant slots).
//   kLru           the LRU head: the reference's rule (guesses first, then
//                  the least recently used).
//   kSecondChance  the LRU head, except that a checkpoint resumed from since
//                  it was filed or last passed over is passed over once: it
//                  goes to the tail, its mark cleared, and the next head is
//                  considered (a bounded walk; CLOCK's second chance). A
//                  checkpoint that proved its worth (a shared prefix many
//                  requests resume from) then outlives the ones nothing
//                  read (a single-turn request's continuation).
enum class Eviction { kLru, kSecondChance };
// "lru", "second-chance" (the flag's and AttachResponse's names).
const char* EvictionName(Eviction eviction);
// The inverse. Errors: INVALID_ARGUMENT for another name.
absl::StatusOr<Eviction> ParseEviction(std::string_view name);
struct PoolCall;

// Largest pool the core accepts: slot indices are stored in 32 bits.
inline constexpr int64_t kMaxSlots = int64_t{1} << 30;

// One midstep reservation: the slot a forward will write `position`'s state
// into, to be filed under `hash` when published.
struct Reservation {
  int64_t slot = -1;
  int64_t position = 0;
  int64_t hash = 0;
  friend bool operator==(const Reservation&, const Reservation&) = default;
};

// What `checkpoint` did to the sequence: its committed slot afterwards and the
// slot its next forward reads (-1 when the call did not fork).
struct CheckpointResult {
  int64_t state_slot = -1;
  int64_t state_fork_src = -1;
  friend bool operator==(const CheckpointResult&,
                         const CheckpointResult&) = default;
};

// The reference's checkpoint_fates(): cumulative events. The capacity reading
// is `evicted` against `kept - num_slots` (see the rules above).
struct CheckpointFates {
  int64_t kept = 0;
  int64_t dropped = 0;
  int64_t evicted = 0;
  int64_t orphaned = 0;
  friend bool operator==(const CheckpointFates&,
                         const CheckpointFates&) = default;
};

// The reference's occupancy(): an instantaneous reading.
struct Occupancy {
  int64_t total = 0;   // num_slots
  int64_t used = 0;    // not on the free list (live, pinned, reserved)
  int64_t held = 0;    // free and carrying a checkpoint
  int64_t vacant = 0;  // free and carrying nothing
  friend bool operator==(const Occupancy&, const Occupancy&) = default;
};

// The whole observable state, in the trace format's `dump` order.
struct PoolSnapshot {
  int64_t num_slots = 0;
  std::vector<int64_t> free;          // sorted
  std::vector<int64_t> checkpointed;  // LRU order, head (spent first) first
  std::vector<int64_t> speculative;   // sorted
  std::vector<std::pair<int64_t, int64_t>> hash_to_slot;  // sorted by hash
  std::vector<int64_t> slot_hash;  // one per index ever held, -1 = none
  std::vector<std::pair<int64_t, int64_t>> pinned;  // (slot, count), sorted
  std::vector<int64_t> deferred;                    // sorted
  std::vector<std::pair<int64_t, int64_t>> relocations;  // recorded order
  CheckpointFates fates;
  friend bool operator==(const PoolSnapshot&, const PoolSnapshot&) = default;
};

class SlotPool {
 public:
  // An upper bound on the memory the pool's own bookkeeping takes at
  // `slots` slots (its per-slot state, its hash index sized for a full
  // pool, its reservation and scratch tables), for a caller that must
  // refuse a size the machine cannot hold before allocating it.
  // REQUIRES: slots >= 0.
  static uint64_t BookkeepingBytes(int64_t slots);

  // The reference's constructor. The pool is enabled iff `enabled` and
  // num_slots > 0 at construction (extend never enables it, as in the
  // reference).
  // Errors: INVALID_ARGUMENT num_slots outside [0, kMaxSlots],
  //   hash_block_size < 1, or transfer.copies() (page-copy checkpoints do
  //   not belong here).
  static absl::StatusOr<SlotPool> Create(int64_t num_slots,
                                         StateTransfer transfer,
                                         int64_t hash_block_size = 1,
                                         bool enabled = true);

  SlotPool(SlotPool&&) = default;
  SlotPool& operator=(SlotPool&&) = default;

  int64_t num_slots() const { return num_slots_; }
  bool enabled() const { return enabled_; }
  const StateTransfer& transfer() const { return transfer_; }
  int64_t hash_block_size() const { return hash_block_size_; }
  // Indices the pool has ever had (slot_hash's length in the reference).
  int64_t capacity() const { return static_cast<int64_t>(slots_.size()); }

  // ------------------------------ free list ------------------------------ //

  // Whether `count` slots can be handed out (checkpoints count: pop spends
  // them). The admission gate.
  // Errors: INVALID_ARGUMENT count < 0.
  absl::StatusOr<bool> HasFree(int64_t count = 1) const {
    if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
      return ObservedQuery(PoolOp::kHasFree, count);
    }
    if (ABSL_PREDICT_FALSE(count < 0)) return NegativeCount(count, "has_free");
    return num_free_ >= count;
  }
  int64_t NumFree() const {
    if (ABSL_PREDICT_FALSE(observer_ != nullptr)) return ObservedNumFree();
    return num_free_;
  }
  // Errors (IsFree, HoldsCheckpoint, IsPinned, PinCount): INVALID_ARGUMENT
  //   slot out of range.
  absl::StatusOr<bool> IsFree(int64_t slot) const {
    if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
      return ObservedQuery(PoolOp::kIsFree, slot);
    }
    if (ABSL_PREDICT_FALSE(!InRange(slot))) {
      return SlotOutOfRange(slot, "is_free");
    }
    return Is(slot, kFree);
  }
  // Free and still carrying a checkpoint.
  absl::StatusOr<bool> HoldsCheckpoint(int64_t slot) const {
    if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
      return ObservedQuery(PoolOp::kHoldsCheckpoint, slot);
    }
    if (ABSL_PREDICT_FALSE(!InRange(slot))) {
      return SlotOutOfRange(slot, "holds_checkpoint");
    }
    return Is(slot, kInLru);
  }

  // Hands out one slot: lowest vacant first, else the LRU head checkpoint
  // (evicting it). Clears the slot's speculative mark and checkpoint.
  // Errors: RESOURCE_EXHAUSTED nothing is free.
  absl::StatusOr<int64_t> Pop();
  // `count` pops, in allocation order (element 0 is the committed slot).
  // Errors: INVALID_ARGUMENT count < 0; RESOURCE_EXHAUSTED count >
  //   NumFree().
  absl::StatusOr<std::vector<int64_t>> PopMany(int64_t count);
  // As above, into the caller's storage (no allocation on the hot path).
  // Errors: as above, and INVALID_ARGUMENT out.size() != count.
  absl::Status PopMany(int64_t count, absl::Span<int64_t> out);
  // Takes one specific free slot off the list, checkpoint hash and all.
  // Errors: INVALID_ARGUMENT slot out of range; FAILED_PRECONDITION slot not
  //   free.
  absl::Status Claim(int64_t slot);

  // File `slot` at the LRU head when it is released. No-op when disabled.
  // Errors: INVALID_ARGUMENT slot out of range.
  absl::Status MarkSpeculative(int64_t slot);
  // A guess paid off: clear the mark and, if the slot is a free checkpoint,
  // move it to the LRU tail. No-op when disabled or unmarked.
  // Errors: INVALID_ARGUMENT slot out of range.
  absl::Status Promote(int64_t slot);
  // Hands a slot back: to the LRU (tail, or head if speculative) when it
  // carries a hash, else to the vacant half (clearing its mark).
  // Errors: INVALID_ARGUMENT slot out of range; FAILED_PRECONDITION slot
  //   already free, or pinned (pins go back through ReleasePins, DropReader
  //   or Unpin).
  absl::Status Release(int64_t slot);
  // Release of a whole set; -1 entries are skipped.
  // Errors: INVALID_ARGUMENT an entry (other than -1) out of range, or a
  //   slot named twice; FAILED_PRECONDITION an entry Release would refuse
  //   (free or pinned). None is released then.
  absl::Status ReleaseMany(absl::Span<const int64_t> slots);

  // ------------------------------ resizing ------------------------------- //

  // Adds `count` vacant indices at the top, reusing retired indices'
  // slot_hash entries.
  // Errors: INVALID_ARGUMENT count outside [0, kMaxSlots - num_slots()].
  absl::Status Extend(int64_t count);
  // Gives up the highest index (see SlotRetirement). nullopt when the top
  // cannot go this pass: pinned, or live with nowhere to move it. A live
  // reservation on the top slot moves with it.
  // Errors: FAILED_PRECONDITION num_slots() == 0 (the reference returns
  //   None there).
  absl::StatusOr<std::optional<SlotRetirement>> RetireTop();

  // ------------------------------ lookup --------------------------------- //

  // Whether the pool gates or checkpoints anything for `seq`.
  bool Applies(const Sequence& seq) const {
    if (ABSL_PREDICT_FALSE(observer_ != nullptr)) return ObservedApplies(seq);
    return enabled_ && seq.has_per_req_cache;
  }
  // Largest L <= hit with a resumable checkpoint at L blocks (0 always is).
  // Errors: INVALID_ARGUMENT hit outside [0, block_hashes.size()], or a
  //   negative hash.
  absl::StatusOr<int64_t> ResumableHit(const Sequence& seq, int64_t hit,
                                       absl::Span<const int64_t> block_hashes,
                                       bool assume_checkpointed = false) const;
  // Slot holding the checkpoint for `hash`, or -1.
  // Errors: INVALID_ARGUMENT negative hash.
  absl::StatusOr<int64_t> Lookup(int64_t hash) const {
    if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
      return ObservedCount(PoolOp::kLookup, hash);
    }
    if (ABSL_PREDICT_FALSE(hash < 0)) return NegativeHash(hash, "lookup: hash");
    if (!enabled_) return -1;
    return hash_to_slot_.Find(hash);
  }

  // ------------------------- midstep checkpointing ----------------------- //

  // Pops a destination per (position, hash), stopping (and counting one
  // drop) at the first the free list cannot fill. Empty when the pool does
  // not apply to `seq` or the transfer is not readable_midstep.
  // Errors: INVALID_ARGUMENT a negative hash.
  absl::StatusOr<std::vector<Reservation>> ReserveMidstep(
      const Sequence& seq,
      absl::Span<const std::pair<int64_t, int64_t>> positions);
  // As above, into the caller's storage; returns how many of `out`'s first
  // entries it filled.
  // Errors: as above, and INVALID_ARGUMENT out.size() < positions.size().
  absl::StatusOr<int64_t> ReserveMidstep(
      const Sequence& seq,
      absl::Span<const std::pair<int64_t, int64_t>> positions,
      absl::Span<Reservation> out);
  // Files each reservation under its hash and frees it as a checkpoint.
  // With `seq`, positions other than its anchor are marked speculative
  // (all of them when it has no anchor); with nullopt none are.
  // Each entry must be exactly a reservation ReserveMidstep returned that
  // was neither published, cancelled nor released since.
  // Errors: INVALID_ARGUMENT a slot out of range or named twice;
  //   FAILED_PRECONDITION a slot holding no outstanding reservation, one
  //   reserved for another position or hash, or one that is pinned.
  absl::Status PublishMidstep(absl::Span<const Reservation> reservations,
                              const std::optional<Sequence>& seq);
  // Hands reservations back vacant (their forward never ran).
  // Errors: as PublishMidstep.
  absl::Status CancelMidstep(absl::Span<const Reservation> reservations);

  // ---------------------------- checkpointing ---------------------------- //

  // Fork checkpoint of `seq`'s committed slot under `hash`: the owner moves
  // to a fresh slot, the old one is indexed and pinned for the next batch.
  // Returns the sequence's (state_slot, state_fork_src) afterwards; a call
  // that does not fork (pool not applying, transfer not fork, no committed
  // slot, nothing free: a drop) returns state_slot unchanged and -1.
  // Errors: INVALID_ARGUMENT negative hash or boundary_blocks; and, when
  //   the pool applies, the transfer forks and seq.state_slot >= 0 (even
  //   if nothing is free): INVALID_ARGUMENT seq.state_slot out of range,
  //   FAILED_PRECONDITION seq.state_slot free.
  absl::StatusOr<CheckpointResult> Checkpoint(const Sequence& seq,
                                              int64_t boundary_blocks,
                                              int64_t hash);

  CheckpointFates Fates() const {
    if (ABSL_PREDICT_FALSE(observer_ != nullptr)) return ObservedFates();
    return fates_;
  }
  Occupancy GetOccupancy() const;

  // Relocation log for the caller's copy engine.
  // Errors: INVALID_ARGUMENT src or dst outside [0, capacity()) (an index
  //   the pool has had).
  absl::Status RecordRelocation(int64_t src, int64_t dst);
  std::vector<std::pair<int64_t, int64_t>> TakeRelocations();

  // Drops the checkpoint filed under `hash` (its KV block was evicted),
  // counting an orphan when one was filed. No-op for an unknown hash.
  // Errors: INVALID_ARGUMENT negative hash.
  absl::Status Unindex(int64_t hash);
  // Drops every checkpoint hash. Linear in the index size.
  void ClearIndex();
  // Drops `slot`'s checkpoint, if any. No-op when disabled.
  // Errors: INVALID_ARGUMENT slot out of range.
  absl::Status Invalidate(int64_t slot);

  // -------------------------------- pins --------------------------------- //

  // Holds `slot` off the free list until the forward that reads it ran.
  // Errors: INVALID_ARGUMENT slot out of range; FAILED_PRECONDITION slot
  //   free (the reference pins it anyway).
  absl::Status Pin(int64_t slot, bool reader_is_next_batch = false);
  // Errors: see IsFree.
  absl::StatusOr<bool> IsPinned(int64_t slot) const {
    if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
      return ObservedQuery(PoolOp::kIsPinned, slot);
    }
    if (ABSL_PREDICT_FALSE(!InRange(slot))) {
      return SlotOutOfRange(slot, "is_pinned");
    }
    return slots_[slot].pins > 0;
  }
  absl::StatusOr<int64_t> PinCount(int64_t slot) const {
    if (ABSL_PREDICT_FALSE(observer_ != nullptr)) {
      return ObservedCount(PoolOp::kPinCount, slot);
    }
    if (ABSL_PREDICT_FALSE(!InRange(slot))) {
      return SlotOutOfRange(slot, "pin_count");
    }
    return slots_[slot].pins;
  }
  // Drops one reference without freeing (the caller takes the slot over).
  // Errors: INVALID_ARGUMENT slot out of range; FAILED_PRECONDITION slot
  //   not pinned.
  absl::Status Unpin(int64_t slot);
  // A reader is gone before it read: drop its pin and free the slot if it
  // was the last. No-op for -1 or an unpinned slot (the pin clock already
  // returned it: the reference's documented backstop).
  // Errors: INVALID_ARGUMENT slot other than -1 out of range.
  absl::Status DropReader(int64_t slot);
  // The pin clock: frees every pinned slot not deferred, in slot order;
  // deferred ones stay pinned one more pass.
  void ReleasePins();

  // One caller's share of the pin clock, for a daemon that keeps a clock per
  // session: drops `count` of `slot`'s pins and frees it when none remain
  // (as ReleasePins would).
  // Errors: INVALID_ARGUMENT slot out of range or count < 1;
  //   FAILED_PRECONDITION count > PinCount(slot).
  absl::Status ReleasePin(int64_t slot, int64_t count);
  // Ends `slot`'s deferral (its next-batch reader has been built), as
  // ReleasePins does for a deferred pin. No-op for a slot not deferred.
  // Errors: INVALID_ARGUMENT slot out of range.
  absl::Status EndDeferral(int64_t slot);

  // Checkpoints currently indexed (hash_to_slot's size).
  int64_t NumIndexed() const { return hash_to_slot_.size(); }

  // --------------------------- spent checkpoints ------------------------- //

  // A checkpoint an eviction spent: its slot (still holding its bytes until
  // the caller lets anything write the slot), the hash it was filed under,
  // and whether it was a guess.
  struct Spent {
    int64_t slot = -1;
    int64_t hash = -1;
    bool speculative = false;
  };
  // While on, each eviction (Pop, PopMany, ReserveMidstep, Checkpoint and
  // a shrink's spending) also appends what it spent to spent(), in order,
  // until ClearSpent. The pool's decisions are the same either way: the log
  // is for a host tier to keep the bytes.
  void LogSpent(bool on) { log_spent_ = on; }
  const std::vector<Spent>& spent() const { return spent_; }
  void ClearSpent() { spent_.clear(); }

  // While on, each hash filed under a slot (a fork checkpoint, a publish)
  // is appended to indexed(), until ClearIndexed: so the caller can
  // checksum each checkpoint's bytes when it is published (a shrink moving
  // a checkpoint moves its bytes with it). Decisions are unchanged.
  void LogIndexed(bool on) { log_indexed_ = on; }
  const std::vector<int64_t>& indexed() const { return indexed_; }
  void ClearIndexed() { indexed_.clear(); }

  // --------------------------- warm restart ------------------------------ //

  // The checkpoints a restarted daemon could bring back: the free ones in
  // LRU order (head first), then the pinned ones in slot order (their
  // forward was about to read them; with no request left they would be
  // released, and so are appended as releases would). `speculative` is the
  // slot's mark. Live slots are left out, whatever hash they carry: their
  // owner writes them. O(checkpoints + pinned).
  std::vector<Spent> SavableCheckpoints() const;
  // Files `hash` under the vacant `slot` as a free checkpoint at the LRU
  // tail (speculative: marked so, still at the tail, so a sequence of
  // restores rebuilds a saved LRU order exactly). Counts no fate.
  // Errors: FAILED_PRECONDITION the pool is disabled, the slot is not
  //   vacant (free and carrying no hash), or the hash is already filed;
  //   INVALID_ARGUMENT slot out of range or negative hash.
  absl::Status RestoreCheckpoint(int64_t slot, int64_t hash, bool speculative);

  // Default kLru. A pool traced by a call observer must keep kLru (the
  // trace format has no eviction rule; replays use the reference's).
  void SetEviction(Eviction eviction) { eviction_ = eviction; }
  Eviction eviction() const { return eviction_; }

  // ------------------------------ observing ------------------------------ //

  // Tells `observer` (not owned; null: none) of the pool as it is, then of
  // every call made on it from here on, after each ran (pool_call.h): the
  // calls the trace format has a line for, the pin clock's per-session
  // calls and RestoreCheckpoint. A call the pool makes on itself is not
  // told; nor are those the format has no line for (the configuration's
  // accessors, NumIndexed, the spent and indexed logs, SavableCheckpoints,
  // CheckInvariants). Decisions are the same either way. While one is set,
  // const calls need external synchronisation too.
  void SetCallObserver(PoolCallObserver* observer);
  PoolCallObserver* call_observer() const { return observer_; }

  // ------------------------------ debugging ------------------------------ //

  PoolSnapshot Dump() const;
  // Verifies every structural invariant (O(capacity)). Meant for tests,
  // fuzzers and debug builds.
  // Errors: INTERNAL naming the first broken one.
  absl::Status CheckInvariants() const;

 private:
  SlotPool(int64_t num_slots, StateTransfer transfer, int64_t hash_block_size,
           bool enabled);

  bool InRange(int64_t slot) const { return slot >= 0 && slot < num_slots_; }
  absl::Status CheckSlot(int64_t slot, const char* what) const {
    if (ABSL_PREDICT_FALSE(!InRange(slot))) {
      return SlotOutOfRange(slot, what);
    }
    return absl::OkStatus();
  }
  ABSL_ATTRIBUTE_NOINLINE absl::Status SlotOutOfRange(int64_t slot,
                                                      const char* what) const;
  static absl::Status CheckHash(int64_t hash, const char* what) {
    if (ABSL_PREDICT_FALSE(hash < 0)) return NegativeHash(hash, what);
    return absl::OkStatus();
  }
  // CheckHash for hash_of(item) of each item (defined in slot_pool.cc).
  template <typename Item, typename HashOf>
  static absl::Status CheckHashes(absl::Span<const Item> items, HashOf hash_of,
                                  const char* what);
  ABSL_ATTRIBUTE_NOINLINE static absl::Status NegativeHash(int64_t hash,
                                                           const char* what);
  ABSL_ATTRIBUTE_NOINLINE static absl::Status NegativeCount(int64_t count,
                                                            const char* what);
  absl::Status CheckReservations(absl::Span<const Reservation> reservations,
                                 const char* what) const;

  // The calls with an observer set (slot_pool_observe.cc): each makes the
  // call with the observer unset, then tells it.
  absl::StatusOr<bool> ObservedQuery(PoolOp op, int64_t arg) const;
  absl::StatusOr<int64_t> ObservedCount(PoolOp op, int64_t arg) const;
  int64_t ObservedNumFree() const;
  bool ObservedApplies(const Sequence& seq) const;
  CheckpointFates ObservedFates() const;
  // Runs `run` (the call itself) with the observer unset, then tells it of
  // `call` and what `run` returned (slot_pool_observed.h).
  template <typename Run>
  auto Observed(const PoolCall& call, Run run) const -> decltype(run());

  // Unchecked primitives: the reference's methods of the same names.
  int64_t PopUnchecked();
  int64_t PopVacant();
  // The checkpoint kSecondChance spends, starting from the LRU head.
  int64_t SecondChance(int64_t head);
  void ClaimUnchecked(int64_t slot);
  void ReleaseUnchecked(int64_t slot);
  void MarkSpeculativeUnchecked(int64_t slot);
  void PinUnchecked(int64_t slot, bool reader_is_next_batch);
  void UnpinUnchecked(int64_t slot);
  void InvalidateUnchecked(int64_t slot) {
    if (enabled_ && slots_[slot].hash != -1) InvalidateHashed(slot);
  }
  void InvalidateHashed(int64_t slot);
  void SetHash(int64_t slot, int64_t hash);
  void Index(int64_t hash, int64_t slot);
  void SpendCheckpoint(int64_t slot);
  int64_t TakeRelocationTarget(int64_t exclude);
  void RehomeCheckpoint(int64_t src, int64_t dst);
  void GrowTo(int64_t capacity);
  static std::optional<int64_t> AnchorOf(const Sequence* seq);

  // Everything the pool knows about one index, in one record, so that a call
  // touching a slot touches one cache line (this is what keeps a pool of a
  // million slots as cheap per call as one of a thousand).
  struct SlotState {
    int64_t hash = -1;        // slot_hash: -1 = carries no checkpoint
    LruLinks lru;             // links in checkpointed_ when kInLru
    int32_t pins = 0;         // fork-source pins; 0 = not pinned
    int32_t pinned_pos = -1;  // index in pinned_ while pinned
    uint8_t flags = 0;
  };
  enum : uint8_t {
    kFree = 1 << 0,         // on the free list
    kSpeculative = 1 << 1,  // mark_speculative
    kDeferred = 1 << 2,     // a pin's reader is the next batch
    kReserved = 1 << 3,     // holds an outstanding midstep reservation
    kInLru = 1 << 4,        // free and carrying a hash: in checkpointed_
    kResumed = 1 << 5,      // resumed from since filed (kSecondChance)
  };
  bool Is(int64_t slot, uint8_t flag) const {
    return (slots_[slot].flags & flag) != 0;
  }
  void Set(int64_t slot, uint8_t flag) { slots_[slot].flags |= flag; }
  void Clear(int64_t slot, uint8_t flag) {
    slots_[slot].flags &= static_cast<uint8_t>(~flag);
  }
  // Marks `slot` in a scratch generation: true if it was already marked in
  // this one (duplicate detection without allocating).
  bool SeenBefore(int64_t slot) const;
  void NewScratchGeneration() const;

  // Below this many slots the records and the index stay in cache, and
  // prefetching them only costs the address computation (hashing the key).
  static constexpr int64_t kPrefetchMinSlots = int64_t{1} << 15;
  bool Prefetches() const { return capacity() >= kPrefetchMinSlots; }
  bool enabled_;
  int64_t num_slots_;
  StateTransfer transfer_;
  int64_t hash_block_size_;

  // Per index; size() == capacity(). Huge pages: see huge_page_allocator.h.
  std::vector<SlotState, HugePageAllocator<SlotState>> slots_;
  // Reservation (position, hash) per index, valid while kReserved.
  std::vector<std::pair<int64_t, int64_t>> reservation_;
  int64_t num_free_ = 0;
  VacantSet vacant_;  // free slots with hash == -1
  IntrusiveLru<SlotState, decltype(slots_)>
      checkpointed_;                   // free slots with a hash, LRU order
  std::vector<int32_t> pinned_;        // slots with pins > 0, unordered
  std::vector<int32_t> sort_scratch_;  // ReleasePins' room to sort pinned_
  HashIndex hash_to_slot_;
  std::vector<std::pair<int64_t, int64_t>> relocations_;
  bool log_spent_ = false;
  Eviction eviction_ = Eviction::kLru;
  std::vector<Spent> spent_;
  bool log_indexed_ = false;
  std::vector<int64_t> indexed_;
  CheckpointFates fates_;
  // Told of each call while set; cleared for the length of an observed
  // call, so the calls it makes on itself are not told (mutable: const
  // calls are told too).
  mutable PoolCallObserver* observer_ = nullptr;
  // Scratch for SeenBefore (mutable: used by const validation).
  mutable std::vector<uint32_t> scratch_;
  mutable uint32_t scratch_generation_ = 0;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_SLOT_POOL_H_

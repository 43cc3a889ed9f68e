// SlotMemory: the pool's verbs. Owns the SlotPool (which slots are live,
// which hold a checkpoint, the hash index), the table of who holds each live
// slot, and the Device seam (the state memory and its copy engine), and
// offers each thing a scheduler's request does to them as one verb: admit,
// checkpoint, reserve / publish / cancel, adopt, release, snapshot, copy,
// grow, and one step of a shrink.
//
// This header is the specification of those verbs. The rules come from the
// reference pool (docs/pool_rules.md summarises them, and how each verb is
// made of pool calls) and the scheduler that drives it (ATOM's
// BlockManager); the pool below keeps the reference's decisions exactly
// (daemon/core/slot_pool.h), and each verb here makes the calls that
// scheduler makes, in its order, so a run of verbs is a run of the
// reference.
//
// Every verb checks everything it can refuse before it changes anything: a
// non-OK status means nothing changed (the pool's Dump, the owner table and
// the holding are as they were), unless its Errors: line says otherwise.
// Codes: INVALID_ARGUMENT for a malformed argument (naming it),
// FAILED_PRECONDITION for a verb the state does not allow,
// RESOURCE_EXHAUSTED for too few free slots, INTERNAL for a device failure
// or a broken invariant (a bug: the message names the call). REQUIRES: and
// Errors: are as docs/conventions.md says.
//
// Every verb that takes a holding REQUIRES one the verbs have kept (its
// slots, reservations and fork source what the pool holds for it). Given
// another, the pool's own checks may refuse the call with the pool's code;
// those refusals are listed below only where they are a verb's only ones.
//
// Who holds what is the caller's to say, through a SlotHolding it owns (the
// service's Request is one); SlotMemory keeps a pointer to it per slot so a
// shrink can move a live slot under its holder. Pins are counted here as
// the pool counts them; which session's clock returns them is the caller's
// (daemon/service/sessions.h).
//
// Thread safety: thread-compatible; the daemon calls it under its one mutex.
#ifndef STATECACHE_DAEMON_CORE_SLOT_MEMORY_H_
#define STATECACHE_DAEMON_CORE_SLOT_MEMORY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/core/host_tier.h"
#include "daemon/core/sequence.h"
#include "daemon/core/slot_pool.h"
#include "daemon/device/device.h"

namespace statecache {

// What a request holds in the pool. Owned by the caller; SlotMemory reads
// and updates it only inside a verb naming it.
struct SlotHolding {
  // Element 0 is the committed state, 1.. speculative rollback slots.
  std::vector<int64_t> slots;
  // The checkpoint slot this request's next forward reads (pinned for it),
  // or -1.
  int64_t fork_src = -1;
  // Outstanding midstep reservations (reserved, not yet published or
  // cancelled).
  std::vector<Reservation> reservations;
  // Tokens so far, and the one position known to be a resume point (the
  // prompt's end) or 0: what the pool reads through the reference's `seq`.
  int64_t num_tokens = 0;
  int64_t anchor_pos = 0;
};

// How an admission began.
//   kCold  no resume was asked (kv_hit_blocks == 0): fresh slots.
//   kFork  resumed: fresh slots, and the checkpoint pinned as fork_src for
//          the first forward to read.
//   kAdopt resumed in the checkpoint's own slot (too few free slots to
//          fork): the slot stops being a checkpoint.
//   kMiss  a resume was asked and no usable checkpoint found: fresh slots.
//   kTier  resumed from the host tier (its entry went deeper than any
//          checkpoint on the device): fresh slots, the entry's image copied
//          into the committed one, which the first forward continues in,
//          as after an adoption. The pool sees what a miss does to it.
enum class ResumeOutcome { kCold, kFork, kAdopt, kMiss, kTier };

struct AdmitSpec {
  int32_t width = 1;  // slots: the committed one plus speculative
  int64_t num_tokens = 0;
  int64_t anchor_pos = 0;
  int32_t kv_hit_blocks = 0;  // leading blocks the KV cache holds
  absl::Span<const int64_t> block_hashes;
};

struct Admission {
  ResumeOutcome outcome = ResumeOutcome::kCold;
  int64_t blocks_resumed = 0;
};

// A checkpoint that forked: the holder moved to `state_slot`, and reads the
// checkpoint `fork_src` next. `replaced_fork_src` is the source it read
// before (its pin stays, on the caller's clock), or -1. A checkpoint that
// did not fork (nothing free, the pool not applying) is kept == false.
struct CheckpointOutcome {
  bool kept = false;
  int64_t state_slot = -1;
  int64_t fork_src = -1;
  int64_t replaced_fork_src = -1;
};

struct SnapshotOutcome {
  bool kept = false;  // false: nothing free, counted as dropped
  int64_t slot = -1;
};

// A live slot a shrink moved: holding->slots[index] went from `from` to `to`.
struct Relocation {
  SlotHolding* holding = nullptr;
  int32_t index = 0;
  int64_t from = -1;
  int64_t to = -1;
};

// Why slot contents were copied: within the region, or (demotion,
// promotion) between it and the host tier.
enum class CopyReason {
  kRelocation,
  kCopy,
  kSnapshot,
  kDemotion,
  kPromotion,
  kCount
};
// "relocation", "copy", "snapshot", "demotion", "promotion" (metric labels
// and messages).
const char* CopyReasonName(CopyReason reason);

// Told of each batch the copy engine ran. Calls arrive under the caller's
// lock: implementations must be cheap.
class CopyObserver {
 public:
  virtual ~CopyObserver() = default;
  virtual void OnCopy(CopyReason reason, int64_t bytes, double seconds) {}
};

class SlotMemory {
 public:
  // `device` may be null: slot decisions only (copy and snapshot refused,
  // relocations are bookkeeping).
  // Errors: INVALID_ARGUMENT num_slots outside [1, kMaxSlots],
  //   hash_block_size < 1, transfer.copies(), or a device whose num_slots()
  //   is not num_slots (the message names the mismatch).
  static absl::StatusOr<SlotMemory> Create(int64_t num_slots,
                                           StateTransfer transfer,
                                           int64_t hash_block_size,
                                           std::shared_ptr<Device> device);

  // An upper bound on the memory the pool's bookkeeping and the owner table
  // take at `slots` slots (SlotPool::BookkeepingBytes and one Owner each).
  // REQUIRES: slots >= 0.
  static uint64_t BookkeepingBytes(int64_t slots) {
    return SlotPool::BookkeepingBytes(slots) +
           static_cast<uint64_t>(slots) * sizeof(Owner);
  }

  SlotMemory(SlotMemory&&) = default;
  SlotMemory& operator=(SlotMemory&&) = default;

  // Not owned; must outlive this.
  void AddCopyObserver(CopyObserver* observer) {
    copy_observers_.push_back(observer);
  }

  // Tells `observer` (not owned, must outlive this; null: none) of every
  // call the verbs and their callers make on the pool from here on
  // (SlotPool::SetCallObserver): what daemon/replay/trace_recorder.h writes
  // as a pool trace.
  void SetPoolObserver(PoolCallObserver* observer) {
    pool_.SetCallObserver(observer);
  }

  const SlotPool& pool() const { return pool_; }
  Device* device() const { return device_.get(); }
  int64_t num_slots() const { return pool_.num_slots(); }

  // ------------------------------------------------------------ admission

  // Gives `holding` spec.width slots, resuming from the deepest checkpoint
  // of the first kv_hit_blocks hashes when one is usable: forked when
  // enough slots are free beside it (the checkpoint pinned and recorded as
  // holding.fork_src), else adopted (its slot becomes holding.slots[0] and
  // stops being a checkpoint). A checkpoint whose slot is live (adopted by a
  // request still running in it) cannot be read: a miss.
  // REQUIRES: holding holds nothing (no slots, reservations or fork_src).
  // Errors: INVALID_ARGUMENT width outside [1, num_slots()], negative
  //   num_tokens/anchor_pos, kv_hit_blocks outside [0, hashes], a negative
  //   hash; RESOURCE_EXHAUSTED fewer than width slots free.
  absl::StatusOr<Admission> Admit(SlotHolding& holding, const AdmitSpec& spec);

  // Fork checkpoint of holding.slots[0] under `hash` (the reference's
  // checkpoint): the holder moves to a fresh slot and reads the old one,
  // indexed and pinned for the next batch, as holding.fork_src. `anchor_pos`
  // (when not 0) replaces the holding's for this call. A holding with no
  // slots forks nothing (kept == false).
  // Errors: INVALID_ARGUMENT negative anchor_pos, boundary_blocks or hash.
  absl::StatusOr<CheckpointOutcome> Checkpoint(SlotHolding& holding,
                                               int64_t anchor_pos,
                                               int64_t boundary_blocks,
                                               int64_t hash);

  // ------------------------------------------------------------ midstep

  // Reserves a destination slot per (position, hash) for a forward to write
  // midstep states into, superseding (cancelling) the holding's earlier
  // unpublished ones. Stops, counting one drop, at the first the free list
  // cannot fill; empty when the transfer does not allow midstep reads.
  // Errors: INVALID_ARGUMENT a negative hash (nothing superseded).
  absl::StatusOr<absl::Span<const Reservation>> Reserve(
      SlotHolding& holding,
      absl::Span<const std::pair<int64_t, int64_t>> positions);
  // Files every outstanding reservation under its hash as a checkpoint
  // (positions other than the anchor marked speculative unless keep_all).
  // Returns how many (0, and OK, with none outstanding).
  // Errors: only for a holding whose reservations are not the pool's
  //   outstanding ones (a broken holding; nothing changes):
  //   SlotPool::PublishMidstep's INVALID_ARGUMENT (a slot out of range or
  //   named twice) or FAILED_PRECONDITION (a slot not reserved, reserved
  //   for another position or hash, or pinned).
  absl::StatusOr<int32_t> Publish(SlotHolding& holding, bool keep_all);
  // Hands the outstanding reservations back vacant. Returns how many (0,
  // and OK, with none outstanding).
  // Errors: as Publish (SlotPool::CancelMidstep's).
  absl::StatusOr<int32_t> Cancel(SlotHolding& holding);

  // ------------------------------------------------------------ the rest

  // The holder takes its fork source over as its committed slot (ATOM's
  // cancel_state_fork): its fresh slot goes back, the source stops being a
  // checkpoint, its pin goes. Returns the new holding.slots[0].
  // REQUIRES: holding.slots non-empty; the one pin on fork_src is the
  //   caller's clock's (the caller forgets it).
  // Errors: FAILED_PRECONDITION no fork source, or the pool holds a number
  //   of pins on it other than one (another reader still reads it).
  absl::StatusOr<int64_t> AdoptForkSource(SlotHolding& holding);

  // Everything the holding holds goes back: reservations vacant, slots to
  // the pool (a checkpointed slot's hash filed again), and, when
  // `drop_reader`, its pin on fork_src (the caller's clock still held it).
  // Leaves the holding empty.
  // REQUIRES: when drop_reader, the caller's clock holds a pin on fork_src.
  // Errors: only for a broken holding. Its reservations not the pool's
  //   outstanding ones: as Cancel (INVALID_ARGUMENT or FAILED_PRECONDITION;
  //   nothing changes). INTERNAL when the pool then refuses the slots'
  //   release (the reservations are cancelled by then) or the pin's drop
  //   (the slots are released by then, fork_src left set).
  absl::Status Release(SlotHolding& holding, bool drop_reader);

  // The holder will not read its fork source after all (its session ended
  // while its slots stay held): its pin on fork_src goes, freeing the slot
  // if it was the last, and fork_src becomes -1. No-op without one.
  // REQUIRES: the caller's clock held that pin.
  // Errors: INVALID_ARGUMENT fork_src out of the pool's range (a broken
  //   holding; nothing changes).
  absl::Status DropForkSource(SlotHolding& holding);

  // Copies the committed slot into a fresh one filed under `hash` at
  // `position` (reserve, copy, publish: the midstep rules apply).
  // Errors: FAILED_PRECONDITION no state memory, or the transfer does not
  //   allow midstep reads; INVALID_ARGUMENT negative hash; the device's code
  //   (INTERNAL for a device failure) when the copy fails: nothing is filed
  //   or counted kept, the destination goes back vacant. The one change a
  //   failed copy leaves: a destination taken from the LRU head stays
  //   evicted (counted so), since the copy may have written part of it.
  absl::StatusOr<SnapshotOutcome> Snapshot(const SlotHolding& holding,
                                           int64_t position, int64_t hash);
  // Copies holding.slots[from_index] onto holding.slots[to_index]. Returns
  // the bytes copied.
  // Errors: FAILED_PRECONDITION no state memory; INVALID_ARGUMENT indices
  //   not two different ones of the holding's slots; the device's code
  //   (INTERNAL for a device failure; the destination's bytes are then not
  //   vouched for, the pool unchanged).
  absl::StatusOr<uint64_t> Copy(const SlotHolding& holding, int32_t from_index,
                                int32_t to_index);

  // ------------------------------------------------------------ index

  // The reference's resumable_hit / lookup (read-only), and where the
  // host tier would go deeper: `tier_blocks` is the resumable depth an
  // admission would take from the tier (0 when the device's is as deep).
  // Errors (ResumableHit): INVALID_ARGUMENT negative num_tokens,
  //   kv_hit_blocks outside [0, hashes.size()], or a negative hash.
  // Errors (Lookup): INVALID_ARGUMENT negative hash.
  struct Resumable {
    int64_t blocks = 0;       // the device index's (the reference's answer)
    int64_t tier_blocks = 0;  // deeper, from the tier; 0 = none
  };
  absl::StatusOr<Resumable> ResumableHit(int64_t num_tokens,
                                         int32_t kv_hit_blocks,
                                         absl::Span<const int64_t> hashes,
                                         bool assume_checkpointed) const;
  absl::StatusOr<int64_t> Lookup(int64_t hash) const {
    return pool_.Lookup(hash);
  }
  // Whether the host tier holds `hash` (false while it is off).
  bool InHostTier(int64_t hash) const {
    return tier_.has_value() && tier_->Find(hash) >= 0;
  }
  // Drops the checkpoints filed under `hashes` (their KV blocks were
  // evicted), on the device and in the host tier. Returns how many device
  // checkpoints were orphaned.
  // Errors: INVALID_ARGUMENT a negative hash (none dropped).
  absl::StatusOr<int32_t> Unindex(absl::Span<const int64_t> hashes);
  void ClearIndex();
  // Drops the checkpoint filed under `hash` on `slot`, which a deeper one
  // of the same request replaces (placement advice's continuation), from
  // the device's index and the host tier. A slot still pinned keeps its pin
  // (its reader reads on) and goes vacant, not back to the LRU, when that
  // ends. Counted as none of the reference's fates. Returns whether the
  // device still had it there (false, nothing changed on the device: the
  // hash is filed elsewhere, or was spent, adopted or unindexed since).
  // Errors: INVALID_ARGUMENT a negative hash.
  absl::StatusOr<bool> Supersede(int64_t hash, int64_t slot);

  // ------------------------------------------------------------ host tier
  //
  // While on, a checkpoint an eviction spends is copied into the tier
  // before its slot can be written (FlushDemotions), and an admission whose
  // prefix goes deeper in the tier than on the device resumes from it
  // (ResumeOutcome::kTier). The device pool's rules are untouched: it is
  // told of a tier resume what it is told of a miss.

  // Room for `bytes` of images (whole slots; 0 turns the tier off and drops
  // its entries). Keeps the most recent entries that fit, their images
  // copied into the new memory.
  // Errors: FAILED_PRECONDITION (bytes > 0) without state memory, or with
  //   a transfer that keeps no state (replay); RESOURCE_EXHAUSTED / INTERNAL
  //   the memory cannot be had; INVALID_ARGUMENT room for no slot at all.
  //   The tier is unchanged on any error.
  absl::Status ResizeHostTier(uint64_t bytes);
  struct HostTierStats {
    uint64_t capacity_bytes = 0;
    uint64_t held_bytes = 0;
    int64_t entries = 0;
    HostTierCounts counts;
    int64_t promotions = 0;  // admissions resumed from the tier
    // Images that could not be copied (the device failed): a failed
    // demotion drops the checkpoint, a failed promotion is a miss.
    int64_t demotions_failed = 0;
    int64_t promotions_failed = 0;
  };
  HostTierStats host_tier_stats() const;
  // The tier's hashes in LRU order, head first (empty while off).
  std::vector<int64_t> HostTierDump() const {
    return tier_.has_value() ? tier_->Dump() : std::vector<int64_t>{};
  }
  // Copies the checkpoints evictions spent since the last flush into the
  // tier, in one batched copy. Every verb that writes a slot's bytes calls
  // it first; the caller calls it before replying (after which the engine
  // writes the slots it was handed). No-op while the tier is off.
  // Errors: the device's (the batch's checkpoints are then not filed).
  absl::Status FlushDemotions();

  // ------------------------------------------------------------ warm restart
  //
  // What a daemon restarted on the same state directory needs to come back
  // with its checkpoints: each one's hash, where its bytes are, its LRU
  // place and mark, and a checksum of its bytes taken when it was published
  // (device) or demoted (host tier). The state directory
  // (daemon/service/state_dir.h) writes it; Restore brings it back,
  // dropping every checkpoint whose bytes do not match their checksum.

  // From now on each checkpoint is checksummed when it is published
  // (SealCheckpoints) and each tier image when it is demoted, and a
  // promotion from the tier checks its image first (a mismatch is a miss).
  // Errors: FAILED_PRECONDITION without state memory.
  absl::Status EnableChecksums();
  bool checksums_enabled() const { return checksums_on_; }
  // Checksums the bytes of the checkpoints filed since the last call (one
  // batched read). The caller calls it at the end of every pass, after
  // FlushDemotions, before the reply lets the engine write anything; the
  // shrink step calls it itself. No-op unless checksums are enabled.
  // Errors: the device's (those checkpoints then carry no checksum and are
  // not saved).
  absl::Status SealCheckpoints();

  // One saved checkpoint. `location` is its slot (device) or tier entry.
  struct SavedCheckpoint {
    int64_t hash = -1;
    int64_t location = -1;
    bool speculative = false;
    uint64_t checksum = 0;
    friend bool operator==(const SavedCheckpoint&,
                           const SavedCheckpoint&) = default;
  };
  // The device's free and pinned checkpoints (SlotPool::SavableCheckpoints'
  // order) and the tier's entries (LRU order, head first), each with its
  // checksum; those without one (published before checksums were enabled,
  // or whose checksum read failed) are left out. O(checkpoints).
  struct Saved {
    std::vector<SavedCheckpoint> device;
    std::vector<SavedCheckpoint> tier;
  };
  Saved SaveCheckpoints() const;
  // Copies the device checkpoints of `saved` into one staging memory,
  // image k of saved[k] at k * bytes_per_slot (for a backend whose memory
  // dies with the process, so its checkpoints are written out at shutdown).
  // Each image is checked against its checksum; `saved` keeps only those
  // that match (their images packed in order).
  // Errors: FAILED_PRECONDITION without state memory; the device's.
  absl::StatusOr<std::unique_ptr<HostStaging>> ReadCheckpointImages(
      std::vector<SavedCheckpoint>& saved);
  // The images of the tier entries `tier` names (image k of tier[k]), as
  // ReadCheckpointImages does for the device: each checked against its
  // checksum, `tier` keeping the ones that match, renumbered 0, 1, ....
  // Empty while the tier is off.
  std::string CopyTierImages(std::vector<SavedCheckpoint>& tier);
  // The tier's image memory (entry e at e * bytes_per_slot), or null while
  // the tier is off: for tests that read or damage images at rest.
  const HostStaging* host_tier_memory() const { return tier_memory_.get(); }

  // A checkpoint to bring back: its saved record and its image (the slot's
  // bytes_per_slot bytes, laid out as SlotImage says), which must stay
  // readable for the call.
  struct RestoreImage {
    SavedCheckpoint saved;
    const char* bytes = nullptr;
  };
  struct RestoreCounts {
    int64_t device = 0;        // filed as device checkpoints
    int64_t tier = 0;          // filed in the host tier
    int64_t bad_checksum = 0;  // bytes that do not match: dropped
    int64_t no_room = 0;       // beyond the pool's or the tier's room
    int64_t duplicate = 0;     // a hash already brought back
    friend bool operator==(const RestoreCounts&,
                           const RestoreCounts&) = default;
  };
  // Files `device` (in order: the last ones kept when they are more than
  // the slots) as free checkpoints in slots 0.., their marks and LRU order
  // as saved, their images copied in batches; then `tier` (in order, the
  // last ones kept when the tier is smaller) into the host tier, when on.
  // Every image is checked against its checksum before anything is filed;
  // one that does not match is dropped and counted, never indexed.
  // Checksums are enabled by the call.
  // Errors: FAILED_PRECONDITION without state memory, or when anything is
  //   held, pinned, reserved or filed already (only a fresh SlotMemory
  //   restores); INVALID_ARGUMENT a negative hash or a null image; the
  //   device's (nothing is filed then).
  absl::StatusOr<RestoreCounts> Restore(absl::Span<const RestoreImage> device,
                                        absl::Span<const RestoreImage> tier);

  // ------------------------------------------------------------ pins

  // One clock's share of the pin clock, in the order the caller gives:
  // drops `count` pins on `slot` (freeing it when none remain).
  // REQUIRES: those pins are the caller's clock's.
  // Errors: SlotPool::ReleasePin's: INVALID_ARGUMENT slot out of range or
  //   count < 1; FAILED_PRECONDITION count above the pool's pins on slot.
  absl::Status ReturnPins(int64_t slot, int32_t count) {
    return pool_.ReleasePin(slot, count);
  }
  // The slot's next-batch reader has been built: its pin returns at the
  // clock's next tick rather than this one.
  // Errors: INVALID_ARGUMENT slot out of range.
  absl::Status EndDeferral(int64_t slot) { return pool_.EndDeferral(slot); }

  // ------------------------------------------------------------ resizing

  // Grows to `target` slots: the memory first, so a slot never lacks its
  // bytes; if the memory cannot follow, nothing changes.
  // Errors: INVALID_ARGUMENT target outside (num_slots(), kMaxSlots]; the
  //   device's when the memory cannot grow (nothing changes).
  absl::Status Grow(int64_t target);

  // One step of a shrink towards `target`: retires the top slot while it can
  // (a free one goes; a checkpoint, or a live slot whose holder
  // `may_move_live` accepts, moves down to the lowest vacant slot, holder
  // updated and reported in `moved`), copies the moved slots' bytes in
  // batches (a slot moved twice flushes the batch first, so each batch is
  // order-independent), and resizes the memory. Stops at the target, at a
  // top slot whose reservation's forward may be writing it, at a live one
  // `may_move_live` refuses (its holder's forward may be writing it: the
  // caller accepts a holder only between its forwards), or at one that is
  // pinned or has nowhere to go.
  struct ShrinkProgress {
    bool reached = false;  // num_slots() == target
    int64_t relocated = 0;
    // A failure after the pool moved on: the pool's decisions stand (the
    // step is not all-or-nothing once a slot is retired). When a batch's
    // copy failed, the checkpoints it moved are dropped from the index (a
    // lookup misses them; they are not counted evicted) and the live slots
    // it moved hold unspecified bytes (their holders are updated and told,
    // as for any move); the message says how many of each. OK otherwise.
    absl::Status failure;
  };
  ShrinkProgress ShrinkStep(
      int64_t target, std::vector<Relocation>& moved,
      absl::FunctionRef<bool(const SlotHolding&)> may_move_live);

  // ------------------------------------------------------------ owners

  struct Owner {
    SlotHolding* holding = nullptr;  // null: free, checkpoint or pinned only
    int32_t index = -1;              // in holding->slots; -1 a reservation
  };
  // REQUIRES: slot >= 0.
  Owner OwnerOf(int64_t slot) const {
    return slot < static_cast<int64_t>(owners_.size()) ? owners_[slot]
                                                       : Owner{};
  }
  // Slots the owner table names (live slots and reservations).
  int64_t NumOwned() const;

 private:
  SlotMemory(SlotPool pool, std::shared_ptr<Device> device);

  Sequence SequenceOf(const SlotHolding& holding) const;
  void SetOwner(int64_t slot, SlotHolding* holding, int32_t index);
  void ClearOwner(int64_t slot);
  // Runs one batch on the device, reporting it to the observers.
  // Errors: the device's code, its message prefixed with the reason and
  //   the pairs.
  absl::StatusOr<uint64_t> RunCopy(
      absl::Span<const std::pair<int64_t, int64_t>> pairs, CopyReason reason);
  // ShrinkStep's copy of the current batch failed: unfiles every checkpoint
  // the batch moved (their bytes did not follow them), wherever `pending`
  // (the retirement that flushed the batch, or null) left it, adding how
  // many to `dropped`. Errors: INTERNAL, a broken invariant.
  absl::Status DropUncopied(const SlotRetirement* pending, int64_t& dropped);
  // A call the verb checked cannot fail; if it does, the verb reports the
  // broken invariant rather than going on.
  static absl::Status Broken(const absl::Status& status, const char* call);

  // Admit's tier resume: a miss's slots, the entry's image copied into the
  // committed one. kMiss when the copy failed.
  absl::StatusOr<Admission> AdmitFromTier(SlotHolding& holding,
                                          const AdmitSpec& spec, int64_t blocks,
                                          int64_t entry);
  // Runs one image batch, reporting it to the observers.
  absl::StatusOr<uint64_t> RunImageCopy(absl::Span<const SlotImage> images,
                                        CopyReason reason);

  // Checksums each image at images_[k] of staging `memory` into out[k].
  void ChecksumImages(const HostStaging& memory,
                      absl::Span<const SlotImage> images,
                      absl::Span<uint64_t> out) const;
  // The checksum of the tier image of `entry` as it is now.
  uint64_t TierChecksum(int64_t entry) const;
  // Whether the tier image of `entry` matches its checksum (true while
  // checksums are off).
  bool TierImageIntact(int64_t entry) const;
  // Checksums the checkpoints filed under `hashes` now (one batched read).
  absl::Status SealHashes(absl::Span<const int64_t> hashes);

  SlotPool pool_;
  std::shared_ptr<Device> device_;
  std::vector<Owner> owners_;
  // The host tier (engaged while on) and its images, entry e at
  // e * layout.bytes_per_slot().
  std::optional<HostTier> tier_;
  std::unique_ptr<HostStaging> tier_memory_;
  int64_t tier_promotions_ = 0;
  int64_t tier_demotions_failed_ = 0;
  int64_t tier_promotions_failed_ = 0;
  // What tiers turned off had counted (the counts stay cumulative).
  HostTierCounts retired_tier_counts_;
  // FlushDemotions' batch and each image's hash (reused).
  std::vector<SlotImage> images_;
  std::vector<int64_t> image_hashes_;
  std::vector<CopyObserver*> copy_observers_;
  // Warm restart: whether checksums are taken; each device checkpoint's,
  // by hash (its bytes follow it through a shrink's move); each tier
  // entry's; and staging memory the checksum reads reuse.
  bool checksums_on_ = false;
  absl::flat_hash_map<int64_t, uint64_t> checksums_;
  std::vector<uint64_t> tier_checksums_;
  std::unique_ptr<HostStaging> seal_staging_;
  // ShrinkStep's batch (reused).
  std::vector<std::pair<int64_t, int64_t>> batch_;
  // The destinations of the batch's pairs that moved a checkpoint.
  std::vector<int64_t> batch_checkpoints_;
  absl::flat_hash_set<int64_t> touched_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_SLOT_MEMORY_H_

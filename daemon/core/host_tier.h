// HostTier: the index of the host tier, where the device pool's spent
// checkpoints go instead of being lost. Each entry holds one checkpoint's
// image (one slot's bytes) under the block hash it was filed under, in an
// LRU of its own; the bytes themselves live in staging memory the caller
// owns, entry `e` at e * entry_bytes (daemon/core/slot_memory.h copies them).
//
// The rules:
//   * Insert files a hash at the tail (most recent), or at the head when the
//     checkpoint was a guess (speculative on the device: spent first there,
//     spent first here). A full tier spends its head to make room, counted
//     as an eviction. A hash already filed is refiled: its entry is reused
//     (the new image replaces the old) and moves as Insert says.
//   * Touch (a resume read the entry) moves it to the tail.
//   * Erase drops a hash (its KV blocks died, or the engine unindexed it);
//     Clear drops all.
//   * Resize keeps the most recent entries that fit and says where each
//     one goes, so the caller can copy the images into new staging memory.
//
// Everything is O(1) but Clear, Resize and Dump (linear).
//
// Thread safety: thread-compatible (the daemon calls it under its mutex).
#ifndef STATECACHE_DAEMON_CORE_HOST_TIER_H_
#define STATECACHE_DAEMON_CORE_HOST_TIER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "daemon/core/sequence.h"
#include "daemon/core/slot_pool.h"

namespace statecache {

struct HostTierCounts {
  int64_t demotions = 0;  // checkpoints filed (Insert)
  int64_t evictions = 0;  // entries spent to make room (Insert, Resize)
  int64_t hits = 0;       // Touch: a resume read an entry
  int64_t erased = 0;     // Erase and Clear of a filed hash
  int64_t restored = 0;   // Restore: brought back by a warm restart
  friend bool operator==(const HostTierCounts&,
                         const HostTierCounts&) = default;
};

class HostTier {
 public:
  // REQUIRES: capacity >= 0 (0: a tier that files nothing).
  explicit HostTier(int64_t capacity);

  HostTier(HostTier&&) = default;
  HostTier& operator=(HostTier&&) = default;

  int64_t capacity() const { return static_cast<int64_t>(entries_.size()); }
  int64_t size() const { return static_cast<int64_t>(index_.size()); }
  const HostTierCounts& counts() const { return counts_; }

  // The entry holding `hash`, or -1. Changes nothing.
  int64_t Find(int64_t hash) const {
    auto it = index_.find(hash);
    return it == index_.end() ? -1 : it->second;
  }

  // Where Insert put a hash: its entry, and the hash spent to make room for
  // it (-1: none).
  struct Filed {
    int64_t entry = -1;
    int64_t evicted_hash = -1;
  };
  // Files `hash` (see the rules). entry == -1 when capacity() == 0.
  // REQUIRES: hash >= 0.
  Filed Insert(int64_t hash, bool at_head);
  // Files `hash` at the tail as Insert does, but counted as restored (a
  // restarted daemon bringing its tier back), not as a demotion.
  // REQUIRES: hash >= 0.
  Filed Restore(int64_t hash);

  // Where a resume of `seq` with `hit` of `hashes` held by the KV cache
  // would start from the tier: the deepest depth in (floor, hit] that the
  // pool's fork-room rule allows (SlotPool::ResumableHit with every
  // checkpoint assumed) and whose hash the tier holds, with its entry;
  // {0, -1} when there is none. Changes nothing.
  struct Resume {
    int64_t blocks = 0;
    int64_t entry = -1;
  };
  Resume Deepest(const SlotPool& pool, const Sequence& seq, int64_t hit,
                 absl::Span<const int64_t> hashes, int64_t floor) const;

  // A resume read `entry`: to the tail, counted as a hit.
  // REQUIRES: entry holds a hash (Find returned it).
  void Touch(int64_t entry);

  // Drops `hash`; false when it was not filed.
  bool Erase(int64_t hash);
  void Clear();

  // Changes the capacity to `capacity` entries, keeping the most recent
  // that fit (the rest counted as evictions) in entries [0, kept), LRU
  // order unchanged: returns (old entry, new entry) for every kept one, for
  // the caller to copy the images from the old staging memory to new.
  // REQUIRES: capacity >= 0.
  std::vector<std::pair<int64_t, int64_t>> Resize(int64_t capacity);

  // Filed hashes in LRU order, head (spent first) first: for tests, dumps
  // and the state directory.
  std::vector<int64_t> Dump() const;

 private:
  static constexpr int64_t kNil = -1;
  struct Entry {
    int64_t hash = -1;  // -1: vacant
    int64_t prev = kNil;
    int64_t next = kNil;
  };

  // Every entry vacant, nothing filed; the counts stay.
  void Reset();
  void Unlink(int64_t entry);
  // Links a detached `entry` at the head or the tail.
  void Link(int64_t entry, bool at_head);
  // A vacant entry, spending the head when there is none.
  int64_t TakeEntry(int64_t& evicted_hash);

  std::vector<Entry> entries_;
  std::vector<int64_t> vacant_;  // vacant entries, taken from the back
  absl::flat_hash_map<int64_t, int64_t> index_;  // hash -> entry
  int64_t head_ = kNil;
  int64_t tail_ = kNil;
  HostTierCounts counts_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_HOST_TIER_H_

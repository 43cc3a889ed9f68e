// HashIndex: the pool's hash_to_slot map, from a checkpoint's block hash (a
// non-negative int64) to the slot holding it.
//
// An open-addressing table built for this one job: 16-byte buckets holding
// the key and the slot side by side (one cache line per probe, no separate
// control bytes), linear probing, and deletion by backward shift, so checkpoint
// churn (an erase and an insert per eviction) leaves no tombstones and the
// table never needs cleaning. Buckets are indexed by multiply-shift hashing
// with a random odd multiplier drawn per table: universal hashing, so no
// fixed set of keys (sequential, or multiples of a power of two) is slow for
// every table. It stays at most half full, growing by doubling.
//
// Iteration order is unspecified and differs between tables; callers that
// need an order sort.
//
// Thread-compatible.
#ifndef STATECACHE_DAEMON_CORE_HASH_INDEX_H_
#define STATECACHE_DAEMON_CORE_HASH_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "daemon/core/huge_page_allocator.h"

namespace statecache {

class HashIndex {
 public:
  HashIndex();

  int64_t size() const { return size_; }

  // Makes room for `entries` keys without growing again.
  void Reserve(int64_t entries);

  // REQUIRES (every key argument): key >= 0.

  // The slot filed under `key`, or -1.
  int64_t Find(int64_t key) const {
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      const Bucket& b = buckets_[i];
      if (b.key == key) return b.slot;
      if (b.key == kEmpty) return -1;
    }
  }
  bool Contains(int64_t key) const { return Find(key) >= 0; }

  // Files `key` under `slot`; returns the slot it was filed under before,
  // or -1 if it was not present.
  int64_t InsertOrAssign(int64_t key, int64_t slot) {
    if (static_cast<size_t>(size_) + 1 > (mask_ + 1) / 2) {
      Rehash((mask_ + 1) * 2);
    }
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      Bucket& b = buckets_[i];
      if (b.key == key) {
        const int64_t prev = b.slot;
        b.slot = slot;
        return prev;
      }
      if (b.key == kEmpty) {
        b = Bucket{key, slot};
        ++size_;
        return -1;
      }
    }
  }

  // Removes `key` if it is filed under exactly `slot`; true if it was.
  bool EraseIfFiledUnder(int64_t key, int64_t slot) {
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      const Bucket& b = buckets_[i];
      if (b.key == key) {
        if (b.slot != slot) return false;
        EraseAt(i);
        return true;
      }
      if (b.key == kEmpty) return false;
    }
  }

  // Starts fetching the bucket `key` would be found in.
  void Prefetch(int64_t key) const { __builtin_prefetch(&buckets_[Home(key)]); }

  // Calls f(key, slot) for every entry, in no particular order. f must not
  // change the index.
  template <typename F>
  void ForEach(F&& f) const {
    for (const Bucket& b : buckets_) {
      if (b.key != kEmpty) f(b.key, b.slot);
    }
  }

 private:
  static constexpr int64_t kEmpty = -1;
  struct Bucket {
    int64_t key = kEmpty;
    int64_t slot = -1;
  };

  size_t Home(int64_t key) const {
    return static_cast<size_t>((static_cast<uint64_t>(key) * multiplier_) >>
                               shift_);
  }
  // Empties bucket i, moving later entries of its probe run back into the
  // hole so every entry stays reachable from its home without tombstones.
  void EraseAt(size_t i);
  void Rehash(size_t buckets);

  std::vector<Bucket, HugePageAllocator<Bucket>> buckets_;
  size_t mask_ = 0;  // buckets_.size() - 1 (a power of two)
  int shift_ = 64;   // 64 - log2(buckets_.size())
  uint64_t multiplier_ = 1;
  int64_t size_ = 0;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_HASH_INDEX_H_

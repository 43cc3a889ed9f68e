// HashIndex: the pool's hash_to_slot map, from a checkpoint's block hash (a
// non-negative int64) to the slot holding it.
//
// An open-addressing table built for this one job: 16-byte buckets holding
// the key and the slot side by side, linear probing, and deletion by backward
// shift, so checkpoint churn (an erase and an insert per eviction) leaves no
// tombstones and the table never needs cleaning. Buckets are indexed by
// multiply-shift hashing with a random odd multiplier drawn per table:
// universal hashing, so no fixed set of keys (sequential, or multiples of a
// power of two) is slow for every table. It stays at most half full, growing
// by doubling.
//
// Beside the buckets, one tag byte per bucket: 0 for empty, else 0x80 and
// seven more bits of the key's hash. Probes walk the tags and read a bucket
// only where the tag matches, so a key that is absent (most lookups, and
// every insert of a new checkpoint) is settled by the tags alone. At a
// million slots the buckets are far past what a CPU keeps in cache (a
// random read there waits on memory), while the tags are a sixteenth of
// that and mostly cached: a new checkpoint's insert then writes its bucket
// without waiting to read it.
//
// Iteration order is unspecified and differs between tables; callers that
// need an order sort.
//
// Thread-compatible.
#ifndef STATECACHE_DAEMON_CORE_HASH_INDEX_H_
#define STATECACHE_DAEMON_CORE_HASH_INDEX_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "daemon/core/huge_page_allocator.h"

namespace statecache {

class HashIndex {
 public:
  // Tables of at least `defer_min_buckets` buckets hold new keys' bucket
  // writes back (see pending_); below that the table stays in cache anyway.
  // Tests pass a small value to exercise deferral at small sizes.
  static constexpr size_t kDefaultDeferMinBuckets = size_t{1} << 16;
  explicit HashIndex(size_t defer_min_buckets = kDefaultDeferMinBuckets);

  int64_t size() const { return size_; }

  // Makes room for `entries` keys without growing again.
  void Reserve(int64_t entries);

  // REQUIRES (every key argument): key >= 0.

  // The slot filed under `key`, or -1.
  int64_t Find(int64_t key) const {
    const Probe p = Locate(key);
    return p.found ? BucketAt(p.index).slot : -1;
  }
  bool Contains(int64_t key) const { return Locate(key).found; }

  // Files `key` under `slot`; returns the slot it was filed under before,
  // or -1 if it was not present.
  int64_t InsertOrAssign(int64_t key, int64_t slot) {
    if (static_cast<size_t>(size_) + 1 > (mask_ + 1) / 2) {
      Rehash((mask_ + 1) * 2);
    }
    const Probe p = Locate(key);
    if (p.found) {
      Bucket& b = MutableBucketAt(p.index);
      const int64_t prev = b.slot;
      b.slot = slot;
      return prev;
    }
    // A new key: the tags already say where it goes, so in a large table
    // its bucket is written later rather than now (see pending_).
    tags_[p.index] = p.tag;
    ++size_;
    if (mask_ + 1 < defer_min_buckets_) {
      buckets_[p.index] = Bucket{key, slot};
      return -1;
    }
    // Round robin: the entry replaced is the oldest, written out now that
    // its line has had kMaxPending inserts' time to arrive.
    PendingWrite& w = pending_[next_pending_];
    if (w.bucket_index != kNoBucket) {
      buckets_[w.bucket_index] = w.bucket;
    } else {
      ++num_pending_;
    }
    w = PendingWrite{p.index, Bucket{key, slot}};
    next_pending_ = (next_pending_ + 1) % kMaxPending;
    __builtin_prefetch(&buckets_[p.index], 1);
    return -1;
  }

  // Removes `key` if it is filed under exactly `slot`; true if it was.
  bool EraseIfFiledUnder(int64_t key, int64_t slot) {
    const Probe p = Locate(key);
    if (!p.found || BucketAt(p.index).slot != slot) return false;
    EraseAt(p.index);
    return true;
  }

  // Starts fetching the tag and the bucket `key` would be found in.
  void Prefetch(int64_t key) const {
    const size_t i = HomeOf(Hash(key));
    __builtin_prefetch(&tags_[i]);
    __builtin_prefetch(&buckets_[i]);
  }

  // Calls f(key, slot) for every entry, in no particular order. f must not
  // change the index.
  template <typename F>
  void ForEach(F&& f) const {
    for (size_t i = 0; i < buckets_.size(); ++i) {
      if (tags_[i] != kEmptyTag) f(BucketAt(i).key, BucketAt(i).slot);
    }
  }

 private:
  static constexpr uint8_t kEmptyTag = 0;
  struct Bucket {  // meaningful only where the tag is not kEmptyTag
    int64_t key;
    int64_t slot;
  };

  // New keys' buckets not yet written, in tables of defer_min_buckets_ or
  // more. A new key's insert needs only the tags to find its bucket, but
  // writing the bucket at once would stall on it: x86 commits stores in
  // order, so one store waiting on memory for its line soon fills the
  // store buffer and stops the core. Each is held here (its tag already set,
  // its line being fetched) until kMaxPending later inserts have passed; every
  // read and move of a bucket looks here first.
  static constexpr size_t kNoBucket = ~size_t{0};
  struct PendingWrite {
    size_t bucket_index = kNoBucket;  // kNoBucket: this entry is unused
    Bucket bucket{};
  };
  static constexpr int kMaxPending = 8;

  uint64_t Hash(int64_t key) const {
    return static_cast<uint64_t>(key) * multiplier_;
  }
  // The hash's top bits pick the home bucket; the seven bits below them
  // (as well mixed, and independent of the home) make the tag.
  size_t HomeOf(uint64_t hash) const {
    return static_cast<size_t>(hash >> shift_);
  }
  uint8_t TagOf(uint64_t hash) const {
    return static_cast<uint8_t>(hash >> (shift_ - 7)) | 0x80;
  }

  // Where `key` is (found), or the empty bucket its probe run ends at, which
  // is where it would go; and its tag. Reads a bucket only where the tag
  // matches.
  struct Probe {
    size_t index;
    uint8_t tag;
    bool found;
  };
  //
  // Most probe runs end within the eight tags from the home bucket on, so
  // those eight are tested at once, as one word: a tag-by-tag walk takes a
  // hard-to-predict branch per tag (is this one empty?), which costs more
  // than the probe itself. Runs that go past the word, or past the end of
  // the table, take the walk.
  Probe Locate(int64_t key) const {
    const uint64_t h = Hash(key);
    const uint8_t tag = TagOf(h);
    const size_t home = HomeOf(h);
    if (home + sizeof(uint64_t) <= tags_.size()) {
      uint64_t word;
      std::memcpy(&word, &tags_[home], sizeof(word));
      // Every tag in use has its top bit set and the empty tag is 0, so a
      // byte whose top bit is clear is empty.
      const uint64_t empty = ~word & kTopBits;
      if (empty != 0) {
        // The bytes before the first empty one are the run's; bytes equal
        // to `tag` have a zero XOR, which the add below leaves without its
        // top bit (no carry crosses a byte: 0x7f + 0x7f < 0x100).
        const uint64_t x = word ^ (kLowBytes * tag);
        uint64_t match = ~(((x & ~kTopBits) + ~kTopBits) | x) & kTopBits &
                         ((empty & -empty) - 1);
        for (; match != 0; match &= match - 1) {
          const size_t i = home + std::countr_zero(match) / 8;
          if (BucketAt(i).key == key) return Probe{i, tag, true};
        }
        return Probe{home + std::countr_zero(empty) / 8, tag, false};
      }
    }
    return Walk(key, home, tag);
  }
  // Locate for the runs the word does not settle, tag by tag. Out of line,
  // so that what is left of Locate is small enough to inline into its
  // callers (ResumableHit's walk calls Contains for every block).
  ABSL_ATTRIBUTE_NOINLINE Probe Walk(int64_t key, size_t home,
                                     uint8_t tag) const;
  static constexpr uint64_t kLowBytes = 0x0101010101010101;
  static constexpr uint64_t kTopBits = 0x8080808080808080;
  static_assert(std::endian::native == std::endian::little,
                "Locate reads tag i + k as byte k of a word");

  // The pending write to bucket i, or null.
  const PendingWrite* PendingFor(size_t i) const {
    if (num_pending_ == 0) return nullptr;
    for (const PendingWrite& p : pending_) {
      if (p.bucket_index == i) return &p;
    }
    return nullptr;
  }
  PendingWrite* PendingFor(size_t i) {
    return const_cast<PendingWrite*>(std::as_const(*this).PendingFor(i));
  }
  // Bucket i as it reads with the pending writes applied.
  const Bucket& BucketAt(size_t i) const {
    const PendingWrite* p = PendingFor(i);
    return p != nullptr ? p->bucket : buckets_[i];
  }
  Bucket& MutableBucketAt(size_t i) {
    PendingWrite* p = PendingFor(i);
    return p != nullptr ? p->bucket : buckets_[i];
  }
  void FlushWrites();
  // Empties bucket i, moving later entries of its probe run back into the
  // hole so every entry stays reachable from its home without tombstones.
  void EraseAt(size_t i);
  void Rehash(size_t buckets);

  std::vector<Bucket, HugePageAllocator<Bucket>> buckets_;
  std::vector<uint8_t, HugePageAllocator<uint8_t>> tags_;  // one per bucket
  size_t defer_min_buckets_;
  PendingWrite pending_[kMaxPending];
  int num_pending_ = 0;   // entries in use
  int next_pending_ = 0;  // the entry the next deferred insert takes
  size_t mask_ = 0;       // buckets_.size() - 1 (a power of two)
  int shift_ = 64;        // 64 - log2(buckets_.size())
  uint64_t multiplier_ = 1;
  int64_t size_ = 0;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_HASH_INDEX_H_

#include "daemon/core/hash_index.h"

#include <bit>
#include <random>
#include <utility>

namespace statecache {
namespace {

constexpr size_t kMinBuckets = 16;

uint64_t RandomOddMultiplier() {
  std::random_device rd;
  const uint64_t high = rd();
  return (high << 32 | rd()) | 1;
}

}  // namespace

HashIndex::HashIndex(size_t defer_min_buckets)
    : defer_min_buckets_(defer_min_buckets),
      multiplier_(RandomOddMultiplier()) {
  Rehash(kMinBuckets);
}

void HashIndex::Reserve(int64_t entries) {
  if (entries <= 0) return;
  const size_t want = std::bit_ceil(static_cast<size_t>(entries) * 2);
  if (want > buckets_.size()) Rehash(want);
}

HashIndex::Probe HashIndex::Walk(int64_t key, size_t home, uint8_t tag) const {
  for (size_t i = home;; i = (i + 1) & mask_) {
    const uint8_t t = tags_[i];
    if (t == tag && BucketAt(i).key == key) return Probe{i, tag, true};
    if (t == kEmptyTag) return Probe{i, tag, false};
  }
}

void HashIndex::EraseAt(size_t i) {
  size_t hole = i;
  if (PendingWrite* p = PendingFor(i)) {  // never written out: just drop it
    *p = PendingWrite{};
    --num_pending_;
  }
  for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
    if (tags_[j] == kEmptyTag) break;
    PendingWrite* p = PendingFor(j);
    const Bucket& b = p != nullptr ? p->bucket : buckets_[j];
    // Bucket j may fill the hole only if its home is not after the hole (on
    // the way round from the hole to j), or a lookup from its home would
    // stop at the hole. (The hole is never a pending write's bucket: a
    // pending entry that moves takes the hole's index.)
    const size_t home = HomeOf(Hash(b.key));
    if (((j - home) & mask_) >= ((j - hole) & mask_)) {
      if (p != nullptr) {
        p->bucket_index = hole;
      } else {
        buckets_[hole] = b;
      }
      tags_[hole] = tags_[j];
      hole = j;
    }
  }
  tags_[hole] = kEmptyTag;
  --size_;
}

void HashIndex::FlushWrites() {
  for (PendingWrite& p : pending_) {
    if (p.bucket_index != kNoBucket) buckets_[p.bucket_index] = p.bucket;
    p = PendingWrite{};
  }
  num_pending_ = 0;
}

void HashIndex::Rehash(size_t buckets) {
  FlushWrites();
  std::vector<Bucket, HugePageAllocator<Bucket>> old(buckets);
  std::vector<uint8_t, HugePageAllocator<uint8_t>> old_tags(buckets, kEmptyTag);
  old.swap(buckets_);
  old_tags.swap(tags_);
  mask_ = buckets - 1;
  shift_ = 64 - std::countr_zero(buckets);
  size_ = 0;
  for (size_t j = 0; j < old.size(); ++j) {
    if (old_tags[j] == kEmptyTag) continue;
    const uint64_t h = Hash(old[j].key);
    size_t i = HomeOf(h);
    while (tags_[i] != kEmptyTag) i = (i + 1) & mask_;
    buckets_[i] = old[j];
    tags_[i] = TagOf(h);
    ++size_;
  }
}

}  // namespace statecache

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

HashIndex::HashIndex() : multiplier_(RandomOddMultiplier()) {
  Rehash(kMinBuckets);
}

void HashIndex::Reserve(int64_t entries) {
  if (entries <= 0) return;
  const size_t want = std::bit_ceil(static_cast<size_t>(entries) * 2);
  if (want > buckets_.size()) Rehash(want);
}

void HashIndex::EraseAt(size_t i) {
  size_t hole = i;
  for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
    const Bucket& b = buckets_[j];
    if (b.key == kEmpty) break;
    // b may fill the hole only if its home is not after the hole (on the
    // way round from the hole to b), or a lookup from its home would stop
    // at the hole.
    const size_t home = Home(b.key);
    if (((j - home) & mask_) >= ((j - hole) & mask_)) {
      buckets_[hole] = b;
      hole = j;
    }
  }
  buckets_[hole] = Bucket{};
  --size_;
}

void HashIndex::Rehash(size_t buckets) {
  std::vector<Bucket, HugePageAllocator<Bucket>> old(buckets);
  old.swap(buckets_);
  mask_ = buckets - 1;
  shift_ = 64 - std::countr_zero(buckets);
  size_ = 0;
  for (const Bucket& b : old) {
    if (b.key == kEmpty) continue;
    size_t i = Home(b.key);
    while (buckets_[i].key != kEmpty) i = (i + 1) & mask_;
    buckets_[i] = b;
    ++size_;
  }
}

}  // namespace statecache

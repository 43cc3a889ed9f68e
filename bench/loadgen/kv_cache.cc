#include "bench/loadgen/kv_cache.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace statecache::loadgen {

KvCache::KvCache(int64_t capacity_blocks) : capacity_(capacity_blocks) {}

int64_t KvCache::LeadingHit(absl::Span<const int64_t> hashes) const {
  int64_t n = 0;
  while (n < static_cast<int64_t>(hashes.size()) &&
         blocks_.contains(hashes[n])) {
    ++n;
  }
  return n;
}

void KvCache::Acquire(int64_t hash) {
  auto it = blocks_.find(hash);
  if (it != blocks_.end()) {
    if (it->second.refs++ == 0) lru_.erase(it->second.lru);
    return;
  }
  // Back to capacity if an earlier admission went over it.
  while (size() >= capacity_ && !lru_.empty()) {
    const int64_t victim = lru_.front();
    lru_.pop_front();
    blocks_.erase(victim);
    evicted_.push_back(victim);
    ++evictions_;
  }
  if (size() >= capacity_) ++over_capacity_;
  blocks_[hash].refs = 1;
}

void KvCache::Release(absl::Span<const int64_t> hashes) {
  for (auto h = hashes.rbegin(); h != hashes.rend(); ++h) {
    auto it = blocks_.find(*h);
    if (it == blocks_.end() || it->second.refs == 0) continue;  // not ours
    if (--it->second.refs == 0) {
      it->second.lru = lru_.insert(lru_.end(), *h);
    }
  }
}

std::vector<int64_t> KvCache::TakeEvicted() {
  return std::exchange(evicted_, {});
}

}  // namespace statecache::loadgen

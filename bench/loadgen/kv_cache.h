// KvCache: the engine's KV-cache prefix index, simulated as blocks named by
// their chained hash in a pool of fixed capacity.
//
// A block is referenced while a running request uses it; unreferenced
// blocks stay cached in LRU order and are evicted, least recently used
// first, when a new block needs room. A request's blocks are handed back
// last block first, so a prefix's tail is evicted before its head (as vLLM
// frees a request's blocks in reverse). When every cached block is
// referenced, a new block is admitted over capacity (counted, never
// refused): the simulation gates admission on state slots, not KV blocks.
//
// The cache holds whatever full blocks the scheduler acquires: each prompt
// block as its prefill completes it and, unless the scheduler runs with
// kv_cache_decode off, each block of decode output as decoding fills it
// (scheduler.h); partial blocks never.
//
// Thread safety: thread-compatible. Deterministic: the same calls give the
// same hits and evictions.
#ifndef STATECACHE_BENCH_LOADGEN_KV_CACHE_H_
#define STATECACHE_BENCH_LOADGEN_KV_CACHE_H_

#include <cstdint>
#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace statecache::loadgen {

class KvCache {
 public:
  // REQUIRES: capacity_blocks >= 1.
  explicit KvCache(int64_t capacity_blocks);

  // Leading blocks of `hashes` the cache holds (the KV prefix hit).
  int64_t LeadingHit(absl::Span<const int64_t> hashes) const;
  // References `hash`, inserting it if absent (evicting the LRU unreferenced
  // block when full; see TakeEvicted).
  void Acquire(int64_t hash);
  // Drops one reference to each of `hashes`, last first; a block left
  // unreferenced becomes the most recently used cached block.
  // REQUIRES: each was acquired (and not yet released) by the caller.
  void Release(absl::Span<const int64_t> hashes);
  // Hashes evicted since the last call, in eviction order.
  std::vector<int64_t> TakeEvicted();

  int64_t size() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t evictions() const { return evictions_; }
  // Blocks admitted while every cached block was referenced.
  int64_t over_capacity() const { return over_capacity_; }

 private:
  struct Block {
    int32_t refs = 0;
    // Position in lru_ while refs == 0.
    std::list<int64_t>::iterator lru;
  };

  const int64_t capacity_;
  absl::flat_hash_map<int64_t, Block> blocks_;
  std::list<int64_t> lru_;  // unreferenced, least recently used first
  std::vector<int64_t> evicted_;
  int64_t evictions_ = 0;
  int64_t over_capacity_ = 0;
};

}  // namespace statecache::loadgen

#endif  // STATECACHE_BENCH_LOADGEN_KV_CACHE_H_

#include "daemon/core/host_tier.h"

#include <algorithm>

namespace statecache {

HostTier::HostTier(int64_t capacity)
    : entries_(std::max<int64_t>(capacity, 0)) {
  index_.reserve(entries_.size());
  Reset();
}

void HostTier::Reset() {
  std::fill(entries_.begin(), entries_.end(), Entry{});
  index_.clear();
  vacant_.clear();
  // Taken from the back: entry 0 first.
  for (int64_t e = capacity() - 1; e >= 0; --e) vacant_.push_back(e);
  head_ = tail_ = kNil;
}

void HostTier::Unlink(int64_t entry) {
  Entry& e = entries_[entry];
  if (e.prev != kNil) {
    entries_[e.prev].next = e.next;
  } else {
    head_ = e.next;
  }
  if (e.next != kNil) {
    entries_[e.next].prev = e.prev;
  } else {
    tail_ = e.prev;
  }
  e.prev = e.next = kNil;
}

void HostTier::Link(int64_t entry, bool at_head) {
  Entry& e = entries_[entry];
  // Between `before` and `after` (kNil: the list's end on that side).
  const int64_t before = at_head ? kNil : tail_;
  const int64_t after = at_head ? head_ : kNil;
  e.prev = before;
  e.next = after;
  if (before != kNil) entries_[before].next = entry;
  if (after != kNil) entries_[after].prev = entry;
  if (before == kNil) head_ = entry;
  if (after == kNil) tail_ = entry;
}

int64_t HostTier::TakeEntry(int64_t& evicted_hash) {
  if (!vacant_.empty()) {
    const int64_t entry = vacant_.back();
    vacant_.pop_back();
    return entry;
  }
  const int64_t entry = head_;
  Unlink(entry);
  evicted_hash = entries_[entry].hash;
  index_.erase(evicted_hash);
  ++counts_.evictions;
  return entry;
}

HostTier::Filed HostTier::Insert(int64_t hash, bool at_head) {
  Filed filed;
  if (entries_.empty()) return filed;
  ++counts_.demotions;
  auto [it, inserted] = index_.try_emplace(hash, kNil);
  if (inserted) {
    it->second = TakeEntry(filed.evicted_hash);
    // TakeEntry may have erased from index_: find the new entry again.
    it = index_.find(hash);
    entries_[it->second].hash = hash;
  } else {
    Unlink(it->second);
  }
  filed.entry = it->second;
  Link(filed.entry, at_head);
  return filed;
}

HostTier::Filed HostTier::Restore(int64_t hash) {
  Filed filed = Insert(hash, /*at_head=*/false);
  if (filed.entry >= 0) {
    --counts_.demotions;
    ++counts_.restored;
  }
  return filed;
}

HostTier::Resume HostTier::Deepest(const SlotPool& pool, const Sequence& seq,
                                   int64_t hit,
                                   absl::Span<const int64_t> hashes,
                                   int64_t floor) const {
  if (index_.empty()) return {};
  absl::StatusOr<int64_t> deepest =
      pool.ResumableHit(seq, hit, hashes, /*assume_checkpointed=*/true);
  if (!deepest.ok()) return {};
  for (int64_t blocks = *deepest; blocks > floor; --blocks) {
    const int64_t entry = Find(hashes[blocks - 1]);
    if (entry >= 0) return {blocks, entry};
  }
  return {};
}

void HostTier::Touch(int64_t entry) {
  ++counts_.hits;
  Unlink(entry);
  Link(entry, /*at_head=*/false);
}

bool HostTier::Erase(int64_t hash) {
  auto it = index_.find(hash);
  if (it == index_.end()) return false;
  const int64_t entry = it->second;
  index_.erase(it);
  Unlink(entry);
  entries_[entry].hash = -1;
  vacant_.push_back(entry);
  ++counts_.erased;
  return true;
}

void HostTier::Clear() {
  counts_.erased += size();
  Reset();
}

std::vector<std::pair<int64_t, int64_t>> HostTier::Resize(int64_t capacity) {
  capacity = std::max<int64_t>(capacity, 0);
  // The most recent `capacity` entries, head first.
  std::vector<int64_t> kept;
  for (int64_t e = tail_;
       e != kNil && static_cast<int64_t>(kept.size()) < capacity;
       e = entries_[e].prev) {
    kept.push_back(e);
  }
  std::reverse(kept.begin(), kept.end());
  HostTier resized(capacity);
  resized.counts_ = counts_;
  resized.counts_.evictions += size() - static_cast<int64_t>(kept.size());
  std::vector<std::pair<int64_t, int64_t>> moves;
  moves.reserve(kept.size());
  for (int64_t old_entry : kept) {
    int64_t unused = -1;
    const int64_t new_entry = resized.TakeEntry(unused);
    const int64_t hash = entries_[old_entry].hash;
    resized.entries_[new_entry].hash = hash;
    resized.index_.emplace(hash, new_entry);
    resized.Link(new_entry, /*at_head=*/false);
    moves.emplace_back(old_entry, new_entry);
  }
  *this = std::move(resized);
  return moves;
}

std::vector<int64_t> HostTier::Dump() const {
  std::vector<int64_t> hashes;
  hashes.reserve(index_.size());
  for (int64_t e = head_; e != kNil; e = entries_[e].next) {
    hashes.push_back(entries_[e].hash);
  }
  return hashes;
}

}  // namespace statecache

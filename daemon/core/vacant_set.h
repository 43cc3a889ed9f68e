// VacantSet: a set of slot indices that answers "lowest member" quickly.
//
// The pool hands out the lowest vacant slot first (which keeps the top of the
// pool cold, so it can shrink without moving anyone). A hierarchical bitmap,
// 64 children per word: insert and erase touch one word per level, and the
// lowest member is found by one count-trailing-zeros per level, so a pool of
// a million slots (4 levels) costs what a pool of a thousand (2 levels) does.
//
// Thread-compatible.
#ifndef STATECACHE_DAEMON_CORE_VACANT_SET_H_
#define STATECACHE_DAEMON_CORE_VACANT_SET_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace statecache {

class VacantSet {
 public:
  // Makes room for indices [0, capacity). Never shrinks; members are kept.
  void Grow(int64_t capacity);

  int64_t size() const { return size_; }
  // REQUIRES (all three): 0 <= slot < capacity.
  bool Contains(int64_t slot) const {
    return (levels_[0][slot / 64] >> (slot % 64)) & 1;
  }
  // No-op if already a member / not a member.
  void Insert(int64_t slot) {
    if (Contains(slot)) return;
    ++size_;
    int64_t index = slot;
    for (auto& level : levels_) {
      uint64_t& word = level[index / 64];
      const bool was_empty = word == 0;
      word |= uint64_t{1} << (index % 64);
      if (!was_empty) break;  // parents already know this word is non-empty
      index /= 64;
    }
  }
  void Erase(int64_t slot) {
    if (!Contains(slot)) return;
    --size_;
    int64_t index = slot;
    for (auto& level : levels_) {
      uint64_t& word = level[index / 64];
      word &= ~(uint64_t{1} << (index % 64));
      if (word != 0) break;  // still non-empty: parents unchanged
      index /= 64;
    }
  }
  // Lowest member, or -1 when empty.
  int64_t Min() const {
    if (size_ == 0) return -1;
    int64_t index = 0;
    for (size_t level = levels_.size(); level-- > 0;) {
      index = index * 64 + std::countr_zero(levels_[level][index]);
    }
    return index;
  }

 private:
  // levels_[0] is the leaf level (one bit per slot); each higher level has
  // one bit per non-zero word below it.
  std::vector<std::vector<uint64_t>> levels_;
  int64_t capacity_ = 0;
  int64_t size_ = 0;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_VACANT_SET_H_

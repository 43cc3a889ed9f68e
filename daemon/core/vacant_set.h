// VacantSet: a set of slot indices that answers "lowest member" quickly.
//
// The pool hands out the lowest vacant slot first (which keeps the top of the
// pool cold, so it can shrink without moving anyone). A hierarchical bitmap,
// 64 children per word: insert and erase touch one word per level, and the
// lowest member is found by one count-trailing-zeros per level, so a pool of
// a million slots (4 levels) costs what a pool of a thousand (2 levels) does.
// All levels live in one array (leaf level first), so a lookup is one
// indirection per level, not two.
//
// Thread-compatible.
#ifndef STATECACHE_DAEMON_CORE_VACANT_SET_H_
#define STATECACHE_DAEMON_CORE_VACANT_SET_H_

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace statecache {

class VacantSet {
 public:
  // Enough levels for 64^6 indices, beyond any pool (kMaxSlots is 2^30).
  static constexpr int kMaxLevels = 6;

  // Makes room for indices [0, capacity). Never shrinks; members are kept.
  // REQUIRES: capacity <= 64^kMaxLevels.
  void Grow(int64_t capacity);

  int64_t size() const { return size_; }
  // REQUIRES (Contains, Insert, Erase): 0 <= slot < capacity.
  bool Contains(int64_t slot) const {
    return (words_[slot / 64] >> (slot % 64)) & 1;
  }
  // No-op if already a member / not a member.
  void Insert(int64_t slot) {
    if (Contains(slot)) return;
    ++size_;
    int64_t index = slot;
    for (int level = 0; level < num_levels_; ++level) {
      uint64_t& word = Word(level, index / 64);
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
    for (int level = 0; level < num_levels_; ++level) {
      uint64_t& word = Word(level, index / 64);
      word &= ~(uint64_t{1} << (index % 64));
      if (word != 0) break;  // still non-empty: parents unchanged
      index /= 64;
    }
  }
  // Lowest member, or -1 when empty.
  int64_t Min() const {
    if (size_ == 0) return -1;
    int64_t index = 0;
    for (int level = num_levels_; level-- > 0;) {
      index = index * 64 + std::countr_zero(Word(level, index));
    }
    return index;
  }
  // Removes and returns the lowest member, or -1 when empty. One descent:
  // the bit to clear at every level is its word's lowest set bit, the one
  // the descent followed.
  int64_t TakeMin() {
    if (num_levels_ == 2) {
      if (size_ == 0) return -1;
      --size_;
      // Pools of 65 to 4096 slots, straight-line.
      uint64_t& top = Word(1, 0);
      const int64_t word_index = std::countr_zero(top);
      uint64_t& leaf = Word(0, word_index);
      const int64_t index = word_index * 64 + std::countr_zero(leaf);
      leaf &= leaf - 1;
      if (leaf == 0) top &= top - 1;
      return index;
    }
    const int64_t index = Min();
    if (index < 0) return -1;
    --size_;
    int64_t word_index = index / 64;
    for (int level = 0; level < num_levels_; ++level) {
      uint64_t& word = Word(level, word_index);
      word &= word - 1;
      if (word != 0) break;
      word_index /= 64;
    }
    return index;
  }

 private:
  uint64_t& Word(int level, int64_t i) { return words_[offset_[level] + i]; }
  uint64_t Word(int level, int64_t i) const {
    return words_[offset_[level] + i];
  }

  // Level 0 is the leaf level (one bit per slot) at offset 0; each higher
  // level has one bit per non-zero word below it.
  std::vector<uint64_t> words_;
  std::array<int64_t, kMaxLevels> offset_{};
  int num_levels_ = 0;
  int64_t capacity_ = 0;
  int64_t size_ = 0;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_VACANT_SET_H_

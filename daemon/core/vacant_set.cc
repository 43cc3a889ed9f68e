#include "daemon/core/vacant_set.h"

#include <bit>
#include <cstddef>

namespace statecache {
namespace {

int64_t WordsFor(int64_t bits) { return (bits + 63) / 64; }

}  // namespace

void VacantSet::Grow(int64_t capacity) {
  if (capacity <= capacity_) return;
  capacity_ = capacity;
  // Leaf level first, then one level per 64x reduction down to a single word.
  int64_t bits = capacity;
  std::size_t level = 0;
  while (true) {
    const int64_t words = WordsFor(bits);
    if (level == levels_.size()) {
      // A new top level: mark the non-empty words of the level below.
      levels_.emplace_back(words, 0);
      if (level > 0) {
        const auto& below = levels_[level - 1];
        for (std::size_t w = 0; w < below.size(); ++w) {
          if (below[w] != 0) levels_[level][w / 64] |= uint64_t{1} << (w % 64);
        }
      }
    } else if (static_cast<int64_t>(levels_[level].size()) < words) {
      levels_[level].resize(words, 0);
    }
    if (words == 1) break;
    bits = words;
    ++level;
  }
}

bool VacantSet::Contains(int64_t slot) const {
  return (levels_[0][slot / 64] >> (slot % 64)) & 1;
}

void VacantSet::Insert(int64_t slot) {
  uint64_t& leaf = levels_[0][slot / 64];
  const uint64_t bit = uint64_t{1} << (slot % 64);
  if (leaf & bit) return;
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

void VacantSet::Erase(int64_t slot) {
  uint64_t& leaf = levels_[0][slot / 64];
  const uint64_t bit = uint64_t{1} << (slot % 64);
  if (!(leaf & bit)) return;
  --size_;
  int64_t index = slot;
  for (auto& level : levels_) {
    uint64_t& word = level[index / 64];
    word &= ~(uint64_t{1} << (index % 64));
    if (word != 0) break;  // still non-empty: parents unchanged
    index /= 64;
  }
}

int64_t VacantSet::Min() const {
  if (size_ == 0) return -1;
  int64_t index = 0;
  for (std::size_t level = levels_.size(); level-- > 0;) {
    const uint64_t word = levels_[level][index];
    index = index * 64 + std::countr_zero(word);
  }
  return index;
}

}  // namespace statecache

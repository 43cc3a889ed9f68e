#include "daemon/core/vacant_set.h"

#include <utility>

namespace statecache {

void VacantSet::Grow(int64_t capacity) {
  if (capacity <= capacity_) return;
  // Rebuilt from the leaf level: the upper levels' shapes change with it.
  std::vector<uint64_t> leaf(words_.begin(),
                             words_.begin() + (capacity_ + 63) / 64);
  leaf.resize((capacity + 63) / 64, 0);
  capacity_ = capacity;
  num_levels_ = 0;
  int64_t words = static_cast<int64_t>(leaf.size());
  words_ = std::move(leaf);
  offset_[num_levels_++] = 0;
  while (words > 1) {
    // A level above: one bit per non-empty word of the level below.
    const int64_t below = offset_[num_levels_ - 1];
    const int64_t above = static_cast<int64_t>(words_.size());
    const int64_t above_words = (words + 63) / 64;
    words_.resize(above + above_words, 0);
    for (int64_t w = 0; w < words; ++w) {
      if (words_[below + w] != 0) {
        words_[above + w / 64] |= uint64_t{1} << (w % 64);
      }
    }
    offset_[num_levels_++] = above;
    words = above_words;
  }
}

}  // namespace statecache

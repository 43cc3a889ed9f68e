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

}  // namespace statecache

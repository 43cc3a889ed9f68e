// SortBySlot: the pin clocks' sort, against std::sort.
#include "daemon/core/slot_sort.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace statecache {
namespace {

// Distinct slots below `limit`, in random order.
std::vector<int32_t> DistinctSlots(std::mt19937_64& rng, size_t n,
                                   int64_t limit) {
  std::vector<int32_t> slots;
  while (slots.size() < n) {
    const auto s = static_cast<int32_t>(rng() % limit);
    if (std::find(slots.begin(), slots.end(), s) == slots.end()) {
      slots.push_back(s);
    }
  }
  return slots;
}

TEST(SortBySlotTest, MatchesStdSortAroundTheCutOverAndForEveryKeyWidth) {
  std::mt19937_64 rng(7);
  std::vector<int32_t> scratch{5, 6, 7};  // stale contents are ignored
  // Around the radix cut-over (64) and well past it; slots needing one, two,
  // three and four bytes.
  for (size_t n : {0u, 1u, 2u, 63u, 64u, 65u, 130u, 300u, 2000u}) {
    for (int64_t limit :
         {int64_t{256}, int64_t{4096}, int64_t{1} << 20, int64_t{1} << 30}) {
      if (static_cast<int64_t>(n) > limit) continue;
      std::vector<int32_t> slots = DistinctSlots(rng, n, limit);
      std::vector<int32_t> want = slots;
      std::sort(want.begin(), want.end());
      SortBySlot(slots, scratch, [](int32_t s) { return s; });
      ASSERT_EQ(slots, want) << "n=" << n << " limit=" << limit;
    }
  }
}

TEST(SortBySlotTest, SortsAlreadySortedAndReversedInput) {
  std::vector<int32_t> ascending, descending, scratch;
  for (int32_t i = 0; i < 200; ++i) {
    ascending.push_back(i * 5'000'000);  // up to ~2^30, slot 0 included
    descending.push_back((199 - i) * 5'000'000);
  }
  const std::vector<int32_t> want = ascending;
  SortBySlot(ascending, scratch, [](int32_t s) { return s; });
  EXPECT_EQ(ascending, want);
  SortBySlot(descending, scratch, [](int32_t s) { return s; });
  EXPECT_EQ(descending, want);
}

TEST(SortBySlotTest, RecordsTravelWithTheirSlots) {
  std::mt19937_64 rng(3);
  std::vector<std::pair<int64_t, int64_t>> records, scratch;
  for (int32_t s : DistinctSlots(rng, 500, int64_t{1} << 24)) {
    records.emplace_back(s, s * 3 + 1);  // payload derived from the slot
  }
  SortBySlot(records, scratch, [](const auto& r) { return r.first; });
  for (size_t i = 0; i < records.size(); ++i) {
    if (i > 0) {
      ASSERT_LT(records[i - 1].first, records[i].first);
    }
    ASSERT_EQ(records[i].second, records[i].first * 3 + 1);
  }
}

}  // namespace
}  // namespace statecache

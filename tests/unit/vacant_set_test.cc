// VacantSet: a hierarchical bitmap answering "lowest member".
#include "daemon/core/vacant_set.h"

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace statecache {
namespace {

TEST(VacantSet, EmptyHasNoMin) {
  VacantSet v;
  EXPECT_EQ(v.size(), 0);
  EXPECT_EQ(v.Min(), -1);
  v.Grow(0);
  EXPECT_EQ(v.Min(), -1);
  v.Grow(1000);
  EXPECT_EQ(v.size(), 0);
  EXPECT_EQ(v.Min(), -1);
  EXPECT_FALSE(v.Contains(0));
  EXPECT_FALSE(v.Contains(999));
}

TEST(VacantSet, MinAcrossLevelsWithAMillionSlots) {
  constexpr int64_t kCap = int64_t{1} << 20;
  VacantSet v;
  v.Grow(kCap);
  v.Insert(kCap - 1);
  EXPECT_EQ(v.Min(), kCap - 1);
  v.Insert(262144);  // first slot of the second top-level subtree (64^3)
  EXPECT_EQ(v.Min(), 262144);
  v.Insert(70000);
  EXPECT_EQ(v.Min(), 70000);
  v.Insert(4096);  // 64^2
  EXPECT_EQ(v.Min(), 4096);
  v.Insert(64);
  EXPECT_EQ(v.Min(), 64);
  v.Insert(63);
  EXPECT_EQ(v.Min(), 63);
  v.Insert(0);
  EXPECT_EQ(v.Min(), 0);
  EXPECT_EQ(v.size(), 7);
  for (int64_t s : {0, 63, 64, 4096, 70000, 262144}) {
    SCOPED_TRACE(s);
    EXPECT_TRUE(v.Contains(s));
    v.Erase(s);
    EXPECT_FALSE(v.Contains(s));
  }
  EXPECT_EQ(v.Min(), kCap - 1);
  EXPECT_EQ(v.size(), 1);
  v.Erase(kCap - 1);
  EXPECT_EQ(v.Min(), -1);
  EXPECT_EQ(v.size(), 0);
}

TEST(VacantSet, InsertAndEraseAreIdempotent) {
  VacantSet v;
  v.Grow(130);
  v.Insert(129);
  v.Insert(129);
  EXPECT_EQ(v.size(), 1);
  v.Erase(5);  // not a member
  EXPECT_EQ(v.size(), 1);
  EXPECT_EQ(v.Min(), 129);
  v.Erase(129);
  v.Erase(129);
  EXPECT_EQ(v.size(), 0);
  EXPECT_EQ(v.Min(), -1);
}

TEST(VacantSet, GrowKeepsMembers) {
  VacantSet v;
  v.Grow(100);
  v.Insert(5);
  v.Insert(99);
  v.Grow(1 << 20);
  EXPECT_EQ(v.size(), 2);
  EXPECT_TRUE(v.Contains(5));
  EXPECT_TRUE(v.Contains(99));
  EXPECT_FALSE(v.Contains(100));
  EXPECT_EQ(v.Min(), 5);
  v.Insert(1 << 19);
  v.Erase(5);
  v.Erase(99);
  EXPECT_EQ(v.Min(), 1 << 19);
  v.Grow(50);  // never shrinks
  EXPECT_TRUE(v.Contains(1 << 19));
  EXPECT_EQ(v.Min(), 1 << 19);
}

TEST(VacantSet, GrowAcrossLevelBoundaries) {
  // Capacities on and around word and level boundaries, growing one at a
  // time, every index inserted as it appears.
  VacantSet v;
  int64_t cap = 0;
  for (int64_t next : {1, 63, 64, 65, 127, 4095, 4096, 4097, 262144, 262145}) {
    v.Grow(next);
    for (int64_t s = cap; s < next; ++s) v.Insert(s);
    cap = next;
    EXPECT_EQ(v.size(), cap);
    EXPECT_EQ(v.Min(), 0);
    EXPECT_TRUE(v.Contains(cap - 1));
  }
  // Erase from the bottom: Min walks up.
  for (int64_t s = 0; s < 5000; ++s) {
    v.Erase(s);
    ASSERT_EQ(v.Min(), s + 1);
  }
  v.Erase(262144);
  for (int64_t s = 5000; s < 262144; ++s) v.Erase(s);
  EXPECT_EQ(v.size(), 0);
  EXPECT_EQ(v.Min(), -1);
}

TEST(VacantSet, RandomizedAgainstStdSet) {
  std::mt19937_64 rng(20240611);
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE(round);
    VacantSet v;
    std::set<int64_t> ref;
    int64_t cap = 1 + static_cast<int64_t>(rng() % 300);
    if (round >= 3) cap = 1 + static_cast<int64_t>(rng() % 300000);
    v.Grow(cap);
    for (int op = 0; op < 20000; ++op) {
      const uint64_t r = rng() % 100;
      if (r < 1) {
        // Grow by up to 1000 (crossing word boundaries now and then).
        cap += 1 + static_cast<int64_t>(rng() % 1000);
        v.Grow(cap);
      } else {
        // Bias towards the low end so Min changes often.
        int64_t s = static_cast<int64_t>(rng() % static_cast<uint64_t>(cap));
        if (rng() % 2) s = s % std::max<int64_t>(1, cap / 16);
        if (r < 55) {
          v.Insert(s);
          ref.insert(s);
        } else if (r < 65) {
          // TakeMin: the lowest member, gone afterwards.
          const int64_t want = ref.empty() ? -1 : *ref.begin();
          ASSERT_EQ(v.TakeMin(), want) << "op " << op;
          if (want >= 0) ref.erase(want);
          s = std::max<int64_t>(want, 0);
        } else {
          v.Erase(s);
          ref.erase(s);
        }
        ASSERT_EQ(v.Contains(s), ref.count(s) == 1) << "slot " << s;
      }
      ASSERT_EQ(v.size(), static_cast<int64_t>(ref.size())) << "op " << op;
      ASSERT_EQ(v.Min(), ref.empty() ? -1 : *ref.begin()) << "op " << op;
    }
    for (int64_t s : std::vector<int64_t>(ref.begin(), ref.end())) {
      ASSERT_TRUE(v.Contains(s));
    }
  }
}

TEST(VacantSet, TakeMinEmptiesAMillionSlotSetInOrder) {
  // Every level's word empties and refills on the way: the clear on the way
  // up must stop exactly where a word stays non-empty.
  constexpr int64_t kCap = (int64_t{1} << 20) + 77;
  VacantSet v;
  v.Grow(kCap);
  for (int64_t s = kCap; s-- > 0;) {
    if (s % 3 != 1) v.Insert(s);
  }
  int64_t expected_size = v.size();
  for (int64_t want = 0; want < kCap; ++want) {
    if (want % 3 == 1) continue;
    ASSERT_EQ(v.TakeMin(), want);
    ASSERT_FALSE(v.Contains(want));
    ASSERT_EQ(v.size(), --expected_size);
  }
  EXPECT_EQ(v.TakeMin(), -1);
  EXPECT_EQ(v.Min(), -1);
  v.Insert(kCap - 1);  // the upper levels were cleared, not left stale
  EXPECT_EQ(v.Min(), kCap - 1);
  EXPECT_EQ(v.TakeMin(), kCap - 1);
  EXPECT_EQ(v.size(), 0);
}

}  // namespace
}  // namespace statecache

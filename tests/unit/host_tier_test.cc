// HostTier's rules: LRU order with guesses at the head, refiling, eviction
// order, erase, and resize keeping the most recent entries.
#include "daemon/core/host_tier.h"

#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace statecache {
namespace {

using Hashes = std::vector<int64_t>;

TEST(HostTierTest, AFullTierSpendsItsLeastRecentEntryFirst) {
  HostTier tier(3);
  EXPECT_EQ(tier.Insert(10, false).evicted_hash, -1);
  EXPECT_EQ(tier.Insert(11, false).evicted_hash, -1);
  EXPECT_EQ(tier.Insert(12, false).evicted_hash, -1);
  EXPECT_EQ(tier.Dump(), (Hashes{10, 11, 12}));
  // A read moves 10 to the tail: 11 is spent next, then 12.
  tier.Touch(tier.Find(10));
  const HostTier::Filed filed = tier.Insert(13, false);
  EXPECT_EQ(filed.evicted_hash, 11);
  EXPECT_EQ(tier.Find(11), -1);
  EXPECT_EQ(tier.Insert(14, false).evicted_hash, 12);
  EXPECT_EQ(tier.Dump(), (Hashes{10, 13, 14}));
  EXPECT_EQ(
      tier.counts(),
      (HostTierCounts{.demotions = 5, .evictions = 2, .hits = 1, .erased = 0}));
}

TEST(HostTierTest, EachHashHasItsOwnEntryAndEntriesStayInRange) {
  HostTier tier(4);
  std::set<int64_t> entries;
  for (int64_t h = 0; h < 4; ++h) entries.insert(tier.Insert(h, false).entry);
  EXPECT_EQ(entries, (std::set<int64_t>{0, 1, 2, 3}));
  // The spent entry is the one reused.
  const int64_t head_entry = tier.Find(0);
  EXPECT_EQ(tier.Insert(99, false).entry, head_entry);
  EXPECT_EQ(tier.Find(99), head_entry);
}

TEST(HostTierTest, AGuessGoesToTheHeadAndIsSpentFirst) {
  HostTier tier(3);
  tier.Insert(1, false);
  tier.Insert(2, false);
  tier.Insert(3, /*at_head=*/true);
  EXPECT_EQ(tier.Dump(), (Hashes{3, 1, 2}));
  EXPECT_EQ(tier.Insert(4, false).evicted_hash, 3);
}

TEST(HostTierTest, RefilingAHashReusesItsEntryAndMovesIt) {
  HostTier tier(3);
  const int64_t entry = tier.Insert(1, false).entry;
  tier.Insert(2, false);
  const HostTier::Filed again = tier.Insert(1, false);
  EXPECT_EQ(again.entry, entry);
  EXPECT_EQ(again.evicted_hash, -1);
  EXPECT_EQ(tier.size(), 2);
  EXPECT_EQ(tier.Dump(), (Hashes{2, 1}));
}

TEST(HostTierTest, EraseAndClearFreeEntriesForReuse) {
  HostTier tier(2);
  tier.Insert(1, false);
  const int64_t entry = tier.Insert(2, false).entry;
  EXPECT_TRUE(tier.Erase(2));
  EXPECT_FALSE(tier.Erase(2));
  EXPECT_EQ(tier.Find(2), -1);
  // The freed entry is used before anything is spent.
  const HostTier::Filed filed = tier.Insert(3, false);
  EXPECT_EQ(filed.entry, entry);
  EXPECT_EQ(filed.evicted_hash, -1);
  tier.Clear();
  EXPECT_EQ(tier.size(), 0);
  EXPECT_TRUE(tier.Dump().empty());
  EXPECT_EQ(tier.counts().erased, 3);
  EXPECT_EQ(tier.Insert(4, false).evicted_hash, -1);
  EXPECT_EQ(tier.Insert(5, false).evicted_hash, -1);
}

TEST(HostTierTest, AZeroCapacityTierFilesNothing) {
  HostTier tier(0);
  EXPECT_EQ(tier.Insert(1, false).entry, -1);
  EXPECT_EQ(tier.Find(1), -1);
  EXPECT_EQ(tier.counts().demotions, 0);
}

TEST(HostTierTest, ShrinkingKeepsTheMostRecentInOrderAndSaysWhereEachWent) {
  HostTier tier(5);
  std::vector<int64_t> entry_of(6, -1);
  for (int64_t h = 1; h <= 5; ++h) entry_of[h] = tier.Insert(h, false).entry;
  tier.Touch(tier.Find(2));  // order: 1 3 4 5 2
  const auto moves = tier.Resize(3);
  EXPECT_EQ(tier.capacity(), 3);
  EXPECT_EQ(tier.Dump(), (Hashes{4, 5, 2}));
  EXPECT_EQ(tier.counts().evictions, 2);
  ASSERT_EQ(moves.size(), 3u);
  // Each kept hash moved from its old entry to the one it is found at now.
  const Hashes kept = {4, 5, 2};
  for (size_t i = 0; i < moves.size(); ++i) {
    EXPECT_EQ(moves[i].first, entry_of[kept[i]]);
    EXPECT_EQ(moves[i].second, tier.Find(kept[i]));
    EXPECT_LT(moves[i].second, 3);
  }
  // Growing keeps everything and leaves room.
  tier.Resize(6);
  EXPECT_EQ(tier.Dump(), (Hashes{4, 5, 2}));
  for (int64_t h = 10; h < 13; ++h) {
    EXPECT_EQ(tier.Insert(h, false).evicted_hash, -1);
  }
  EXPECT_EQ(tier.Insert(13, false).evicted_hash, 4);
}

}  // namespace
}  // namespace statecache

// Eviction::kSecondChance: a checkpoint resumed from is passed over once;
// kLru (the reference's rule) spends the head whatever was read.
#include <cstdint>
#include <vector>

#include "daemon/core/slot_pool.h"
#include "gtest/gtest.h"

namespace statecache {
namespace {

// A pool of 3 slots, each holding a known checkpoint, filed in slot order
// (slot 0 at the LRU head).
SlotPool ThreeCheckpoints(Eviction eviction) {
  SlotPool pool = *SlotPool::Create(
      3, *StateTransfer::Create(TransferKind::kFork, 1, true));
  pool.SetEviction(eviction);
  for (int64_t slot = 0; slot < 3; ++slot) {
    EXPECT_TRUE(pool.RestoreCheckpoint(slot, 100 + slot, false).ok());
  }
  return pool;
}

std::vector<int64_t> PopAll(SlotPool& pool, int n) {
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(*pool.Pop());
  return out;
}

TEST(SlotPoolEvictionTest, LruSpendsTheHeadEvenIfItWasResumedFrom) {
  SlotPool pool = ThreeCheckpoints(Eviction::kLru);
  ASSERT_TRUE(pool.Promote(0).ok());
  EXPECT_EQ(PopAll(pool, 3), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(pool.Fates().evicted, 3);
}

TEST(SlotPoolEvictionTest, SecondChancePassesOverAResumedCheckpointOnce) {
  SlotPool pool = ThreeCheckpoints(Eviction::kSecondChance);
  ASSERT_TRUE(pool.Promote(0).ok());
  ASSERT_TRUE(pool.Promote(2).ok());
  // 0 goes to the tail (0 is after 2 now), 1 is spent; then 2 is passed
  // over and 0, its mark gone, is spent; then 2.
  EXPECT_EQ(PopAll(pool, 3), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(pool.Fates().evicted, 3);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(SlotPoolEvictionTest, AReFiledSlotLosesItsMark) {
  SlotPool pool = ThreeCheckpoints(Eviction::kSecondChance);
  ASSERT_TRUE(pool.Promote(0).ok());
  // Slot 0's checkpoint is dropped (its KV block evicted) and the slot
  // filed again with other content: what was read was the old content.
  ASSERT_TRUE(pool.Unindex(100).ok());
  ASSERT_TRUE(pool.RestoreCheckpoint(0, 200, false).ok());
  EXPECT_EQ(PopAll(pool, 3), (std::vector<int64_t>{1, 2, 0}));
}

TEST(SlotPoolEvictionTest, EveryCheckpointResumedSpendsAfterABoundedWalk) {
  SlotPool pool = ThreeCheckpoints(Eviction::kSecondChance);
  for (int64_t slot = 0; slot < 3; ++slot) ASSERT_TRUE(pool.Promote(slot).ok());
  // Each is passed over once, then the walk is back at 0, unmarked.
  EXPECT_EQ(PopAll(pool, 3), (std::vector<int64_t>{0, 1, 2}));
}

TEST(SlotPoolEvictionTest, Names) {
  EXPECT_STREQ(EvictionName(Eviction::kLru), "lru");
  EXPECT_STREQ(EvictionName(Eviction::kSecondChance), "second-chance");
}

}  // namespace
}  // namespace statecache

// HashIndex: the pool's open-addressing hash -> slot table.
#include "daemon/core/hash_index.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace statecache {
namespace {

std::vector<std::pair<int64_t, int64_t>> Entries(const HashIndex& index) {
  std::vector<std::pair<int64_t, int64_t>> out;
  index.ForEach([&out](int64_t k, int64_t s) { out.emplace_back(k, s); });
  std::sort(out.begin(), out.end());
  return out;
}

TEST(HashIndex, EmptyFindsNothing) {
  HashIndex index;
  EXPECT_EQ(index.size(), 0);
  EXPECT_EQ(index.Find(0), -1);
  EXPECT_FALSE(index.Contains(12345));
  EXPECT_FALSE(index.EraseIfFiledUnder(7, 0));
  EXPECT_TRUE(Entries(index).empty());
}

TEST(HashIndex, InsertOrAssignReturnsThePreviousSlot) {
  HashIndex index;
  EXPECT_EQ(index.InsertOrAssign(42, 3), -1);
  EXPECT_EQ(index.InsertOrAssign(42, 9), 3);
  EXPECT_EQ(index.size(), 1);
  EXPECT_EQ(index.Find(42), 9);
  EXPECT_EQ(index.InsertOrAssign(0, 0), -1);  // key 0 and slot 0 are valid
  EXPECT_EQ(index.Find(0), 0);
  EXPECT_EQ(index.size(), 2);
}

TEST(HashIndex, EraseOnlyWhenFiledUnderThatSlot) {
  HashIndex index;
  index.InsertOrAssign(5, 1);
  EXPECT_FALSE(index.EraseIfFiledUnder(5, 2));
  EXPECT_EQ(index.Find(5), 1);
  EXPECT_TRUE(index.EraseIfFiledUnder(5, 1));
  EXPECT_EQ(index.Find(5), -1);
  EXPECT_EQ(index.size(), 0);
  EXPECT_FALSE(index.EraseIfFiledUnder(5, 1));
}

// Keys that share their low bits, or follow each other, must neither be
// lost nor pile up: erasing from the middle of long probe runs is where a
// backward-shift delete goes wrong.
//
// Each test runs twice: with the default table, which holds new keys' bucket
// writes back only at 64k buckets and more (so its small tables write at
// once), and with one that holds them back at every size, so that recent
// keys are read, reassigned, erased and moved by other keys' erases while
// their writes are still pending.
class HashIndexTest : public testing::TestWithParam<bool> {
 protected:
  static HashIndex MakeIndex() {
    return GetParam() ? HashIndex(/*defer_min_buckets=*/16) : HashIndex();
  }
};

INSTANTIATE_TEST_SUITE_P(Writes, HashIndexTest, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& param) {
                           return param.param ? "AlwaysDeferred"
                                              : "DeferredFrom64kBuckets";
                         });

TEST_P(HashIndexTest, StructuredKeysSurviveChurn) {
  for (const int64_t stride :
       {int64_t{1}, int64_t{1} << 12, int64_t{1} << 32, int64_t{1} << 40}) {
    SCOPED_TRACE(stride);
    HashIndex index = MakeIndex();
    std::unordered_map<int64_t, int64_t> ref;
    for (int64_t i = 0; i < 5000; ++i) {
      index.InsertOrAssign(i * stride, i);
      ref[i * stride] = i;
    }
    for (int64_t i = 0; i < 5000; i += 3) {
      ASSERT_TRUE(index.EraseIfFiledUnder(i * stride, i));
      ref.erase(i * stride);
    }
    ASSERT_EQ(index.size(), static_cast<int64_t>(ref.size()));
    for (int64_t i = 0; i < 5000; ++i) {
      const auto it = ref.find(i * stride);
      ASSERT_EQ(index.Find(i * stride), it == ref.end() ? -1 : it->second)
          << "key " << i * stride;
    }
  }
}

TEST_P(HashIndexTest, RandomizedAgainstUnorderedMap) {
  std::mt19937_64 rng(20261130);
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(round);
    HashIndex index = MakeIndex();
    if (round % 2) index.Reserve(1000);
    std::unordered_map<int64_t, int64_t> ref;
    // A small key space, so inserts hit existing keys and erases hit often.
    const uint64_t keys = round < 2 ? 300 : 20000;
    for (int op = 0; op < 100000; ++op) {
      const int64_t key = static_cast<int64_t>(rng() % keys) * 7919;
      const int64_t slot = static_cast<int64_t>(rng() % 64);
      switch (rng() % 4) {
        case 0:
        case 1: {
          const auto it = ref.find(key);
          const int64_t prev = it == ref.end() ? -1 : it->second;
          ASSERT_EQ(index.InsertOrAssign(key, slot), prev) << "op " << op;
          ref[key] = slot;
          break;
        }
        case 2: {
          const auto it = ref.find(key);
          const bool filed = it != ref.end() && it->second == slot;
          ASSERT_EQ(index.EraseIfFiledUnder(key, slot), filed) << "op " << op;
          if (filed) ref.erase(it);
          break;
        }
        default: {
          const auto it = ref.find(key);
          ASSERT_EQ(index.Find(key), it == ref.end() ? -1 : it->second)
              << "op " << op;
        }
      }
      ASSERT_EQ(index.size(), static_cast<int64_t>(ref.size()));
      if (op % 5000 == 0) {  // every entry, pending writes included
        std::vector<std::pair<int64_t, int64_t>> want(ref.begin(), ref.end());
        std::sort(want.begin(), want.end());
        ASSERT_EQ(Entries(index), want) << "op " << op;
      }
    }
    std::vector<std::pair<int64_t, int64_t>> want(ref.begin(), ref.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(Entries(index), want);
  }
}

TEST_P(HashIndexTest, GrowsPastItsReservation) {
  HashIndex index = MakeIndex();
  index.Reserve(10);
  for (int64_t k = 0; k < 100000; ++k) index.InsertOrAssign(k * 977, k);
  EXPECT_EQ(index.size(), 100000);
  for (int64_t k = 0; k < 100000; ++k) ASSERT_EQ(index.Find(k * 977), k);
}

}  // namespace
}  // namespace statecache

// IntrusiveLru: the checkpoint LRU, an intrusive doubly linked list over slot
// indices, tested through a small owner of its node storage.
#include "daemon/core/checkpoint_lru.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <list>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace statecache {
namespace {

// The list with storage of its own and a membership flag per slot, as
// SlotPool keeps them in its per-slot records.
class CheckpointLru {
 public:
  static constexpr int32_t kNil = kNilSlot;

  // Makes room for slot indices [0, capacity). Never shrinks.
  void Grow(int64_t capacity) {
    if (capacity > static_cast<int64_t>(nodes_.size())) nodes_.resize(capacity);
  }
  int64_t size() const { return list_.size(); }
  bool empty() const { return list_.empty(); }
  bool Contains(int64_t slot) const { return nodes_[slot].linked; }
  int64_t Front() const { return list_.Front(); }
  int64_t Next(int64_t slot) const { return List::Next(nodes_, slot); }
  void PushFront(int64_t slot) {
    list_.PushFront(nodes_, slot);
    nodes_[slot].linked = true;
  }
  void PushBack(int64_t slot) {
    list_.PushBack(nodes_, slot);
    nodes_[slot].linked = true;
  }
  void Remove(int64_t slot) {
    list_.Remove(nodes_, slot);
    nodes_[slot].linked = false;
  }
  void Replace(int64_t slot, int64_t replacement) {
    list_.Replace(nodes_, slot, replacement);
    nodes_[slot].linked = false;
    nodes_[replacement].linked = true;
  }
  std::vector<int64_t> ToVector() const { return list_.ToVector(nodes_); }

 private:
  struct Node {
    LruLinks lru;
    bool linked = false;
  };
  using List = IntrusiveLru<Node>;
  std::vector<Node> nodes_;
  List list_;
};

using V = std::vector<int64_t>;

TEST(CheckpointLru, StartsEmpty) {
  CheckpointLru l;
  l.Grow(4);
  EXPECT_TRUE(l.empty());
  EXPECT_EQ(l.size(), 0);
  EXPECT_EQ(l.ToVector(), V{});
  for (int64_t s = 0; s < 4; ++s) EXPECT_FALSE(l.Contains(s));
}

TEST(CheckpointLru, PushFrontPushBackOrder) {
  CheckpointLru l;
  l.Grow(10);
  l.PushBack(3);
  l.PushBack(5);
  l.PushFront(7);
  l.PushBack(0);
  l.PushFront(9);
  EXPECT_EQ(l.ToVector(), (V{9, 7, 3, 5, 0}));
  EXPECT_EQ(l.size(), 5);
  EXPECT_EQ(l.Front(), 9);
  EXPECT_EQ(l.Next(9), 7);
  EXPECT_EQ(l.Next(5), 0);
  EXPECT_EQ(l.Next(0), CheckpointLru::kNil);
  EXPECT_TRUE(l.Contains(3));
  EXPECT_FALSE(l.Contains(4));
}

TEST(CheckpointLru, RemoveHeadMiddleTailAndOnly) {
  CheckpointLru l;
  l.Grow(10);
  for (int64_t s : {1, 2, 3, 4}) l.PushBack(s);
  l.Remove(2);  // middle
  EXPECT_EQ(l.ToVector(), (V{1, 3, 4}));
  l.Remove(1);  // head
  EXPECT_EQ(l.ToVector(), (V{3, 4}));
  EXPECT_EQ(l.Front(), 3);
  l.Remove(4);  // tail
  EXPECT_EQ(l.ToVector(), (V{3}));
  EXPECT_EQ(l.Next(3), CheckpointLru::kNil);
  l.Remove(3);  // only
  EXPECT_TRUE(l.empty());
  EXPECT_EQ(l.ToVector(), V{});
  EXPECT_FALSE(l.Contains(3));
  // Usable again after emptying, both ends.
  l.PushBack(2);
  l.PushFront(1);
  l.PushBack(3);
  EXPECT_EQ(l.ToVector(), (V{1, 2, 3}));
  // Re-adding a removed slot at the other end.
  l.Remove(1);
  l.PushBack(1);
  EXPECT_EQ(l.ToVector(), (V{2, 3, 1}));
}

TEST(CheckpointLru, ReplaceKeepsPosition) {
  CheckpointLru l;
  l.Grow(10);
  for (int64_t s : {4, 5, 6}) l.PushBack(s);
  l.Replace(5, 0);  // middle
  EXPECT_EQ(l.ToVector(), (V{4, 0, 6}));
  EXPECT_FALSE(l.Contains(5));
  EXPECT_TRUE(l.Contains(0));
  l.Replace(4, 9);  // head
  EXPECT_EQ(l.ToVector(), (V{9, 0, 6}));
  EXPECT_EQ(l.Front(), 9);
  l.Replace(6, 5);  // tail
  EXPECT_EQ(l.ToVector(), (V{9, 0, 5}));
  l.PushBack(6);  // the tail pointer moved with the replacement
  EXPECT_EQ(l.ToVector(), (V{9, 0, 5, 6}));
  EXPECT_EQ(l.size(), 4);
  CheckpointLru one;
  one.Grow(3);
  one.PushBack(2);
  one.Replace(2, 1);  // only element
  EXPECT_EQ(one.ToVector(), (V{1}));
  EXPECT_EQ(one.Front(), 1);
  one.PushFront(0);
  one.PushBack(2);
  EXPECT_EQ(one.ToVector(), (V{0, 1, 2}));
}

TEST(CheckpointLru, GrowKeepsLinks) {
  CheckpointLru l;
  l.Grow(3);
  l.PushBack(2);
  l.PushBack(0);
  l.Grow(1 << 20);
  EXPECT_EQ(l.ToVector(), (V{2, 0}));
  l.PushBack((1 << 20) - 1);
  l.PushFront(100000);
  EXPECT_EQ(l.ToVector(), (V{100000, 2, 0, (1 << 20) - 1}));
  l.Replace(0, 1);
  EXPECT_EQ(l.ToVector(), (V{100000, 2, 1, (1 << 20) - 1}));
  l.Grow(5);  // never shrinks
  EXPECT_TRUE(l.Contains((1 << 20) - 1));
}

TEST(CheckpointLru, RandomizedAgainstStdList) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(round);
    int64_t cap = 8 + static_cast<int64_t>(rng() % 200);
    CheckpointLru l;
    l.Grow(cap);
    std::list<int64_t> ref;
    auto in_ref = [&](int64_t s) {
      return std::find(ref.begin(), ref.end(), s) != ref.end();
    };
    for (int op = 0; op < 20000; ++op) {
      const uint64_t r = rng() % 100;
      const int64_t s =
          static_cast<int64_t>(rng() % static_cast<uint64_t>(cap));
      if (r < 1) {
        cap += static_cast<int64_t>(rng() % 16);
        l.Grow(cap);
      } else if (r < 30) {
        if (!in_ref(s)) {
          l.PushBack(s);
          ref.push_back(s);
        }
      } else if (r < 50) {
        if (!in_ref(s)) {
          l.PushFront(s);
          ref.push_front(s);
        }
      } else if (r < 80) {
        if (!ref.empty()) {
          // Remove a member: often the head (what pop spends).
          auto it = ref.begin();
          if (rng() % 2) std::advance(it, rng() % ref.size());
          const int64_t victim = *it;
          l.Remove(victim);
          ref.erase(it);
        }
      } else {
        if (!ref.empty() && !in_ref(s)) {
          auto it = ref.begin();
          std::advance(it, rng() % ref.size());
          l.Replace(*it, s);
          *it = s;
        }
      }
      ASSERT_EQ(l.size(), static_cast<int64_t>(ref.size())) << "op " << op;
      ASSERT_EQ(l.Contains(s), in_ref(s)) << "op " << op;
      if (!ref.empty()) {
        ASSERT_EQ(l.Front(), ref.front()) << "op " << op;
      }
      if (op % 97 == 0) {
        ASSERT_EQ(l.ToVector(), V(ref.begin(), ref.end())) << "op " << op;
      }
    }
    ASSERT_EQ(l.ToVector(), V(ref.begin(), ref.end()));
    // Walk with Front/Next too.
    V walked;
    if (!l.empty()) {
      for (int64_t s = l.Front(); s != CheckpointLru::kNil; s = l.Next(s)) {
        walked.push_back(s);
      }
    }
    ASSERT_EQ(walked, V(ref.begin(), ref.end()));
  }
}

}  // namespace
}  // namespace statecache

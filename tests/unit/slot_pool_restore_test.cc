// SlotPool's warm-restart half (slot_pool.h, "warm restart"): which
// checkpoints SavableCheckpoints offers and in what order, and how
// RestoreCheckpoint files them back so that a saved LRU order (speculative
// marks included) comes back exactly; every refusal leaves the pool as it
// was.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <ostream>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/slot_pool.h"
#include "gtest/gtest.h"
#include "pool_test_util.h"

namespace statecache {

bool operator==(const SlotPool::Spent& a, const SlotPool::Spent& b) {
  return a.slot == b.slot && a.hash == b.hash && a.speculative == b.speculative;
}
void PrintTo(const SlotPool::Spent& s, std::ostream* os) {
  *os << "{slot " << s.slot << " hash " << s.hash
      << (s.speculative ? " speculative" : "") << "}";
}

namespace {

using testing_util::Fork;
using testing_util::MakePool;
using testing_util::Must;
using testing_util::Seq;
using testing_util::V;
using Spents = std::vector<SlotPool::Spent>;

// Reserves one destination per (position, hash) and publishes them, with
// `seq` deciding the marks (nullopt: none). Returns the slots.
V Publish(SlotPool& pool,
          const std::vector<std::pair<int64_t, int64_t>>& positions,
          const std::optional<Sequence>& seq) {
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(Seq(-1, 1000), positions), "ReserveMidstep");
  EXPECT_EQ(r.size(), positions.size());
  Must(pool.PublishMidstep(r, seq), "PublishMidstep");
  V slots;
  for (const Reservation& x : r) slots.push_back(x.slot);
  return slots;
}

// A pool of 10 holding every kind of slot SavableCheckpoints must tell
// apart (hash_block_size 64):
//   slots 0, 1  free checkpoints 70, 71 (published plainly)
//   slot 2      a free speculative checkpoint 72 (at the LRU head)
//   slot 3      live, carrying hash 73: published, then claimed off the
//               LRU (a claimed slot keeps its hash, and stays indexed)
//   slots 4, 5  live, then fork-checkpointed: 5 first (hash 75, a guess),
//               then 4 (hash 74, at the anchor): both pinned, indexed
//   slots 6, 7  the owners the forks moved to (live)
SlotPool Populated() {
  SlotPool pool = MakePool(10, Fork(1, /*readable_midstep=*/true));
  EXPECT_EQ(Publish(pool, {{64, 70}, {128, 71}}, std::nullopt), (V{0, 1}));
  // No anchor: every position a guess, released to the LRU head.
  EXPECT_EQ(Publish(pool, {{192, 72}}, Seq(-1, 1000)), (V{2}));
  EXPECT_EQ(Publish(pool, {{256, 73}}, std::nullopt), (V{3}));
  Must(pool.Claim(3));  // live, hash 73 and all
  EXPECT_EQ(Must(pool.PopMany(2)), (V{4, 5}));
  // Slot 5 first, at a boundary (3 blocks = 192) that is not its anchor.
  CheckpointResult r5 = Must(pool.Checkpoint(Seq(5, 400, 320), 3, 75));
  EXPECT_EQ(r5.state_fork_src, 5);
  EXPECT_EQ(r5.state_slot, 6);
  CheckpointResult r4 = Must(pool.Checkpoint(Seq(4, 400, 320), 5, 74));
  EXPECT_EQ(r4.state_fork_src, 4);
  EXPECT_EQ(r4.state_slot, 7);
  EXPECT_TRUE(pool.CheckInvariants().ok());
  return pool;
}

TEST(SlotPoolRestore, SavableListsTheLruHeadFirstThenPinnedInSlotOrder) {
  SlotPool pool = Populated();
  const PoolSnapshot dump = pool.Dump();
  ASSERT_EQ(dump.checkpointed, (V{2, 0, 1}));  // the guess at the head
  ASSERT_EQ(dump.speculative, (V{2, 5}));
  const Spents want = {
      {2, 72, true},  {0, 70, false}, {1, 71, false},  // the LRU, head first
      {4, 74, false}, {5, 75, true},                   // pinned, slot order
  };
  EXPECT_EQ(pool.SavableCheckpoints(), want);
  // Live slots are not offered, whatever hash they carry: 3 (73) and the
  // fork owners 6, 7.
  for (const SlotPool::Spent& s : pool.SavableCheckpoints()) {
    EXPECT_NE(s.slot, 3);
    EXPECT_NE(s.hash, 73);
    EXPECT_LT(s.slot, 6);
  }
  ASSERT_EQ(Must(pool.Lookup(73)), 3);  // still indexed, yet not savable

  // Touching the LRU is seen: a promoted guess moves to the tail.
  Must(pool.Promote(2));
  EXPECT_EQ(pool.SavableCheckpoints(), (Spents{{0, 70, false},
                                               {1, 71, false},
                                               {2, 72, false},
                                               {4, 74, false},
                                               {5, 75, true}}));
  // An evicted checkpoint is gone from it (Pop spends vacant 8, 9 first,
  // then the head, 0).
  EXPECT_EQ(Must(pool.PopMany(3)), (V{8, 9, 0}));
  EXPECT_EQ(
      pool.SavableCheckpoints(),
      (Spents{{1, 71, false}, {2, 72, false}, {4, 74, false}, {5, 75, true}}));
  // A pinned checkpoint whose pins are returned joins the LRU.
  pool.ReleasePins();  // deferred: one more pass
  pool.ReleasePins();
  ASSERT_FALSE(Must(pool.IsPinned(4)));
  const Spents after = pool.SavableCheckpoints();
  ASSERT_EQ(after.size(), 4u);
  EXPECT_EQ(pool.Dump().checkpointed.size(), 4u);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].slot, pool.Dump().checkpointed[i]) << i;
  }

  // A disabled pool offers nothing.
  SlotPool off = MakePool(4, Fork(), 64, /*enabled=*/false);
  EXPECT_TRUE(off.SavableCheckpoints().empty());
}

TEST(SlotPoolRestore, RestoresBuildTheLruInCallOrderMarksIncluded) {
  SlotPool pool = MakePool(8, Fork());
  // Out of slot order, guesses among them: a speculative restore still goes
  // to the tail (unlike a release), so the call order is the LRU order.
  Must(pool.RestoreCheckpoint(5, 105, /*speculative=*/true));
  Must(pool.RestoreCheckpoint(1, 101, false));
  Must(pool.RestoreCheckpoint(6, 106, true));
  Must(pool.RestoreCheckpoint(0, 100, false));
  const PoolSnapshot dump = pool.Dump();
  EXPECT_EQ(dump.checkpointed, (V{5, 1, 6, 0}));
  EXPECT_EQ(dump.speculative, (V{5, 6}));
  EXPECT_EQ(dump.hash_to_slot,
            (testing_util::PV{{100, 0}, {101, 1}, {105, 5}, {106, 6}}));
  EXPECT_EQ(dump.free, (V{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(dump.fates, CheckpointFates{});  // counts no fate
  EXPECT_EQ(pool.NumFree(), 8);
  EXPECT_EQ(pool.GetOccupancy(), (Occupancy{8, 0, 4, 4}));
  EXPECT_EQ(pool.NumIndexed(), 4);
  EXPECT_TRUE(Must(pool.HoldsCheckpoint(6)));
  EXPECT_INVARIANTS(pool);
  // They behave as checkpoints: Pop spends vacant slots first (2, 3, 4, 7),
  // then the LRU head onward, counting evictions.
  EXPECT_EQ(Must(pool.PopMany(6)), (V{2, 3, 4, 7, 5, 1}));
  EXPECT_EQ(pool.Fates().evicted, 2);
  EXPECT_EQ(Must(pool.Lookup(105)), -1);
  EXPECT_EQ(Must(pool.Lookup(106)), 6);
  EXPECT_INVARIANTS(pool);
}

// What a restart does: the savable list of one pool restored, in order,
// into slots 0.. of a fresh one; the fresh pool's LRU and marks are the
// saved ones, and it spends them in the order the old one would have.
TEST(SlotPoolRestore, ASavedLruOrderComesBackExactly) {
  SlotPool old = Populated();
  // Return the pins, so every checkpoint is on the old pool's LRU.
  old.ReleasePins();
  old.ReleasePins();
  const Spents saved = old.SavableCheckpoints();
  ASSERT_EQ(saved.size(), 5u);

  SlotPool fresh = MakePool(10, Fork(1, true));
  for (size_t k = 0; k < saved.size(); ++k) {
    Must(fresh.RestoreCheckpoint(static_cast<int64_t>(k), saved[k].hash,
                                 saved[k].speculative));
  }
  const PoolSnapshot dump = fresh.Dump();
  EXPECT_EQ(dump.checkpointed, (V{0, 1, 2, 3, 4}));
  V want_marks;
  for (size_t k = 0; k < saved.size(); ++k) {
    if (saved[k].speculative) want_marks.push_back(static_cast<int64_t>(k));
  }
  EXPECT_EQ(dump.speculative, want_marks);
  ASSERT_FALSE(want_marks.empty());
  // The restored pool's own savable list is the saved one, relocated.
  Spents relocated = saved;
  for (size_t k = 0; k < relocated.size(); ++k) {
    relocated[k].slot = static_cast<int64_t>(k);
  }
  EXPECT_EQ(fresh.SavableCheckpoints(), relocated);
  // Hash for hash, both pools spend their checkpoints in the same order.
  std::vector<int64_t> old_order, fresh_order;
  for (SlotPool* pool : {&old, &fresh}) {
    pool->LogSpent(true);
    const int64_t free = pool->NumFree();
    Must(pool->PopMany(free));
    for (const SlotPool::Spent& s : pool->spent()) {
      (pool == &old ? old_order : fresh_order).push_back(s.hash);
    }
  }
  EXPECT_EQ(old_order.size(), saved.size());
  EXPECT_EQ(old_order, fresh_order);
  EXPECT_INVARIANTS(fresh);
}

TEST(SlotPoolRestore, RefusalsChangeNothing) {
  SlotPool pool = MakePool(6, Fork());
  Must(pool.RestoreCheckpoint(0, 50, false));
  Must(pool.RestoreCheckpoint(1, 51, true));
  const int64_t live = Must(pool.Pop());  // 2: lowest vacant
  ASSERT_EQ(live, 2);
  // A forked live slot: 2 pinned (hash 52), its owner moved to 3.
  const CheckpointResult forked =
      Must(pool.Checkpoint(Seq(2, 200, 128), 2, 52));
  ASSERT_EQ(forked.state_fork_src, 2);
  const PoolSnapshot before = pool.Dump();

  struct Case {
    const char* what;
    int64_t slot;
    int64_t hash;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {"a free checkpoint's slot", 0, 60,
       absl::StatusCode::kFailedPrecondition},
      {"a pinned checkpoint's slot", 2, 60,
       absl::StatusCode::kFailedPrecondition},
      {"a live slot", forked.state_slot, 60,
       absl::StatusCode::kFailedPrecondition},
      {"a hash filed elsewhere (free)", 4, 51,
       absl::StatusCode::kFailedPrecondition},
      {"a hash filed elsewhere (pinned)", 4, 52,
       absl::StatusCode::kFailedPrecondition},
      {"a negative hash", 4, -1, absl::StatusCode::kInvalidArgument},
      {"a slot out of range", 6, 60, absl::StatusCode::kInvalidArgument},
      {"a negative slot", -1, 60, absl::StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    for (bool speculative : {false, true}) {
      const absl::Status st =
          pool.RestoreCheckpoint(c.slot, c.hash, speculative);
      EXPECT_EQ(st.code(), c.code) << c.what << ": " << st;
      EXPECT_EQ(pool.Dump(), before) << c.what;
    }
  }
  EXPECT_INVARIANTS(pool);
  // Still usable: a vacant slot and a new hash.
  Must(pool.RestoreCheckpoint(4, 60, false));
  EXPECT_EQ(pool.Dump().checkpointed, (V{0, 1, 4}));

  // A slot that once held a checkpoint and went back vacant is fine.
  SlotPool reused = MakePool(3, Fork());
  Must(reused.RestoreCheckpoint(0, 7, false));
  Must(reused.Invalidate(0));
  ASSERT_EQ(Must(reused.Lookup(7)), -1);
  Must(reused.RestoreCheckpoint(0, 7, true));
  EXPECT_EQ(reused.Dump().checkpointed, (V{0}));
  EXPECT_EQ(reused.Dump().speculative, (V{0}));
  EXPECT_INVARIANTS(reused);

  // A disabled pool refuses every restore.
  SlotPool off = MakePool(4, Fork(), 64, /*enabled=*/false);
  const PoolSnapshot off_before = off.Dump();
  EXPECT_EQ(off.RestoreCheckpoint(0, 1, false).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(off.Dump(), off_before);
}

}  // namespace
}  // namespace statecache

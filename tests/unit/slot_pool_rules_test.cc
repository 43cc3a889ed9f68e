// One or more tests per rule the reference pool's docstrings state
// (shared/reference/state_slot_pool.py, with corrections.py). Every full-state
// expectation (EXPECT_DUMP) is the reference's own `dump` output for the same
// call sequence, as run_trace.py prints it.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/slot_pool.h"
#include "gtest/gtest.h"
#include "pool_test_util.h"

namespace statecache {
namespace {

using testing_util::Fork;
using testing_util::MakePool;
using testing_util::Must;
using testing_util::PV;
using testing_util::Replay;
using testing_util::Seq;
using testing_util::V;

// A seq the pool applies to, with no anchor (only used to gate reserve).
Sequence AnySeq() { return Seq(-1, 1000); }

// Reserves a destination for each (position, hash) and publishes them with
// seq=nullopt (nothing demoted): they become checkpoints at the LRU tail in
// the given order. Returns the slots.
V PublishPlain(SlotPool& pool,
               const std::vector<std::pair<int64_t, int64_t>>& positions) {
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(AnySeq(), positions), "ReserveMidstep");
  if (r.size() != positions.size()) {
    throw std::runtime_error("PublishPlain: short reservation");
  }
  Must(pool.PublishMidstep(r, std::nullopt), "PublishMidstep");
  V slots;
  for (const Reservation& x : r) slots.push_back(x.slot);
  return slots;
}

// ------------------------------ free list -------------------------------- //

TEST(SlotPoolRules, PopTakesLowestVacantFirst) {
  SlotPool pool = MakePool(6, Fork());
  EXPECT_EQ(Must(pool.PopMany(3)), (V{0, 1, 2}));
  Must(pool.Release(1));
  Must(pool.Release(0));
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_EQ(Must(pool.Pop()), 1);
  EXPECT_EQ(Must(pool.Pop()), 3);
  Must(pool.Release(2));
  EXPECT_EQ(Must(pool.Pop()), 2);
  EXPECT_EQ(pool.NumFree(), 2);
  EXPECT_TRUE(Must(pool.HasFree(2)));
  EXPECT_FALSE(Must(pool.HasFree(3)));
  EXPECT_TRUE(Must(pool.HasFree(0)));
  EXPECT_TRUE(Must(pool.IsFree(4)));
  EXPECT_FALSE(Must(pool.IsFree(2)));
  EXPECT_FALSE(Must(pool.HoldsCheckpoint(4)));
  EXPECT_EQ(pool.Fates(), CheckpointFates{});
  EXPECT_INVARIANTS(pool);
}

// The caller-storage forms decide exactly what the vector forms do.
TEST(SlotPoolRules, SpanFormsMatchTheVectorForms) {
  SlotPool a = MakePool(6, Fork(1, true));
  SlotPool b = MakePool(6, Fork(1, true));
  for (SlotPool* pool : {&a, &b}) {
    PublishPlain(*pool, {{64, 7}, {128, 8}});  // slots 0, 1 checkpointed
  }
  int64_t room[5] = {-9, -9, -9, -9, -9};
  Must(a.PopMany(5, absl::MakeSpan(room)));
  EXPECT_EQ(V(room, room + 5), Must(b.PopMany(5)));
  Must(a.ReleaseMany(V(room, room + 5)));
  Must(b.ReleaseMany(V(room, room + 5)));
  const std::vector<std::pair<int64_t, int64_t>> positions = {
      {64, 21},  {128, 22}, {192, 23}, {256, 24},
      {320, 25}, {384, 26}, {448, 27}};
  std::vector<Reservation> reserved(positions.size() + 1);
  const int64_t n =
      Must(a.ReserveMidstep(AnySeq(), positions, absl::MakeSpan(reserved)));
  reserved.resize(n);
  EXPECT_EQ(n, 6);  // one short: counted as a drop
  EXPECT_EQ(reserved, Must(b.ReserveMidstep(AnySeq(), positions)));
  EXPECT_EQ(a.Dump(), b.Dump());
  EXPECT_INVARIANTS(a);
}

TEST(SlotPoolRules, VacantIsSpentBeforeAnyCheckpoint) {
  SlotPool pool = MakePool(4, Fork());
  EXPECT_EQ(Must(pool.Pop()), 0);
  // Anchor 640 == 10 blocks * 64: a known resume point, filed at the tail.
  EXPECT_EQ(Must(pool.Checkpoint(Seq(0, 900, 640, 0), 10, 100)),
            (CheckpointResult{1, 0}));
  pool.ReleasePins();
  pool.ReleasePins();
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[0,2,3],"hash_to_slot":[[100,0]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[100,-1,-1,-1],"speculative":[]})");
  EXPECT_TRUE(Must(pool.HoldsCheckpoint(0)));
  // Slot 0 is the lowest free index but holds a checkpoint: 2 and 3 go first.
  EXPECT_EQ(Must(pool.Pop()), 2);
  EXPECT_EQ(Must(pool.Pop()), 3);
  EXPECT_EQ(pool.Fates().evicted, 0);
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_EQ(pool.Fates().evicted, 1);
  EXPECT_EQ(Must(pool.Lookup(100)), -1);
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":1,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[],"hash_to_slot":[],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, LruHeadCheckpointIsSpentFirstAndCountedEvicted) {
  SlotPool pool = MakePool(4, Fork(1, true));
  EXPECT_EQ(PublishPlain(pool, {{64, 11}, {128, 12}, {192, 13}}), (V{0, 1, 2}));
  EXPECT_EQ(pool.Dump().checkpointed, (V{0, 1, 2}));
  EXPECT_EQ(Must(pool.Pop()), 3);  // the vacant one
  EXPECT_EQ(Must(pool.Pop()), 0);  // LRU head
  EXPECT_EQ(pool.Fates().evicted, 1);
  EXPECT_EQ(Must(pool.Pop()), 1);
  EXPECT_EQ(pool.Fates().evicted, 2);
  EXPECT_EQ(Must(pool.Lookup(11)), -1);
  EXPECT_EQ(Must(pool.Lookup(12)), -1);
  EXPECT_EQ(Must(pool.Lookup(13)), 2);
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[2],"checkpoints_dropped":0,"checkpoints_evicted":2,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[],"free":[2],"hash_to_slot":[[13,2]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[-1,-1,13,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, SpeculativeSlotsAreFiledAtLruHeadOnRelease) {
  SlotPool pool = MakePool(5, Fork(1, true));
  const Sequence anchored = Seq(-1, 1000, 128, 0);
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(anchored, {{64, 11}, {128, 12}, {192, 13}}));
  ASSERT_EQ(
      r, (std::vector<Reservation>{{0, 64, 11}, {1, 128, 12}, {2, 192, 13}}));
  Must(pool.PublishMidstep(r, anchored));
  // 64 and 192 are guesses (head), 128 is the anchor (tail).
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[2,0,1],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3,4],"hash_to_slot":[[11,0],[12,1],[13,2]],"num_slots":5,"pinned":[],"relocations":[],"slot_hash":[11,12,13,-1,-1],"speculative":[0,2]})");
  // A resumed slot marked speculative goes back to the head too.
  Must(pool.Claim(1));
  Must(pool.MarkSpeculative(1));
  Must(pool.Release(1));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1,2,0],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3,4],"hash_to_slot":[[11,0],[12,1],[13,2]],"num_slots":5,"pinned":[],"relocations":[],"slot_hash":[11,12,13,-1,-1],"speculative":[0,1,2]})");
  EXPECT_EQ(Must(pool.Pop()), 3);
  EXPECT_EQ(Must(pool.Pop()), 4);
  EXPECT_EQ(Must(pool.Pop()), 1);  // head: the last speculative release
  EXPECT_EQ(pool.Fates().evicted, 1);
  // Popping a slot clears its mark.
  EXPECT_EQ(pool.Dump().speculative, (V{0, 2}));
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, ReleasingAVacantSlotDropsItsSpeculativeMark) {
  SlotPool pool = MakePool(3, Fork(1, true));
  EXPECT_EQ(Must(pool.Pop()), 0);
  Must(pool.MarkSpeculative(0));
  EXPECT_EQ(pool.Dump().speculative, (V{0}));
  Must(pool.Release(0));
  EXPECT_EQ(pool.Dump().speculative, (V{}));
  EXPECT_EQ(pool.Dump().checkpointed, (V{}));
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, PromoteMovesFreeCheckpointToTail) {
  SlotPool pool = MakePool(5, Fork(1, true));
  const Sequence no_anchor = Seq(-1, 1000, 0, 0);
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(no_anchor, {{64, 11}, {128, 12}, {192, 13}}));
  Must(pool.PublishMidstep(r, no_anchor));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[2,1,0],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3,4],"hash_to_slot":[[11,0],[12,1],[13,2]],"num_slots":5,"pinned":[],"relocations":[],"slot_hash":[11,12,13,-1,-1],"speculative":[0,1,2]})");  // all guesses: [2,1,0]
  Must(pool.Promote(1));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[2,0,1],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3,4],"hash_to_slot":[[11,0],[12,1],[13,2]],"num_slots":5,"pinned":[],"relocations":[],"slot_hash":[11,12,13,-1,-1],"speculative":[0,2]})");  // 1 to the tail, mark gone
  // Promoting an unmarked slot (again 1; and vacant 3) changes nothing.
  const PoolSnapshot before = pool.Dump();
  Must(pool.Promote(1));
  Must(pool.Promote(3));
  EXPECT_EQ(pool.Dump(), before);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, PromoteOfLiveMarkedSlotClearsMarkOnly) {
  SlotPool pool = MakePool(5, Fork(1, true));
  PublishPlain(pool, {{64, 11}, {128, 12}});
  const int64_t live = Must(pool.Pop());
  ASSERT_EQ(live, 2);
  Must(pool.MarkSpeculative(live));
  EXPECT_EQ(pool.Dump().speculative, (V{2}));
  Must(pool.Promote(live));
  EXPECT_EQ(pool.Dump().speculative, (V{}));
  EXPECT_EQ(pool.Dump().checkpointed, (V{0, 1}));
  EXPECT_FALSE(Must(pool.IsFree(live)));
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, MarkAndPromoteAreNoOpsOnDisabledPool) {
  SlotPool pool = MakePool(4, Fork(1, true), 64, /*enabled=*/false);
  EXPECT_FALSE(pool.enabled());
  EXPECT_EQ(Must(pool.Pop()), 0);
  const PoolSnapshot before = pool.Dump();
  Must(pool.MarkSpeculative(0));
  Must(pool.MarkSpeculative(2));
  EXPECT_EQ(pool.Dump(), before);
  Must(pool.Promote(0));
  Must(pool.Promote(2));
  EXPECT_EQ(pool.Dump(), before);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, ResumeRefreshesLruPosition) {
  SlotPool pool = MakePool(4, Fork(1, true));
  PublishPlain(pool, {{64, 11}, {128, 12}, {192, 13}});
  EXPECT_EQ(pool.Dump().checkpointed, (V{0, 1, 2}));
  Must(pool.Claim(0));
  // Claim keeps the hash on the live slot (reference quirk).
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1,2],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[],"free":[1,2,3],"hash_to_slot":[[11,0],[12,1],[13,2]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[11,12,13,-1],"speculative":[]})");
  EXPECT_FALSE(Must(pool.HoldsCheckpoint(0)));
  EXPECT_EQ(Must(pool.Lookup(11)), 0);
  Must(pool.Release(0));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1,2,0],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3],"hash_to_slot":[[11,0],[12,1],[13,2]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[11,12,13,-1],"speculative":[]})");  // [1,2,0]
  EXPECT_EQ(Must(pool.Pop()), 3);
  EXPECT_EQ(Must(pool.Pop()), 1);
  EXPECT_EQ(pool.Fates().evicted, 1);
  EXPECT_INVARIANTS(pool);
}

// -------------------------------- pins ----------------------------------- //

TEST(SlotPoolRules, ReleasePinsKeepsDeferredOneMorePassAndReleasesInSlotOrder) {
  SlotPool pool = MakePool(5, Fork(1, true));
  PublishPlain(pool, {{64, 10}, {128, 11}, {192, 12}, {256, 13}});
  Must(pool.Claim(3));
  Must(pool.Claim(1));
  Must(pool.Claim(2));
  Must(pool.Pin(3, false));
  Must(pool.Pin(1, false));
  Must(pool.Pin(1, false));
  Must(pool.Pin(2, true));
  EXPECT_EQ(Must(pool.PinCount(1)), 2);
  EXPECT_EQ(Must(pool.PinCount(0)), 0);
  EXPECT_TRUE(Must(pool.IsPinned(2)));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":4,"checkpoints_orphaned":0,"deferred":[2],"free":[0,4],"hash_to_slot":[[10,0],[11,1],[12,2],[13,3]],"num_slots":5,"pinned":[[1,2],[2,1],[3,1]],"relocations":[],"slot_hash":[10,11,12,13,-1],"speculative":[]})");
  pool.ReleasePins();
  // 1 and 3 go back once each, 1 first (slot order), to the LRU tail; 2 stays.
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0,1,3],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":4,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,3,4],"hash_to_slot":[[10,0],[11,1],[12,2],[13,3]],"num_slots":5,"pinned":[[2,1]],"relocations":[],"slot_hash":[10,11,12,13,-1],"speculative":[]})");
  EXPECT_TRUE(Must(pool.IsPinned(2)));
  EXPECT_FALSE(Must(pool.IsPinned(1)));
  pool.ReleasePins();
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0,1,3,2],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":4,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3,4],"hash_to_slot":[[10,0],[11,1],[12,2],[13,3]],"num_slots":5,"pinned":[],"relocations":[],"slot_hash":[10,11,12,13,-1],"speculative":[]})");
  const PoolSnapshot before = pool.Dump();
  pool.ReleasePins();  // nothing pinned: no-op
  EXPECT_EQ(pool.Dump(), before);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, ReleasePinsOrderIsSlotOrderNotPinOrder) {
  SlotPool pool = MakePool(6, Fork(1, true));
  PublishPlain(pool, {{64, 20}, {128, 21}, {192, 22}, {256, 23}});
  for (int64_t s : {3, 0, 2, 1}) Must(pool.Claim(s));
  for (int64_t s : {3, 0, 2, 1}) Must(pool.Pin(s, false));
  pool.ReleasePins();
  EXPECT_EQ(pool.Dump().checkpointed, (V{0, 1, 2, 3}));
  EXPECT_EQ(pool.Dump().pinned, (PV{}));
  EXPECT_INVARIANTS(pool);
}

// The same with 300 pins, past the clock's radix-sort cut-over (64), with
// some deferred pins interleaved that must stay put.
TEST(SlotPoolRules, ReleasePinsOrderIsSlotOrderForManyPins) {
  constexpr int64_t kPins = 300;
  SlotPool pool = MakePool(1024, Fork(1, true));
  std::vector<std::pair<int64_t, int64_t>> positions;
  for (int64_t i = 0; i < kPins; ++i) positions.push_back({64 * (i + 1), i});
  V slots = PublishPlain(pool, positions);
  ASSERT_EQ(slots.size(), static_cast<size_t>(kPins));
  V shuffled = slots;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(9));
  for (int64_t s : shuffled) Must(pool.Claim(s));
  // Every seventh slot's pin is read by the next batch: it survives a pass.
  for (int64_t s : shuffled) Must(pool.Pin(s, s % 7 == 0));
  pool.ReleasePins();
  V released, deferred;
  for (int64_t s : slots) (s % 7 == 0 ? deferred : released).push_back(s);
  std::sort(released.begin(), released.end());
  EXPECT_EQ(pool.Dump().checkpointed, released);
  EXPECT_EQ(pool.Dump().pinned.size(), deferred.size());
  pool.ReleasePins();
  V all = released;
  std::sort(deferred.begin(), deferred.end());
  all.insert(all.end(), deferred.begin(), deferred.end());
  EXPECT_EQ(pool.Dump().checkpointed, all);
  EXPECT_EQ(pool.Dump().pinned, (PV{}));
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, UnpinDropsOneReferenceWithoutFreeing) {
  SlotPool pool = MakePool(3, Fork());
  const int64_t s = Must(pool.Pop());
  Must(pool.Pin(s, true));
  Must(pool.Pin(s, false));
  Must(pool.Unpin(s));
  EXPECT_EQ(pool.Dump().pinned, (PV{{s, 1}}));
  EXPECT_EQ(pool.Dump().deferred, (V{s}));
  Must(pool.Unpin(s));
  EXPECT_EQ(pool.Dump().pinned, (PV{}));
  EXPECT_EQ(pool.Dump().deferred, (V{}));  // the last unpin clears deferred
  EXPECT_FALSE(Must(pool.IsFree(s)));      // taken over, not freed
  EXPECT_INVARIANTS(pool);
}

// ReleasePin and EndDeferral (the daemon's per-session share of the pin
// clock; no reference counterpart): ReleasePin drops `count` pins and frees
// at zero as ReleasePins would; EndDeferral only ends the deferral.
TEST(SlotPoolRules, ReleasePinDropsCountAndFreesAtZero) {
  SlotPool pool = MakePool(4, Fork());
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_EQ(Must(pool.Checkpoint(Seq(0, 900, 0, 832), 13, 1001)),
            (CheckpointResult{1, 0}));
  Must(pool.Pin(0, false));
  EXPECT_EQ(pool.Dump().pinned, (PV{{0, 2}}));
  EXPECT_EQ(pool.Dump().deferred, (V{0}));
  Must(pool.EndDeferral(0));
  EXPECT_EQ(pool.Dump().pinned, (PV{{0, 2}}));
  EXPECT_EQ(pool.Dump().deferred, (V{}));
  Must(pool.ReleasePin(0, 1));
  EXPECT_EQ(pool.Dump().pinned, (PV{{0, 1}}));
  EXPECT_FALSE(Must(pool.IsFree(0)));
  Must(pool.ReleasePin(0, 1));
  EXPECT_EQ(pool.Dump().pinned, (PV{}));
  EXPECT_TRUE(Must(pool.HoldsCheckpoint(0)));
  EXPECT_EQ(pool.Dump().checkpointed, (V{0}));
  EXPECT_EQ(pool.NumIndexed(), 1);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, EndDeferralLetsTheNextPassFreeIt) {
  SlotPool pool = MakePool(4, Fork());
  EXPECT_EQ(Must(pool.Pop()), 0);
  Must(pool.Checkpoint(Seq(0, 900, 0, 832), 13, 1001));
  Must(pool.EndDeferral(0));
  pool.ReleasePins();  // one pass instead of two
  EXPECT_EQ(pool.Dump().pinned, (PV{}));
  EXPECT_EQ(pool.Dump().checkpointed, (V{0}));
  // On an unpinned slot it is a no-op.
  const PoolSnapshot before = pool.Dump();
  Must(pool.EndDeferral(2));
  EXPECT_EQ(pool.Dump(), before);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, DropReaderFreesOnlyOnLastReader) {
  SlotPool pool = MakePool(4, Fork(1, true));
  PublishPlain(pool, {{64, 11}});
  Must(pool.Claim(0));
  Must(pool.Pin(0, false));
  Must(pool.Pin(0, false));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[1,2,3],"hash_to_slot":[[11,0]],"num_slots":4,"pinned":[[0,2]],"relocations":[],"slot_hash":[11,-1,-1,-1],"speculative":[]})");
  Must(pool.DropReader(0));  // count 2 -> 1: still pinned, not free
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[1,2,3],"hash_to_slot":[[11,0]],"num_slots":4,"pinned":[[0,1]],"relocations":[],"slot_hash":[11,-1,-1,-1],"speculative":[]})");
  EXPECT_TRUE(Must(pool.IsPinned(0)));
  EXPECT_FALSE(Must(pool.IsFree(0)));
  Must(pool.DropReader(0));  // last reader: back on the free list
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3],"hash_to_slot":[[11,0]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[11,-1,-1,-1],"speculative":[]})");
  // -1 and an unpinned slot are no-ops.
  const PoolSnapshot before = pool.Dump();
  Must(pool.DropReader(-1));
  Must(pool.DropReader(2));
  Must(pool.DropReader(0));
  EXPECT_EQ(pool.Dump(), before);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, DropReaderFreesForkSourceEarly) {
  SlotPool pool = MakePool(4, Fork(1, true));
  PublishPlain(pool, {{64, 11}});
  const int64_t x = Must(pool.Pop());
  ASSERT_EQ(x, 1);
  EXPECT_EQ(Must(pool.Checkpoint(Seq(x, 900, 0, 832), 13, 55)),
            (CheckpointResult{2, 1}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[1],"free":[0,3],"hash_to_slot":[[11,0],[55,1]],"num_slots":4,"pinned":[[1,1]],"relocations":[],"slot_hash":[11,55,-1,-1],"speculative":[]})");
  Must(pool.DropReader(x));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0,1],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,3],"hash_to_slot":[[11,0],[55,1]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[11,55,-1,-1],"speculative":[]})");  // freed, deferred gone
  EXPECT_INVARIANTS(pool);
}

// ------------------------------ retire_top ------------------------------- //

TEST(SlotPoolRules, RetireTopVacantTop) {
  SlotPool pool = MakePool(4, Fork());
  EXPECT_EQ(Must(pool.Pop()), 0);
  std::optional<SlotRetirement> r = Must(pool.RetireTop());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, (SlotRetirement{3, -1, false}));
  EXPECT_EQ(pool.num_slots(), 3);
  EXPECT_EQ(pool.capacity(), 4);
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":0,"checkpoints_orphaned":0,"deferred":[],"free":[1,2],"hash_to_slot":[],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RetireTopPinnedTopIsNullopt) {
  SlotPool pool = MakePool(4, Fork());
  EXPECT_EQ(Must(pool.PopMany(3)), (V{0, 1, 2}));
  Must(pool.Release(2));
  EXPECT_EQ(Must(pool.Pop()), 2);
  EXPECT_EQ(Must(pool.Pop()), 3);
  Must(pool.Pin(3, false));
  Must(pool.Release(1));  // somewhere to go, but the top is pinned
  const PoolSnapshot before = pool.Dump();
  EXPECT_EQ(Must(pool.RetireTop()), std::nullopt);
  EXPECT_EQ(pool.Dump(), before);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RetireTopLiveTopWithNoTargetIsNullopt) {
  SlotPool pool = MakePool(3, Fork());
  Must(pool.PopMany(3));
  const PoolSnapshot before = pool.Dump();
  EXPECT_EQ(Must(pool.RetireTop()), std::nullopt);
  EXPECT_EQ(pool.Dump(), before);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RetireTopLiveTopRelocatesToLowestVacant) {
  SlotPool pool = MakePool(4, Fork());
  Must(pool.PopMany(4));
  Must(pool.Release(2));
  Must(pool.Release(1));
  std::optional<SlotRetirement> r = Must(pool.RetireTop());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, (SlotRetirement{3, 1, false}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":0,"checkpoints_orphaned":0,"deferred":[],"free":[2],"hash_to_slot":[],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1,-1],"speculative":[]})");
  // The pool does not log the copy itself: the caller records it.
  EXPECT_TRUE(pool.TakeRelocations().empty());
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RetireTopRehomesCheckpointKeepingLruPositionAndMark) {
  SlotPool pool = MakePool(5, Fork(1, true));
  EXPECT_EQ(Must(pool.PopMany(2)), (V{0, 1}));
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(AnySeq(), {{64, 12}, {128, 13}, {192, 14}}));
  ASSERT_EQ(
      r, (std::vector<Reservation>{{2, 64, 12}, {3, 128, 13}, {4, 192, 14}}));
  Must(pool.PublishMidstep({r[0]}, std::nullopt));
  Must(pool.PublishMidstep({r[2]}, std::nullopt));
  Must(pool.PublishMidstep({r[1]}, std::nullopt));
  Must(pool.MarkSpeculative(4));  // a mark on a free checkpoint: no move yet
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[2,4,3],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[],"free":[2,3,4],"hash_to_slot":[[12,2],[13,3],[14,4]],"num_slots":5,"pinned":[],"relocations":[],"slot_hash":[-1,-1,12,13,14],"speculative":[4]})");
  Must(pool.Release(0));
  std::optional<SlotRetirement> ret = Must(pool.RetireTop());
  ASSERT_TRUE(ret.has_value());
  EXPECT_EQ(*ret, (SlotRetirement{4, 0, true}));
  // 14 now lives at 0, in 4's LRU place, and carries 4's mark.
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[2,0,3],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[],"free":[0,2,3],"hash_to_slot":[[12,2],[13,3],[14,0]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[14,-1,12,13,-1],"speculative":[0]})");
  EXPECT_EQ(Must(pool.Lookup(14)), 0);
  EXPECT_EQ(pool.Fates().evicted, 0);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RetireTopSpendsLastCheckpointWhenNothingElseFree) {
  SlotPool pool = MakePool(2, Fork(1, true));
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_EQ(PublishPlain(pool, {{64, 21}}), (V{1}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[1],"hash_to_slot":[[21,1]],"num_slots":2,"pinned":[],"relocations":[],"slot_hash":[-1,21],"speculative":[]})");
  std::optional<SlotRetirement> r = Must(pool.RetireTop());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, (SlotRetirement{1, -1, true}));
  EXPECT_EQ(pool.Fates().evicted, 1);  // corrections.py #1
  EXPECT_EQ(Must(pool.Lookup(21)), -1);
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":1,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[],"hash_to_slot":[],"num_slots":1,"pinned":[],"relocations":[],"slot_hash":[-1,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RetireTopLiveTopSpendsLruHeadCheckpointAsTarget) {
  SlotPool pool = MakePool(3, Fork(1, true));
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(AnySeq(), {{64, 31}, {128, 32}}));
  EXPECT_EQ(Must(pool.Pop()), 2);
  Must(pool.PublishMidstep(r, std::nullopt));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0,1],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[0,1],"hash_to_slot":[[31,0],[32,1]],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[31,32,-1],"speculative":[]})");
  std::optional<SlotRetirement> ret = Must(pool.RetireTop());
  ASSERT_TRUE(ret.has_value());
  EXPECT_EQ(*ret, (SlotRetirement{2, 0, false}));
  EXPECT_EQ(pool.Fates().evicted, 1);  // corrections.py #1
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1],"checkpoints_dropped":0,"checkpoints_evicted":1,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[1],"hash_to_slot":[[32,1]],"num_slots":2,"pinned":[],"relocations":[],"slot_hash":[-1,32,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RetireTopCheckpointSpendsLruHeadAndDropsItsStaleMark) {
  SlotPool pool = MakePool(3, Fork(1, true));
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_EQ(PublishPlain(pool, {{64, 41}, {128, 42}}), (V{1, 2}));
  Must(pool.MarkSpeculative(1));  // the target's mark must not stick
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1,2],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[1,2],"hash_to_slot":[[41,1],[42,2]],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,41,42],"speculative":[1]})");
  std::optional<SlotRetirement> ret = Must(pool.RetireTop());
  ASSERT_TRUE(ret.has_value());
  EXPECT_EQ(*ret, (SlotRetirement{2, 1, true}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1],"checkpoints_dropped":0,"checkpoints_evicted":1,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[1],"hash_to_slot":[[42,1]],"num_slots":2,"pinned":[],"relocations":[],"slot_hash":[-1,42,-1],"speculative":[]})");  // speculative [] (corrections #2)
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RetireTopCheckpointCarriesItsMarkOntoSpentTarget) {
  SlotPool pool = MakePool(3, Fork(1, true));
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_EQ(PublishPlain(pool, {{64, 41}, {128, 42}}), (V{1, 2}));
  Must(pool.MarkSpeculative(2));
  std::optional<SlotRetirement> ret = Must(pool.RetireTop());
  ASSERT_TRUE(ret.has_value());
  EXPECT_EQ(*ret, (SlotRetirement{2, 1, true}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1],"checkpoints_dropped":0,"checkpoints_evicted":1,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[1],"hash_to_slot":[[42,1]],"num_slots":2,"pinned":[],"relocations":[],"slot_hash":[-1,42,-1],"speculative":[1]})");  // speculative [1]
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RetireTopOfTailCheckpointKeepsTailPosition) {
  // Checkpoints [0,1,2], nothing vacant: top 2 (the tail) moves into the
  // spent head 0 and stays at the tail.
  SlotPool pool = MakePool(3, Fork(1, true));
  PublishPlain(pool, {{64, 1}, {128, 2}, {192, 3}});
  std::optional<SlotRetirement> ret = Must(pool.RetireTop());
  ASSERT_TRUE(ret.has_value());
  EXPECT_EQ(*ret, (SlotRetirement{2, 0, true}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1,0],"checkpoints_dropped":0,"checkpoints_evicted":1,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[],"free":[0,1],"hash_to_slot":[[2,1],[3,0]],"num_slots":2,"pinned":[],"relocations":[],"slot_hash":[3,2,-1],"speculative":[]})");
  Must(pool.Extend(2));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1,0],"checkpoints_dropped":0,"checkpoints_evicted":1,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3],"hash_to_slot":[[2,1],[3,0]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[3,2,-1,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RetireTopDownToEmptyPool) {
  SlotPool pool = MakePool(2, Fork());
  EXPECT_EQ(Must(pool.RetireTop()), (SlotRetirement{1, -1, false}));
  EXPECT_EQ(Must(pool.RetireTop()), (SlotRetirement{0, -1, false}));
  EXPECT_EQ(pool.num_slots(), 0);
  EXPECT_EQ(pool.NumFree(), 0);
  EXPECT_EQ(pool.capacity(), 2);
  EXPECT_INVARIANTS(pool);
  Must(pool.Extend(1));
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_INVARIANTS(pool);
}

// ------------------------------- unindex --------------------------------- //

TEST(SlotPoolRules, UnindexCountsOrphanedOnlyForKnownHash) {
  SlotPool pool = MakePool(4, Fork(1, true));
  PublishPlain(pool, {{64, 11}, {128, 12}});
  Must(pool.Claim(1));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[0,2,3],"hash_to_slot":[[11,0],[12,1]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[11,12,-1,-1],"speculative":[]})");
  Must(pool.Unindex(11));  // free checkpoint: goes vacant
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":1,"deferred":[],"free":[0,2,3],"hash_to_slot":[[12,1]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[-1,12,-1,-1],"speculative":[]})");
  Must(pool.Unindex(999));  // unknown: no count
  EXPECT_EQ(pool.Fates().orphaned, 1);
  Must(pool.Unindex(12));  // on a live slot: hash dropped, counted
  EXPECT_EQ(pool.Fates().orphaned, 2);
  Must(pool.Unindex(12));  // already gone
  EXPECT_EQ(pool.Fates().orphaned, 2);
  Must(pool.Release(1));  // comes back vacant
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":2,"deferred":[],"free":[0,1,2,3],"hash_to_slot":[],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1,-1],"speculative":[]})");
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_INVARIANTS(pool);
}

// ------------------------------- publish --------------------------------- //

struct DemotionCase {
  const char* name;
  std::optional<Sequence> seq;
  V checkpointed;
  V speculative;
};

TEST(SlotPoolRules, PublishMidstepDemotesOnlyGuesses) {
  const std::vector<DemotionCase> cases = {
      // Anchor 128: 64 and 192 are guesses.
      {"anchor", Seq(-1, 1000, 128, 0), {2, 0, 1}, {0, 2}},
      // No anchor at all: everything is a guess.
      {"no_anchor", Seq(-1, 1000, 0, 0), {2, 1, 0}, {0, 1, 2}},
      // midstep_anchor_pos 0 falls back to checkpoint_end_pos.
      {"end_pos_fallback", Seq(-1, 1000, 0, 192), {1, 0, 2}, {0, 1}},
      // midstep_anchor_pos wins over checkpoint_end_pos.
      {"midstep_wins", Seq(-1, 1000, 128, 192), {2, 0, 1}, {0, 2}},
      // No seq: nothing demoted.
      {"null_seq", std::nullopt, {0, 1, 2}, {}},
  };
  for (const DemotionCase& c : cases) {
    SCOPED_TRACE(c.name);
    SlotPool pool = MakePool(4, Fork(1, true));
    std::vector<Reservation> r =
        Must(pool.ReserveMidstep(AnySeq(), {{64, 11}, {128, 12}, {192, 13}}));
    Must(pool.PublishMidstep(r, c.seq));
    PoolSnapshot d = pool.Dump();
    EXPECT_EQ(d.checkpointed, c.checkpointed);
    EXPECT_EQ(d.speculative, c.speculative);
    EXPECT_EQ(d.fates.kept, 3);
    EXPECT_EQ(d.hash_to_slot, (PV{{11, 0}, {12, 1}, {13, 2}}));
    EXPECT_INVARIANTS(pool);
  }
}

TEST(SlotPoolRules, ReservationIsNotIndexedUntilPublished) {
  SlotPool pool = MakePool(4, Fork(1, true));
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(AnySeq(), {{64, 11}, {128, 12}}));
  EXPECT_EQ(Must(pool.Lookup(11)), -1);
  EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 1000), 2, {11, 12})), 0);
  EXPECT_EQ(pool.Dump().free, (V{2, 3}));
  Must(pool.PublishMidstep(r, std::nullopt));
  EXPECT_EQ(Must(pool.Lookup(11)), 0);
  EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 1000), 2, {11, 12})), 2);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RefilingHashFreesOldSlotVacantWithoutOrphan) {
  SlotPool pool = MakePool(4, Fork(1, true));
  EXPECT_EQ(PublishPlain(pool, {{64, 11}}), (V{0}));
  std::vector<Reservation> r = Must(pool.ReserveMidstep(AnySeq(), {{64, 11}}));
  ASSERT_EQ(r, (std::vector<Reservation>{{1, 64, 11}}));
  Must(pool.PublishMidstep(r, std::nullopt));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3],"hash_to_slot":[[11,1]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[-1,11,-1,-1],"speculative":[]})");
  EXPECT_EQ(pool.Fates().orphaned, 0);
  EXPECT_FALSE(Must(pool.HoldsCheckpoint(0)));
  EXPECT_EQ(Must(pool.Pop()), 0);  // vacant again
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RefilingHashAwayFromLiveSlotClearsItsBackPointer) {
  SlotPool pool = MakePool(4, Fork(1, true));
  PublishPlain(pool, {{64, 11}});
  Must(pool.Claim(0));
  std::vector<Reservation> r = Must(pool.ReserveMidstep(AnySeq(), {{64, 11}}));
  Must(pool.PublishMidstep(r, std::nullopt));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[1,2,3],"hash_to_slot":[[11,1]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[-1,11,-1,-1],"speculative":[]})");
  Must(pool.Release(0));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3],"hash_to_slot":[[11,1]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[-1,11,-1,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

// ------------------------------ checkpoint ------------------------------- //

TEST(SlotPoolRules, CheckpointMovesOwnerAndPinsSourceForTwoPasses) {
  SlotPool pool = MakePool(4, Fork());
  EXPECT_EQ(Must(pool.Pop()), 0);
  // 13 blocks * 64 == 832 == checkpoint_end_pos: the anchor, not a guess.
  EXPECT_EQ(Must(pool.Checkpoint(Seq(0, 900, 0, 832), 13, 1001)),
            (CheckpointResult{1, 0}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[0],"free":[2,3],"hash_to_slot":[[1001,0]],"num_slots":4,"pinned":[[0,1]],"relocations":[],"slot_hash":[1001,-1,-1,-1],"speculative":[]})");
  EXPECT_EQ(Must(pool.Lookup(1001)), 0);
  pool.ReleasePins();
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[2,3],"hash_to_slot":[[1001,0]],"num_slots":4,"pinned":[[0,1]],"relocations":[],"slot_hash":[1001,-1,-1,-1],"speculative":[]})");  // still pinned, no longer deferred
  pool.ReleasePins();
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[0,2,3],"hash_to_slot":[[1001,0]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[1001,-1,-1,-1],"speculative":[]})");  // a checkpoint at the LRU tail
  EXPECT_EQ(pool.GetOccupancy(), (Occupancy{4, 1, 1, 2}));
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, CheckpointOffAnchorIsAGuess) {
  SlotPool pool = MakePool(4, Fork());
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_EQ(Must(pool.Checkpoint(Seq(0, 900, 0, 832), 12, 1001)),
            (CheckpointResult{1, 0}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[0],"free":[2,3],"hash_to_slot":[[1001,0]],"num_slots":4,"pinned":[[0,1]],"relocations":[],"slot_hash":[1001,-1,-1,-1],"speculative":[0]})");
  pool.ReleasePins();
  pool.ReleasePins();
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[0,2,3],"hash_to_slot":[[1001,0]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[1001,-1,-1,-1],"speculative":[0]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, CheckpointWithNoAnchorIsAGuess) {
  SlotPool pool = MakePool(4, Fork());
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_EQ(Must(pool.Checkpoint(Seq(0, 900, 0, 0), 0, 5)),
            (CheckpointResult{1, 0}));
  EXPECT_EQ(pool.Dump().speculative, (V{0}));
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, CheckpointAnchorIsBoundaryBlocksTimesHashBlockSize) {
  {
    SlotPool pool = MakePool(4, Fork(), /*hash_block_size=*/16);
    EXPECT_EQ(Must(pool.Pop()), 0);
    // midstep_anchor_pos 160 == 10 * 16 (checkpoint_end_pos is not read).
    EXPECT_EQ(Must(pool.Checkpoint(Seq(0, 900, 160, 832), 10, 7)),
              (CheckpointResult{1, 0}));
    EXPECT_DUMP(
        pool,
        R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[0],"free":[2,3],"hash_to_slot":[[7,0]],"num_slots":4,"pinned":[[0,1]],"relocations":[],"slot_hash":[7,-1,-1,-1],"speculative":[]})");
    EXPECT_INVARIANTS(pool);
  }
  {
    SlotPool pool = MakePool(4, Fork(), /*hash_block_size=*/16);
    EXPECT_EQ(Must(pool.Pop()), 0);
    EXPECT_EQ(Must(pool.Checkpoint(Seq(0, 900, 160, 832), 52, 7)),
              (CheckpointResult{1, 0}));
    EXPECT_EQ(pool.Dump().speculative, (V{0}));  // 52*16 = 832 but anchor 160
    EXPECT_INVARIANTS(pool);
  }
}

TEST(SlotPoolRules, CheckpointIsDroppedWhenNothingFree) {
  SlotPool pool = MakePool(1, Fork());
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_EQ(Must(pool.Checkpoint(Seq(0, 900, 0, 832), 13, 1001)),
            (CheckpointResult{0, -1}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":1,"checkpoints_evicted":0,"checkpoints_kept":0,"checkpoints_orphaned":0,"deferred":[],"free":[],"hash_to_slot":[],"num_slots":1,"pinned":[],"relocations":[],"slot_hash":[-1],"speculative":[]})");
  EXPECT_EQ(pool.Fates(), (CheckpointFates{0, 1, 0, 0}));
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, CheckpointSpendsLruCheckpointForTheOwnerWhenNoVacant) {
  SlotPool pool = MakePool(2, Fork(1, true));
  EXPECT_EQ(PublishPlain(pool, {{64, 11}}), (V{0}));
  EXPECT_EQ(Must(pool.Pop()), 1);
  EXPECT_EQ(Must(pool.Checkpoint(Seq(1, 900, 0, 832), 13, 22)),
            (CheckpointResult{0, 1}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":1,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[1],"free":[],"hash_to_slot":[[22,1]],"num_slots":2,"pinned":[[1,1]],"relocations":[],"slot_hash":[-1,22],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, CheckpointIsNoOpWhenItDoesNotApply) {
  struct NoOpCase {
    const char* name;
    SlotPool pool;
    Sequence seq;
  };
  std::vector<NoOpCase> cases;
  cases.push_back({"transfer none", MakePool(4, StateTransfer::None()),
                   Seq(0, 900, 0, 832)});
  cases.push_back(
      {"transfer replay", MakePool(4, Replay(true)), Seq(0, 900, 0, 832)});
  cases.push_back(
      {"disabled pool", MakePool(4, Fork(), 64, false), Seq(0, 900, 0, 832)});
  cases.push_back({"no per-request cache", MakePool(4, Fork()),
                   Seq(0, 900, 0, 832, /*has_per_req_cache=*/false)});
  cases.push_back(
      {"no committed slot", MakePool(4, Fork()), Seq(-1, 900, 0, 832)});
  for (NoOpCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(Must(c.pool.Pop()), 0);
    const PoolSnapshot before = c.pool.Dump();
    EXPECT_EQ(Must(c.pool.Checkpoint(c.seq, 13, 1001)),
              (CheckpointResult{c.seq.state_slot, -1}));
    EXPECT_EQ(c.pool.Dump(), before);
    EXPECT_INVARIANTS(c.pool);
  }
}

TEST(SlotPoolRules, CheckpointOfResumedSlotRefilesUnderTheNewHash) {
  SlotPool pool = MakePool(4, Fork(1, true));
  PublishPlain(pool, {{64, 11}});
  Must(pool.Claim(0));  // resumed: live, still carrying 11
  EXPECT_EQ(Must(pool.Checkpoint(Seq(0, 900, 0, 832), 13, 22)),
            (CheckpointResult{1, 0}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[0],"free":[2,3],"hash_to_slot":[[22,0]],"num_slots":4,"pinned":[[0,1]],"relocations":[],"slot_hash":[22,-1,-1,-1],"speculative":[]})");  // 11 gone, 22 -> 0
  EXPECT_EQ(pool.Fates().orphaned, 0);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, CheckpointUnderAHashHeldByAFreeSlotVacatesThatSlot) {
  SlotPool pool = MakePool(4, Fork(1, true));
  PublishPlain(pool, {{64, 11}});
  const int64_t x = Must(pool.Pop());
  ASSERT_EQ(x, 1);
  EXPECT_EQ(Must(pool.Checkpoint(Seq(x, 900, 0, 832), 13, 11)),
            (CheckpointResult{2, 1}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[1],"free":[0,3],"hash_to_slot":[[11,1]],"num_slots":4,"pinned":[[1,1]],"relocations":[],"slot_hash":[-1,11,-1,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

// ----------------------------- resumable_hit ----------------------------- //

// Checkpoints filed for blocks 3, 5 and 1 (L = 4, 6, 2) of this chain.
const std::vector<int64_t> kChain = {100, 101, 102, 103, 104, 105};

SlotPool ChainPool(StateTransfer t) {
  SlotPool pool = MakePool(8, t);
  PublishPlain(pool, {{64, 103}, {128, 105}, {192, 101}});
  return pool;
}

TEST(SlotPoolRules, ResumableHitWalksBackToACheckpointWithForkRoom) {
  SlotPool pool = ChainPool(Fork(1, true));
  struct Row {
    int64_t tokens, hit;
    bool assume;
    int64_t want;
  };
  const std::vector<Row> rows = {
      {300, 6, false, 4},  // L=6 leaves 300-384 < 1; L=4 leaves 44
      {300, 6, true, 4},
      {256, 6, false, 2},  // L=4 leaves 0 < 1
      {256, 6, true, 3},   // any boundary: L=3 leaves 64
      {257, 6, false, 4},  // L=4 leaves exactly 1
      {128, 6, false, 0},
      {128, 6, true, 1},
      {129, 6, false, 2},
      {64, 6, false, 0},
      {64, 6, true, 0},
      {500, 6, false, 6},
      {300, 3, false, 2},  // only the first 3 blocks are looked at
      {300, 0, false, 0},
      {300, 0, true, 0},
      // Caller-supplied extremes: no overflow, every block / none has room.
      {std::numeric_limits<int64_t>::max(), 6, false, 6},
      {std::numeric_limits<int64_t>::max(), 6, true, 6},
      {std::numeric_limits<int64_t>::min(), 6, false, 0},
      {std::numeric_limits<int64_t>::min(), 6, true, 0},
      {-1, 6, true, 0},
      {0, 6, true, 0},
      {65, 6, true, 1},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(testing::Message() << "tokens=" << r.tokens << " hit=" << r.hit
                                    << " assume=" << r.assume);
    EXPECT_EQ(
        Must(pool.ResumableHit(Seq(-1, r.tokens), r.hit, kChain, r.assume)),
        r.want);
  }
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, ResumableHitForkTokensBoundary) {
  // num_tokens - L*hbs >= fork_tokens, with 300 tokens: L=4 leaves 44, L=2
  // leaves 172.
  struct Row {
    int64_t fork_tokens, want, want_assumed;
  };
  for (const Row& r : std::vector<Row>{
           {43, 4, 4}, {44, 4, 4}, {45, 2, 3}, {172, 2, 2}, {173, 0, 1}}) {
    SCOPED_TRACE(testing::Message() << "fork_tokens=" << r.fork_tokens);
    SlotPool pool = ChainPool(Fork(r.fork_tokens, true));
    EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 300), 6, kChain)), r.want);
    EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 300), 6, kChain, true)),
              r.want_assumed);
    EXPECT_INVARIANTS(pool);
  }
}

TEST(SlotPoolRules, ResumableHitUnchangedForReplayAndForSeqItDoesNotApplyTo) {
  {
    SlotPool pool = MakePool(8, Replay(true));
    EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 300), 6, kChain)), 6);
    EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 300), 4, kChain, true)), 4);
    EXPECT_INVARIANTS(pool);
  }
  {
    SlotPool pool = ChainPool(Fork(1, true));
    EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 300, 0, 0, false), 6, kChain)), 6);
    EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 10, 0, 0, false), 5, kChain)), 5);
    EXPECT_INVARIANTS(pool);
  }
  {
    SlotPool pool = MakePool(8, Fork(1, true), 64, /*enabled=*/false);
    EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 300), 6, kChain)), 6);
    EXPECT_INVARIANTS(pool);
  }
}

TEST(SlotPoolRules, ResumableHitWithTransferNoneShrinksToZero) {
  SlotPool pool = MakePool(8, StateTransfer::None());
  EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 300), 6, kChain)), 0);
  // fork_tokens 0: the counterfactual keeps any boundary inside the prompt.
  EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 300), 6, kChain, true)), 4);
  EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 256), 6, kChain, true)), 4);
  EXPECT_INVARIANTS(pool);
}

// -------------------------------- extend --------------------------------- //

TEST(SlotPoolRules, ExtendReusesRetiredIndicesThenGrows) {
  SlotPool pool = MakePool(4, Fork(1, true));
  EXPECT_EQ(Must(pool.RetireTop()), (SlotRetirement{3, -1, false}));
  EXPECT_EQ(Must(pool.RetireTop()), (SlotRetirement{2, -1, false}));
  EXPECT_EQ(pool.num_slots(), 2);
  EXPECT_EQ(pool.capacity(), 4);
  Must(pool.Extend(1));
  EXPECT_EQ(pool.num_slots(), 3);
  EXPECT_EQ(pool.capacity(), 4);  // below the high-water mark: reused
  EXPECT_EQ(pool.Dump().free, (V{0, 1, 2}));
  EXPECT_EQ(pool.Dump().slot_hash, (V{-1, -1, -1, -1}));
  Must(pool.Extend(3));
  EXPECT_EQ(pool.num_slots(), 6);
  EXPECT_EQ(pool.capacity(), 6);  // beyond it: grown
  EXPECT_EQ(pool.Dump().slot_hash, (V{-1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(Must(pool.PopMany(6)), (V{0, 1, 2, 3, 4, 5}));
  Must(pool.Extend(0));
  EXPECT_EQ(pool.num_slots(), 6);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, ExtendResetsSlotHashButKeepsStaleIndexEntry) {
  // The reference quirk slot_pool.h keeps: a live top carrying a hash is
  // relocated; its index keeps the back-pointer until extend resets it, and
  // hash_to_slot keeps pointing at the index.
  SlotPool pool = MakePool(3, Fork(1, true));
  EXPECT_EQ(Must(pool.PopMany(2)), (V{0, 1}));
  EXPECT_EQ(PublishPlain(pool, {{64, 77}}), (V{2}));
  Must(pool.Claim(2));
  Must(pool.Release(0));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[0],"hash_to_slot":[[77,2]],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,-1,77],"speculative":[]})");
  EXPECT_EQ(Must(pool.RetireTop()), (SlotRetirement{2, 0, false}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[],"hash_to_slot":[[77,2]],"num_slots":2,"pinned":[],"relocations":[],"slot_hash":[-1,-1,77],"speculative":[]})");
  EXPECT_EQ(Must(pool.Lookup(77)), 2);
  EXPECT_INVARIANTS(pool);
  Must(pool.Extend(1));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[2],"hash_to_slot":[[77,2]],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1],"speculative":[]})");
  EXPECT_EQ(Must(pool.Lookup(77)), 2);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, ZeroSlotPoolStaysDisabledAfterExtend) {
  SlotPool pool = MakePool(0, Fork(1, true));
  EXPECT_FALSE(pool.enabled());
  Must(pool.Extend(3));
  EXPECT_FALSE(pool.enabled());
  EXPECT_EQ(pool.num_slots(), 3);
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":0,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2],"hash_to_slot":[],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1],"speculative":[]})");
  Must(pool.MarkSpeculative(1));
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_EQ(Must(pool.Checkpoint(Seq(0, 900), 1, 5)),
            (CheckpointResult{0, -1}));
  EXPECT_TRUE(Must(pool.ReserveMidstep(Seq(0, 900), {{64, 1}})).empty());
  EXPECT_EQ(Must(pool.Lookup(5)), -1);
  EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 300), 6, kChain)), 6);
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":0,"checkpoints_orphaned":0,"deferred":[],"free":[1,2],"hash_to_slot":[],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

// ------------------------------ clear_index ------------------------------ //

TEST(SlotPoolRules, ClearIndexDropsEveryHashKeepingPins) {
  SlotPool pool = MakePool(5, Fork(1, true));
  const Sequence no_anchor = Seq(-1, 1000, 0, 0);
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(no_anchor, {{64, 11}, {128, 12}}));
  Must(pool.PublishMidstep(r, no_anchor));
  const int64_t x = Must(pool.Pop());
  ASSERT_EQ(x, 2);
  EXPECT_EQ(Must(pool.Checkpoint(Seq(x, 900, 0, 0), 3, 33)),
            (CheckpointResult{3, 2}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1,0],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[2],"free":[0,1,4],"hash_to_slot":[[11,0],[12,1],[33,2]],"num_slots":5,"pinned":[[2,1]],"relocations":[],"slot_hash":[11,12,33,-1,-1],"speculative":[0,1,2]})");
  pool.ClearIndex();
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[2],"free":[0,1,4],"hash_to_slot":[],"num_slots":5,"pinned":[[2,1]],"relocations":[],"slot_hash":[-1,-1,-1,-1,-1],"speculative":[2]})");
  pool.ReleasePins();
  pool.ReleasePins();
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,4],"hash_to_slot":[],"num_slots":5,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1,-1,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

// ---------------------------- reserve / cancel --------------------------- //

TEST(SlotPoolRules, ReserveMidstepStopsAtFirstShortageCountingOneDrop) {
  SlotPool pool = MakePool(3, Fork(1, true));
  EXPECT_EQ(Must(pool.Pop()), 0);
  std::vector<Reservation> r = Must(
      pool.ReserveMidstep(AnySeq(), {{64, 1}, {128, 2}, {192, 3}, {256, 4}}));
  EXPECT_EQ(r, (std::vector<Reservation>{{1, 64, 1}, {2, 128, 2}}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":1,"checkpoints_evicted":0,"checkpoints_kept":0,"checkpoints_orphaned":0,"deferred":[],"free":[],"hash_to_slot":[],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, ReserveMidstepSpendsLruCheckpointsWhenNoVacant) {
  SlotPool pool = MakePool(3, Fork(1, true));
  PublishPlain(pool, {{64, 1}, {128, 2}});
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(AnySeq(), {{64, 5}, {128, 6}}));
  EXPECT_EQ(r, (std::vector<Reservation>{{2, 64, 5}, {0, 128, 6}}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1],"checkpoints_dropped":0,"checkpoints_evicted":1,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[1],"hash_to_slot":[[2,1]],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,2,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, ReserveMidstepIsEmptyWhenNotReadableOrNotApplying) {
  {
    SlotPool pool = MakePool(3, Fork(1, /*readable_midstep=*/false));
    const PoolSnapshot before = pool.Dump();
    EXPECT_TRUE(Must(pool.ReserveMidstep(AnySeq(), {{64, 1}})).empty());
    EXPECT_EQ(pool.Dump(), before);
    EXPECT_INVARIANTS(pool);
  }
  {
    SlotPool pool = MakePool(3, Fork(1, true));
    const PoolSnapshot before = pool.Dump();
    EXPECT_TRUE(Must(pool.ReserveMidstep(Seq(-1, 1000, 0, 0, false), {{64, 1}}))
                    .empty());
    EXPECT_EQ(pool.Dump(), before);
    EXPECT_INVARIANTS(pool);
  }
  {
    SlotPool pool = MakePool(0, Fork(1, true));
    EXPECT_TRUE(Must(pool.ReserveMidstep(AnySeq(), {{64, 1}})).empty());
    EXPECT_EQ(pool.Fates().dropped, 0);
    EXPECT_INVARIANTS(pool);
  }
}

TEST(SlotPoolRules, CancelMidstepReturnsSlotsVacant) {
  SlotPool pool = MakePool(4, Fork(1, true));
  EXPECT_EQ(Must(pool.Pop()), 0);
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(AnySeq(), {{64, 1}, {128, 2}}));
  EXPECT_EQ(r, (std::vector<Reservation>{{1, 64, 1}, {2, 128, 2}}));
  Must(pool.CancelMidstep(r));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":0,"checkpoints_orphaned":0,"deferred":[],"free":[1,2,3],"hash_to_slot":[],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1,-1],"speculative":[]})");
  EXPECT_EQ(Must(pool.Lookup(1)), -1);
  EXPECT_EQ(Must(pool.Pop()), 1);
  EXPECT_INVARIANTS(pool);
}

// --------------------------- gauges and logs ----------------------------- //

TEST(SlotPoolRules, OccupancySplitsUsedHeldAndVacant) {
  SlotPool pool = MakePool(6, Fork(1, true));
  EXPECT_EQ(pool.GetOccupancy(), (Occupancy{6, 0, 0, 6}));
  PublishPlain(pool, {{64, 1}, {128, 2}});
  Must(pool.PopMany(2));
  Must(pool.ReserveMidstep(AnySeq(), {{64, 3}}));
  // Reference: slots_total 6, used 3, held 2, vacant 1.
  EXPECT_EQ(pool.GetOccupancy(), (Occupancy{6, 3, 2, 1}));
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, TakeRelocationsReturnsRecordedOrderOnce) {
  SlotPool pool = MakePool(4, Fork());
  Must(pool.RecordRelocation(3, 0));
  Must(pool.RecordRelocation(2, 1));
  EXPECT_EQ(pool.Dump().relocations, (PV{{3, 0}, {2, 1}}));
  EXPECT_EQ(pool.TakeRelocations(), (PV{{3, 0}, {2, 1}}));
  EXPECT_TRUE(pool.TakeRelocations().empty());
  EXPECT_EQ(pool.Dump().relocations, (PV{}));
  // A retired index is still a valid source (< capacity).
  EXPECT_EQ(Must(pool.RetireTop()), (SlotRetirement{3, -1, false}));
  Must(pool.RecordRelocation(3, 0));
  EXPECT_EQ(pool.TakeRelocations(), (PV{{3, 0}}));
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, FatesCountAcrossAScenario) {
  // Sample 01's tail: kept 4, evicted 2, orphaned 1.
  SlotPool pool = MakePool(6, Fork());
  EXPECT_EQ(Must(pool.PopMany(2)), (V{0, 1}));
  EXPECT_EQ(Must(pool.Pop()), 2);
  Must(pool.Release(1));
  EXPECT_EQ(Must(pool.Pop()), 1);
  EXPECT_EQ(Must(pool.Checkpoint(Seq(0, 900, 0, 832), 13, 1001)),
            (CheckpointResult{3, 0}));
  pool.ReleasePins();
  pool.ReleasePins();
  EXPECT_EQ(Must(pool.Checkpoint(Seq(2, 2000, 0, 1920), 8, 2002)),
            (CheckpointResult{4, 2}));
  pool.ReleasePins();
  pool.ReleasePins();
  Must(pool.ReleaseMany({1, 3, -1}));
  EXPECT_EQ(Must(pool.Pop()), 1);
  EXPECT_EQ(Must(pool.Pop()), 3);
  EXPECT_EQ(Must(pool.Pop()), 5);
  EXPECT_EQ(Must(pool.Pop()), 2);
  Must(pool.Release(1));
  EXPECT_EQ(Must(pool.Checkpoint(Seq(4, 3000, 0, 2944), 46, 3003)),
            (CheckpointResult{1, 4}));
  pool.ReleasePins();
  pool.ReleasePins();
  EXPECT_EQ(Must(pool.Checkpoint(Seq(5, 3000, 0, 0), 20, 4004)),
            (CheckpointResult{0, 5}));
  pool.ReleasePins();
  pool.ReleasePins();
  Must(pool.Promote(5));
  Must(pool.Claim(4));
  Must(pool.Release(4));
  Must(pool.Unindex(3003));
  Must(pool.Unindex(999));
  EXPECT_EQ(pool.Fates(), (CheckpointFates{4, 0, 2, 1}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[5],"checkpoints_dropped":0,"checkpoints_evicted":2,"checkpoints_kept":4,"checkpoints_orphaned":1,"deferred":[],"free":[4,5],"hash_to_slot":[[4004,5]],"num_slots":6,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1,-1,-1,4004],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

// ------------------- marks and hashes in corner positions ----------------- //

TEST(SlotPoolRules, InvalidateOfFreeCheckpointVacatesItAndDropsItsMark) {
  SlotPool pool = MakePool(4, Fork(1, true));
  PublishPlain(pool, {{64, 11}, {128, 12}});
  Must(pool.MarkSpeculative(0));
  Must(pool.Invalidate(0));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3],"hash_to_slot":[[12,1]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[-1,12,-1,-1],"speculative":[]})");
  // On a live slot the mark stays (only the hash goes) ...
  Must(pool.Claim(1));
  Must(pool.MarkSpeculative(1));
  Must(pool.Invalidate(1));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[0,2,3],"hash_to_slot":[],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1,-1],"speculative":[1]})");
  // ... until it is released vacant.
  Must(pool.Release(1));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3],"hash_to_slot":[],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, PopClearsTheMarkOfAMarkedVacantSlot) {
  SlotPool pool = MakePool(4, Fork());
  Must(pool.MarkSpeculative(0));
  Must(pool.MarkSpeculative(2));
  EXPECT_EQ(pool.Dump().speculative, (V{0, 2}));
  EXPECT_EQ(Must(pool.Pop()), 0);
  EXPECT_EQ(pool.Dump().speculative, (V{2}));
  Must(pool.Claim(2));
  EXPECT_EQ(pool.Dump().speculative, (V{2}));  // claim keeps it
  Must(pool.Release(2));
  EXPECT_EQ(pool.Dump().speculative, (V{}));  // released vacant: gone
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, AnchorCheckpointOfAMarkedSlotKeepsTheMark) {
  SlotPool pool = MakePool(4, Fork());
  EXPECT_EQ(Must(pool.Pop()), 0);
  Must(pool.MarkSpeculative(0));
  EXPECT_EQ(Must(pool.Checkpoint(Seq(0, 900, 0, 832), 13, 1)),
            (CheckpointResult{1, 0}));
  pool.ReleasePins();
  pool.ReleasePins();
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[0,2,3],"hash_to_slot":[[1,0]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[1,-1,-1,-1],"speculative":[0]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, PublishWithNullSeqKeepsAnExistingMark) {
  SlotPool pool = MakePool(4, Fork(1, true));
  PublishPlain(pool, {{64, 1}});
  std::vector<Reservation> r = Must(pool.ReserveMidstep(AnySeq(), {{64, 2}}));
  ASSERT_EQ(r, (std::vector<Reservation>{{1, 64, 2}}));
  Must(pool.MarkSpeculative(1));
  Must(pool.PublishMidstep(r, std::nullopt));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1,0],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3],"hash_to_slot":[[1,0],[2,1]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[1,2,-1,-1],"speculative":[1]})");  // [1,0]
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, PublishingOneHashTwiceKeepsTheLastAndVacatesTheFirst) {
  SlotPool pool = MakePool(4, Fork(1, true));
  const Sequence anchored = Seq(-1, 1000, 128, 0);
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(anchored, {{64, 5}, {128, 5}}));
  ASSERT_EQ(r, (std::vector<Reservation>{{0, 64, 5}, {1, 128, 5}}));
  Must(pool.PublishMidstep(r, anchored));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[0,1,2,3],"hash_to_slot":[[5,1]],"num_slots":4,"pinned":[],"relocations":[],"slot_hash":[-1,5,-1,-1],"speculative":[]})");
  EXPECT_EQ(pool.Fates().kept, 2);
  EXPECT_EQ(pool.Fates().orphaned, 0);
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, CheckpointWhosePopSpendsTheSlotHoldingItsHash) {
  SlotPool pool = MakePool(2, Fork(1, true));
  EXPECT_EQ(PublishPlain(pool, {{64, 11}}), (V{0}));
  EXPECT_EQ(Must(pool.Pop()), 1);
  // The owner's fresh slot is the LRU checkpoint filed under the very hash
  // being checkpointed: it is spent (evicted) first, then 11 files on 1.
  EXPECT_EQ(Must(pool.Checkpoint(Seq(1, 900, 0, 832), 13, 11)),
            (CheckpointResult{0, 1}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":1,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[1],"free":[],"hash_to_slot":[[11,1]],"num_slots":2,"pinned":[[1,1]],"relocations":[],"slot_hash":[-1,11],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RetireTopLiveTopKeepsItsMarkOnTheRetiredIndex) {
  SlotPool pool = MakePool(3, Fork(1, true));
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(AnySeq(), {{64, 31}, {128, 32}}));
  EXPECT_EQ(Must(pool.Pop()), 2);
  Must(pool.PublishMidstep(r, std::nullopt));
  Must(pool.MarkSpeculative(0));
  Must(pool.MarkSpeculative(2));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0,1],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[0,1],"hash_to_slot":[[31,0],[32,1]],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[31,32,-1],"speculative":[0,2]})");
  EXPECT_EQ(Must(pool.RetireTop()), (SlotRetirement{2, 0, false}));
  // The spent target loses its mark; the live top's stays on index 2.
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1],"checkpoints_dropped":0,"checkpoints_evicted":1,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[1],"hash_to_slot":[[32,1]],"num_slots":2,"pinned":[],"relocations":[],"slot_hash":[-1,32,-1],"speculative":[2]})");
  EXPECT_INVARIANTS(pool);
  Must(pool.Extend(1));  // re-used index released vacant: mark gone
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[1],"checkpoints_dropped":0,"checkpoints_evicted":1,"checkpoints_kept":2,"checkpoints_orphaned":0,"deferred":[],"free":[1,2],"hash_to_slot":[[32,1]],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,32,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RetireTopCheckpointAtLruHeadSpendsTheNextOne) {
  SlotPool pool = MakePool(3, Fork(1, true));
  std::vector<Reservation> r =
      Must(pool.ReserveMidstep(AnySeq(), {{64, 1}, {128, 2}, {192, 3}}));
  Must(pool.PublishMidstep({r[2]}, std::nullopt));
  Must(pool.PublishMidstep({r[0]}, std::nullopt));
  Must(pool.PublishMidstep({r[1]}, std::nullopt));
  EXPECT_EQ(pool.Dump().checkpointed, (V{2, 0, 1}));
  EXPECT_EQ(Must(pool.RetireTop()), (SlotRetirement{2, 0, true}));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[0,1],"checkpoints_dropped":0,"checkpoints_evicted":1,"checkpoints_kept":3,"checkpoints_orphaned":0,"deferred":[],"free":[0,1],"hash_to_slot":[[2,1],[3,0]],"num_slots":2,"pinned":[],"relocations":[],"slot_hash":[3,2,-1],"speculative":[]})");  // [0,1]: 3 at 0, in the head place
  EXPECT_INVARIANTS(pool);
}

TEST(SlotPoolRules, RetireTopIntoAMarkedVacantSlotKeepsThatMark) {
  // _pop_vacant does not clear marks: the reference keeps a vacant slot's
  // stale mark on whatever moves in.
  {
    SlotPool pool = MakePool(4, Fork());
    Must(pool.PopMany(4));
    Must(pool.Release(1));
    Must(pool.MarkSpeculative(1));
    EXPECT_EQ(Must(pool.RetireTop()), (SlotRetirement{3, 1, false}));
    EXPECT_DUMP(
        pool,
        R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":0,"checkpoints_orphaned":0,"deferred":[],"free":[],"hash_to_slot":[],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1,-1],"speculative":[1]})");
    EXPECT_INVARIANTS(pool);
  }
  {
    SlotPool pool = MakePool(4, Fork(1, true));
    EXPECT_EQ(Must(pool.PopMany(3)), (V{0, 1, 2}));
    EXPECT_EQ(PublishPlain(pool, {{64, 9}}), (V{3}));
    Must(pool.Release(1));
    Must(pool.MarkSpeculative(1));
    EXPECT_EQ(Must(pool.RetireTop()), (SlotRetirement{3, 1, true}));
    EXPECT_DUMP(
        pool,
        R"({"checkpointed":[1],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":0,"deferred":[],"free":[1],"hash_to_slot":[[9,1]],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,9,-1,-1],"speculative":[1]})");
    EXPECT_INVARIANTS(pool);
  }
}

TEST(SlotPoolRules, StaleIndexEntryFollowsTheReferenceThroughUnindexAndClear) {
  // Continues ExtendResetsSlotHashButKeepsStaleIndexEntry: 77 -> 2 while
  // slot_hash[2] is -1. The reference's unindex counts an orphan but cannot
  // drop the entry (invalidate reads slot_hash), and clear_index cannot
  // either.
  SlotPool pool = MakePool(3, Fork(1, true));
  Must(pool.PopMany(2));
  PublishPlain(pool, {{64, 77}});
  Must(pool.Claim(2));
  Must(pool.Release(0));
  Must(pool.RetireTop());
  Must(pool.Extend(1));
  Must(pool.Unindex(77));
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":1,"deferred":[],"free":[2],"hash_to_slot":[[77,2]],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1],"speculative":[]})");
  EXPECT_EQ(Must(pool.Lookup(77)), 2);
  EXPECT_EQ(Must(pool.ResumableHit(Seq(-1, 1000), 1, {77})), 1);
  EXPECT_INVARIANTS(pool);
  pool.ClearIndex();
  EXPECT_DUMP(
      pool,
      R"({"checkpointed":[],"checkpoints_dropped":0,"checkpoints_evicted":0,"checkpoints_kept":1,"checkpoints_orphaned":1,"deferred":[],"free":[2],"hash_to_slot":[[77,2]],"num_slots":3,"pinned":[],"relocations":[],"slot_hash":[-1,-1,-1],"speculative":[]})");
  EXPECT_INVARIANTS(pool);
}

}  // namespace
}  // namespace statecache

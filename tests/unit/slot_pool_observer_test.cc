// SlotPool's call observer (daemon/core/pool_call.h): told of each public
// call once, after it ran, with its arguments and result; not of the calls
// the pool makes on itself; and the pool decides the same either way.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/pool_call.h"
#include "daemon/core/slot_pool.h"
#include "gtest/gtest.h"
#include "pool_test_util.h"

namespace statecache {
namespace {

using testing_util::Fork;
using testing_util::Must;
using testing_util::Seq;
using testing_util::V;

// Keeps what it is told, in order.
class Told final : public PoolCallObserver {
 public:
  struct Entry {
    PoolCall call;
    absl::Status status;
    PoolValue value;
  };
  void OnStart(const SlotPool& pool) override {
    started_with = pool.num_slots();
  }
  void OnCall(const PoolCall& call, const absl::Status& status,
              const PoolValue& value) override {
    calls.push_back(Entry{call, status, value});
  }
  void OnReleasePin(int64_t slot, int64_t count, const absl::Status&) override {
    clock.push_back({slot, count});
  }
  void OnEndDeferral(int64_t slot, const absl::Status&) override {
    clock.push_back({slot, 0});
  }
  void OnRestoreCheckpoint(int64_t, int64_t, bool,
                           const absl::Status&) override {}

  int64_t started_with = -1;
  std::vector<Entry> calls;
  std::vector<std::pair<int64_t, int64_t>> clock;  // (slot, 0): deferral
};

SlotPool NewPool() { return Must(SlotPool::Create(4, Fork(1), 64), "Create"); }

TEST(SlotPoolObserverTest, ToldOfEachCallOnceWithItsArgumentsAndResult) {
  SlotPool pool = NewPool();
  Told told;
  pool.SetCallObserver(&told);
  EXPECT_EQ(told.started_with, 4);
  EXPECT_TRUE(told.calls.empty());

  EXPECT_EQ(Must(pool.PopMany(2), "PopMany"), (V{0, 1}));
  const CheckpointResult forked =
      Must(pool.Checkpoint(Seq(0, 300, 256), 4, 77), "Checkpoint");
  EXPECT_EQ(pool.Claim(0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.NumFree(), 1);

  ASSERT_EQ(told.calls.size(), 4u);
  // The vector form is told once, as pop_many with the slots popped.
  EXPECT_EQ(told.calls[0].call.op, PoolOp::kPopMany);
  EXPECT_EQ(told.calls[0].call.a, 2);
  EXPECT_EQ(std::get<std::vector<int64_t>>(told.calls[0].value), (V{0, 1}));
  // The checkpoint's own pin of the slot it leaves is not a call.
  EXPECT_EQ(told.calls[1].call.op, PoolOp::kCheckpoint);
  EXPECT_EQ(told.calls[1].call.a, 4);
  EXPECT_EQ(told.calls[1].call.b, 77);
  EXPECT_EQ(told.calls[1].call.seq, Seq(0, 300, 256));
  EXPECT_EQ(std::get<CheckpointResult>(told.calls[1].value), forked);
  // A refusal is told with its status, and no value.
  EXPECT_EQ(told.calls[2].call.op, PoolOp::kClaim);
  EXPECT_EQ(told.calls[2].status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(told.calls[2].value));
  EXPECT_EQ(told.calls[3].call.op, PoolOp::kNumFree);
  EXPECT_EQ(std::get<int64_t>(told.calls[3].value), 1);

  // The per-session pin clock, which has no trace line, is told apart.
  ASSERT_TRUE(pool.EndDeferral(0).ok());
  ASSERT_TRUE(pool.ReleasePin(0, 1).ok());
  EXPECT_EQ(told.clock,
            (std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {0, 1}}));
  EXPECT_EQ(told.calls.size(), 4u);

  pool.SetCallObserver(nullptr);
  (void)pool.NumFree();
  EXPECT_EQ(told.calls.size(), 4u);
}

TEST(SlotPoolObserverTest, DecisionsAreTheSameWithAnObserver) {
  SlotPool plain = NewPool();
  SlotPool observed = NewPool();
  Told told;
  observed.SetCallObserver(&told);
  for (SlotPool* pool : {&plain, &observed}) {
    ASSERT_EQ(Must(pool->PopMany(3), "PopMany"), (V{0, 1, 2}));
    ASSERT_TRUE(pool->Checkpoint(Seq(1, 200, 128), 2, 5).ok());
    pool->ReleasePins();
    ASSERT_TRUE(pool->ReleaseMany({0, 2}).ok());
    pool->ReleasePins();
    ASSERT_EQ(Must(pool->Lookup(5), "Lookup"), 1);
  }
  EXPECT_EQ(plain.Dump(), observed.Dump());
  EXPECT_EQ(told.calls.size(), 7u);  // the Dump above included
}

}  // namespace
}  // namespace statecache

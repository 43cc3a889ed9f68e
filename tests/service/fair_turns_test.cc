// FairTurns on its own, and StateCache's Steps taking their turns through
// it: a session with many Steps waiting takes turns with another session
// rather than going first with all of them.
#include "daemon/service/fair_turns.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"
#include "tests/service/test_identity.h"

namespace statecache {
namespace {

constexpr uint64_t kA = 1;
constexpr uint64_t kB = 2;

// Spins (yielding) until `count()` reaches `n`: the waiter is parked in the
// gate, which is what the next step of the test depends on.
template <typename Count>
void AwaitCount(Count count, int n) {
  while (count() < n) std::this_thread::yield();
}

class TurnLog {
 public:
  void Add(const std::string& who) {
    absl::MutexLock lock(&mu_);
    order_.push_back(who);
  }
  std::vector<std::string> order() {
    absl::MutexLock lock(&mu_);
    return order_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> order_;
};

TEST(FairTurnsTest, AnUncontendedTurnIsTakenAtOnceAndLeavesNobodyWaiting) {
  FairTurns turns;
  for (int i = 0; i < 3; ++i) {
    FairTurns::Turn turn(turns, kA);
    EXPECT_EQ(turns.waiting(), 0);
  }
  FairTurns::Turn other(turns, kB);
  EXPECT_EQ(turns.waiting(), 0);
}

// The order in which Steps get their turns: `holder` holds the turn while
// the `arrivals` (session, name) park one by one, in order, then lets go.
std::vector<std::string> TurnOrder(
    uint64_t holder,
    const std::vector<std::pair<uint64_t, std::string>>& arrivals) {
  FairTurns turns;
  TurnLog log;
  std::vector<std::thread> threads;
  auto held = std::make_unique<FairTurns::Turn>(turns, holder);
  int queued = 0;
  for (const auto& [key, name] : arrivals) {
    threads.emplace_back([&turns, &log, key = key, name = name] {
      FairTurns::Turn turn(turns, key);
      log.Add(name);
    });
    AwaitCount([&] { return turns.waiting(); }, ++queued);
  }
  held.reset();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(turns.waiting(), 0);
  return log.order();
}

// A holds the turn; three more of A's Steps queue, then two of B's. The
// turn alternates, B first (A just had it), and each session's own Steps
// keep their arrival order. First come, first served would run A2 A3 A4
// before B1.
TEST(FairTurnsTest, ManyStepsOfOneSessionTakeTurnsWithAnother) {
  EXPECT_EQ(
      TurnOrder(kA,
                {{kA, "A2"}, {kA, "A3"}, {kA, "A4"}, {kB, "B1"}, {kB, "B2"}}),
      (std::vector<std::string>{"B1", "A2", "B2", "A3", "A4"}));
}

// A session arriving while three others each have Steps waiting is served
// after one Step of each of them, not after all of theirs.
TEST(FairTurnsTest, ALateSessionWaitsBehindOneStepOfEachOther) {
  EXPECT_EQ(
      TurnOrder(9, {{1, "a1"},
                    {1, "a2"},
                    {2, "b1"},
                    {2, "b2"},
                    {3, "c1"},
                    {3, "c2"},
                    {4, "victim"}}),
      (std::vector<std::string>{"a1", "b1", "c1", "victim", "a2", "b2", "c2"}));
}

// Blocks the first Step it sees (with the core's mutex and the turn held)
// until released, and records which operation each Step ran.
class StepGate : public StateCacheObserver {
 public:
  void OnOperations(const StepOperations& step) override {
    // Each Step here carries one operation: the kind counted.
    v1::Operation::KindCase kind = v1::Operation::KIND_NOT_SET;
    for (int k = 1; k < kOperationKinds; ++k) {
      if (step.counts[k] > 0) kind = static_cast<v1::Operation::KindCase>(k);
    }
    kinds_.push_back(kind);
    if (kinds_.size() == 1) {
      entered_.Notify();
      release_.WaitForNotification();
    }
  }
  bool wants_operations() const override { return true; }

  absl::Notification entered_;
  absl::Notification release_;
  // Written under the core's mutex; read after every Step returned.
  std::vector<v1::Operation::KindCase> kinds_;
};

std::string Attach(StateCache& cache, const std::string& name) {
  v1::AttachRequest request;
  *request.mutable_identity() = TestIdentity();
  request.set_client_name(name);
  v1::AttachResponse response;
  EXPECT_TRUE(cache.Attach(request, &response).ok());
  return response.session_id();
}

v1::StepRequest OneOperation(const std::string& session, bool begin_pass) {
  v1::StepRequest request;
  request.set_session_id(session);
  if (begin_pass) {
    request.add_operations()->mutable_begin_pass();
  } else {
    request.add_operations()->mutable_lookup()->set_hash(7);
  }
  return request;
}

// The service's Steps go through the turns: the heavy session A (begin_pass
// Steps) has three Steps in flight behind its first when B's one lookup
// arrives; B's runs second.
TEST(FairTurnsTest, StateCacheStepsOfAnotherSessionRunBetweenOnesSteps) {
  StateCacheOptions options;
  options.identity = TestIdentity();
  options.num_slots = 8;
  options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
  auto cache = *StateCache::Create(options);
  StepGate gate;
  cache->AddObserver(&gate);
  const std::string a = Attach(*cache, "heavy");
  const std::string b = Attach(*cache, "victim");

  std::vector<std::thread> threads;
  auto step = [&cache](v1::StepRequest request) {
    return [&cache, request = std::move(request)] {
      v1::StepResponse response;
      EXPECT_TRUE(cache->Step(request, &response).ok());
    };
  };
  threads.emplace_back(step(OneOperation(a, true)));
  gate.entered_.WaitForNotification();
  for (int i = 1; i <= 3; ++i) {
    threads.emplace_back(step(OneOperation(a, true)));
    AwaitCount([&] { return cache->StepsWaitingForTurn(); }, i);
  }
  threads.emplace_back(step(OneOperation(b, false)));
  AwaitCount([&] { return cache->StepsWaitingForTurn(); }, 4);
  gate.release_.Notify();
  for (std::thread& t : threads) t.join();

  constexpr auto kPass = v1::Operation::kBeginPass;
  constexpr auto kLookup = v1::Operation::kLookup;
  EXPECT_EQ(gate.kinds_, (std::vector<v1::Operation::KindCase>{
                             kPass, kLookup, kPass, kPass, kPass}));
}

}  // namespace
}  // namespace statecache

// A long random run against StateCache with real state memory: three
// sessions send steps mixing valid and invalid operations of every kind,
// while resizes, lease expiries, evictions and re-attaches happen between
// them. After every call the core's invariants hold (pool, sessions, pins,
// owners), and a refused one-operation step changes nothing a client or an
// operator can see. The refusal tables elsewhere test each rule once; this
// test looks for the interleavings nobody wrote down.
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"
#include "tests/service/cache_with_memory.h"
#include "tests/service/fake_clock.h"
#include "tests/service/random_operations.h"

namespace statecache {
namespace {

constexpr int64_t kSlots = 12;
constexpr int64_t kResizeLimit = 24;
constexpr int kMaxOps = 8;

v1::Identity Identity() { return TestIdentity("chaos/model"); }

TEST(StateCacheChaosTest, RandomRunKeepsInvariantsAndRefusalsChangeNothing) {
  FakeClock clock;
  std::unique_ptr<StateCache> cache =
      NewCacheWithMemory(Identity(), &clock, "statecache_chaos_test", kSlots,
                         kResizeLimit, kMaxOps);
  ASSERT_NE(cache, nullptr);

  auto attach = [&](int i) {
    v1::AttachRequest req;
    *req.mutable_identity() = Identity();
    req.set_client_name(absl::StrCat("scheduler-", i));
    v1::AttachResponse resp;
    EXPECT_TRUE(cache->Attach(req, &resp).ok());
    return resp.session_id();
  };
  std::vector<std::string> sessions = {attach(0), attach(1), attach(2)};

  // A fixed seed, so a failure reproduces; STATECACHE_CHAOS_SEED runs
  // another (to hunt with many).
  const char* seed_env = std::getenv("STATECACHE_CHAOS_SEED");
  const uint64_t seed =
      seed_env != nullptr ? std::strtoull(seed_env, nullptr, 10) : 20261129;
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  Draw draw(seed);
  int64_t steps = 0, refused_checked = 0, resizes = 0, expiries = 0;
  for (int iteration = 0; iteration < 50000; ++iteration) {
    SCOPED_TRACE(absl::StrCat("iteration ", iteration));
    if (draw.Chance(2)) {  // a resize, often refused or waiting on pins
      v1::ResizeRequest req;
      req.set_target_slots(draw.Pick({-1, 0, 1, 4, 8, 12, 16, 24, 25}));
      req.set_deadline_ms(draw.Pick({0, 0, 5000}));
      cache->Resize(req, [](absl::Status, const v1::ResizeResponse&) {});
      ++resizes;
    } else if (draw.Chance(2)) {  // time passes: leases lapse, resizes expire
      clock.Advance(absl::Seconds(draw.Pick({1, 4, 11})));
      cache->Tick();
      ++expiries;
    } else if (draw.Chance(1)) {  // an operator evicts, or a client detaches
      const int64_t i = draw.Below(3);
      if (draw.Chance(50)) {
        v1::EvictSessionRequest req;
        req.set_session_id(sessions[i]);
        v1::EvictSessionResponse resp;
        (void)cache->EvictSession(req, &resp);
      } else {
        v1::DetachRequest req;
        req.set_session_id(sessions[i]);
        v1::DetachResponse resp;
        (void)cache->Detach(req, &resp);
      }
      sessions[i] = attach(static_cast<int>(i));
    } else {
      v1::StepRequest req;
      const int64_t who = draw.Below(3);
      // A session that expired or was evicted is re-attached now and then;
      // until then its steps are refused whole.
      req.set_session_id(draw.Chance(1) ? "no-such-session" : sessions[who]);
      const int64_t ops = draw.Chance(50)  ? 1
                          : draw.Chance(2) ? kMaxOps + 1
                                           : 2 + draw.Below(4);
      for (int64_t k = 0; k < ops; ++k) draw.Operation(req.add_operations());
      // A lapsed lease is also reaped by the step that finds it (a change
      // made on the way to refusing): reap first, so a refusal is compared
      // with the state it met.
      if (ops == 1) cache->Tick();
      const std::string before = ops == 1 ? Visible(*cache) : "";
      v1::StepResponse resp;
      const absl::Status status = cache->Step(req, &resp);
      ++steps;
      if (status.ok()) {
        ASSERT_EQ(resp.results_size(), ops) << req.ShortDebugString();
      }
      const bool refused =
          !status.ok() || (ops == 1 && resp.results(0).code() != 0);
      if (ops == 1 && refused) {
        ASSERT_EQ(Visible(*cache), before)
            << "a refused step changed the daemon: " << req.ShortDebugString()
            << "\n-> "
            << (status.ok() ? resp.ShortDebugString() : status.ToString());
        ++refused_checked;
      }
      if (absl::IsNotFound(status) && draw.Chance(50)) {
        sessions[who] = attach(static_cast<int>(who));
      }
    }
    const absl::Status invariants = cache->CheckInvariants();
    ASSERT_TRUE(invariants.ok()) << invariants;
  }
  // The run did reach what it is meant to reach.
  EXPECT_GT(steps, 40000);
  EXPECT_GT(refused_checked, 5000);
  EXPECT_GT(resizes, 500);
  EXPECT_GT(expiries, 500);
  v1::GetStatsResponse stats;
  cache->GetStats(&stats);
  EXPECT_GT(stats.checkpoints_kept(), 100) << stats.ShortDebugString();
  EXPECT_GT(stats.resumes_fork(), 10) << stats.ShortDebugString();
  EXPECT_GT(stats.lease_expiries(), 0) << stats.ShortDebugString();
  RecordProperty("steps", static_cast<int>(steps));
  RecordProperty("refusals_checked", static_cast<int>(refused_checked));
  RecordProperty("checkpoints_kept",
                 static_cast<int>(stats.checkpoints_kept()));
}

}  // namespace
}  // namespace statecache

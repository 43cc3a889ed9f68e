// A long random run against StateCache with real state memory: three
// sessions send steps mixing valid and invalid operations of every kind,
// while resizes, lease expiries, evictions and re-attaches happen between
// them. After every call the core's invariants hold (pool, sessions, pins,
// owners), and a refused one-operation step changes nothing: not what a
// client or an operator can see, nor the pool's whole dump (LRU order, hash
// filings) or any session's requests and pins. The refusal tables
// elsewhere test each rule once; this test looks for the interleavings nobody
// wrote down. Each session's requests may hold at most kQuota slots, so
// quota refusals mix in too (and the quota's count is among the invariants).
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
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
constexpr int64_t kQuota = 6;

v1::Identity Identity() { return TestIdentity("chaos/model"); }

TEST(StateCacheChaosTest, RandomRunKeepsInvariantsAndRefusalsChangeNothing) {
  FakeClock clock;
  std::unique_ptr<StateCache> cache =
      NewCacheWithMemory(Identity(), &clock, "statecache_chaos_test", kSlots,
                         kResizeLimit, kMaxOps, kQuota);
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
  // What the run did, counted by effect (not by the branch that tried it):
  // pool size changes seen in the stats, leases that lapsed and pending
  // resizes whose deadline ran out.
  int64_t steps = 0, refused_checked = 0, grows = 0, shrinks = 0;
  int64_t leases_lapsed = 0;
  int64_t quota_refusals = 0;  // operations refused for the session quota
  // Shared: a resize still pending when the test ends is answered by
  // ~StateCache, after this scope's locals are gone.
  auto resize_deadlines = std::make_shared<int64_t>(0);
  auto stats = [&cache] {
    v1::GetStatsResponse s;
    cache->GetStats(&s);
    return s;
  };
  int64_t capacity = stats().slots_total();
  for (int iteration = 0; iteration < 50000; ++iteration) {
    SCOPED_TRACE(absl::StrCat("iteration ", iteration));
    if (draw.Chance(2)) {  // a resize, often refused or waiting on pins
      v1::ResizeRequest req;
      req.set_target_slots(draw.Pick({-1, 0, 1, 4, 8, 12, 16, 24, 25}));
      req.set_deadline_ms(draw.Pick({0, 0, 5000}));
      // `done` may run later, from a Step or a Tick.
      cache->Resize(req, [resize_deadlines](absl::Status status,
                                            const v1::ResizeResponse&) {
        *resize_deadlines += absl::IsDeadlineExceeded(status);
      });
    } else if (draw.Chance(2)) {  // time passes: leases lapse, resizes expire
      const int64_t expired_before = stats().lease_expiries();
      clock.Advance(absl::Seconds(draw.Pick({1, 4, 11})));
      cache->Tick();
      leases_lapsed += stats().lease_expiries() - expired_before;
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
        for (const v1::OperationResult& r : resp.results()) {
          quota_refusals +=
              absl::StrContains(r.message(), "max_slots_per_session");
        }
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
    // A resize takes effect at once (grow, or a shrink with room) or from a
    // later Step or Tick: compare after every iteration.
    const int64_t now_slots = stats().slots_total();
    grows += now_slots > capacity;
    shrinks += now_slots < capacity;
    capacity = now_slots;
  }
  // The run did reach what it is meant to reach.
  EXPECT_GT(steps, 40000);
  EXPECT_GT(refused_checked, 5000);
  EXPECT_GT(grows, 100);
  EXPECT_GT(shrinks, 200);
  EXPECT_GT(leases_lapsed, 200);
  EXPECT_GT(*resize_deadlines, 5);
  EXPECT_GT(quota_refusals, 50);
  const v1::GetStatsResponse end = stats();
  EXPECT_GT(end.checkpoints_kept(), 100) << end.ShortDebugString();
  EXPECT_GT(end.resumes_fork(), 10) << end.ShortDebugString();
  RecordProperty("steps", static_cast<int>(steps));
  RecordProperty("refusals_checked", static_cast<int>(refused_checked));
  RecordProperty("grows", static_cast<int>(grows));
  RecordProperty("quota_refusals", static_cast<int>(quota_refusals));
  RecordProperty("shrinks", static_cast<int>(shrinks));
  RecordProperty("leases_lapsed", static_cast<int>(leases_lapsed));
  RecordProperty("resize_deadlines", static_cast<int>(*resize_deadlines));
  RecordProperty("checkpoints_kept", static_cast<int>(end.checkpoints_kept()));
}

}  // namespace
}  // namespace statecache

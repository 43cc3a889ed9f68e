// StateCache without any RPC stack: the protocol's decisions, sessions,
// leases (on a fake clock), resize, and refusals that change nothing.
#include "daemon/service/state_cache.h"

#include <chrono>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "proto/packed_form.h"
#include "tests/service/fake_clock.h"
#include "tests/service/test_identity.h"

namespace statecache {
namespace {

constexpr int64_t kBlock = kTestBlock;

struct Fixture {
  explicit Fixture(int64_t num_slots = 8,
                   StateTransfer transfer =
                       *StateTransfer::Create(TransferKind::kFork, 1, true),
                   const std::function<void(StateCacheOptions&)>& tweak = {}) {
    StateCacheOptions options;
    options.identity = TestIdentity();
    options.num_slots = num_slots;
    options.max_slots = 1024;
    options.transfer = transfer;
    options.lease_ttl = absl::Seconds(10);
    options.max_operations_per_step = 64;
    options.epoch = 42;
    options.clock = &clock;
    if (tweak) tweak(options);
    cache = *StateCache::Create(options);
  }

  std::string Attach(const std::string& name = "test") {
    v1::AttachRequest req;
    *req.mutable_identity() = TestIdentity();
    req.set_client_name(name);
    v1::AttachResponse resp;
    EXPECT_TRUE(cache->Attach(req, &resp).ok());
    return resp.session_id();
  }

  FakeClock clock;
  std::unique_ptr<StateCache> cache;
};

// Builds steps tersely.
class StepBuilder {
 public:
  explicit StepBuilder(std::string session) { req_.set_session_id(session); }
  StepBuilder& BeginPass() {
    req_.add_operations()->mutable_begin_pass();
    return *this;
  }
  StepBuilder& Admit(const std::string& id, int width, int64_t num_tokens,
                     const std::vector<int64_t>& hashes, int kv_hit,
                     int64_t anchor = 0) {
    v1::Admit* a = req_.add_operations()->mutable_admit();
    a->set_request_id(id);
    a->set_width(width);
    a->set_num_tokens(num_tokens);
    a->set_anchor_pos(anchor);
    for (int64_t h : hashes) a->add_block_hashes(h);
    a->set_kv_hit_blocks(kv_hit);
    return *this;
  }
  StepBuilder& Checkpoint(const std::string& id, int64_t blocks, int64_t hash,
                          int64_t anchor = 0) {
    v1::Checkpoint* c = req_.add_operations()->mutable_checkpoint();
    c->set_request_id(id);
    c->set_boundary_blocks(blocks);
    c->set_hash(hash);
    c->set_anchor_pos(anchor);
    return *this;
  }
  StepBuilder& Release(const std::string& id) {
    req_.add_operations()->mutable_release()->set_request_id(id);
    return *this;
  }
  StepBuilder& ConsumeFork(const std::string& id) {
    req_.add_operations()->mutable_consume_fork()->set_request_id(id);
    return *this;
  }
  StepBuilder& AdoptForkSource(const std::string& id) {
    req_.add_operations()->mutable_adopt_fork_source()->set_request_id(id);
    return *this;
  }
  StepBuilder& Reserve(const std::string& id,
                       const std::vector<std::pair<int64_t, int64_t>>& pos) {
    v1::Reserve* r = req_.add_operations()->mutable_reserve();
    r->set_request_id(id);
    for (auto [p, h] : pos) {
      v1::MidstepPosition* m = r->add_positions();
      m->set_position(p);
      m->set_hash(h);
    }
    return *this;
  }
  StepBuilder& Publish(const std::string& id) {
    req_.add_operations()->mutable_publish()->set_request_id(id);
    return *this;
  }
  StepBuilder& Cancel(const std::string& id) {
    req_.add_operations()->mutable_cancel()->set_request_id(id);
    return *this;
  }
  StepBuilder& Unindex(const std::vector<int64_t>& hashes) {
    v1::Unindex* u = req_.add_operations()->mutable_unindex();
    for (int64_t h : hashes) u->add_hashes(h);
    return *this;
  }
  StepBuilder& Lookup(int64_t hash) {
    req_.add_operations()->mutable_lookup()->set_hash(hash);
    return *this;
  }
  const v1::StepRequest& request() const { return req_; }

 private:
  v1::StepRequest req_;
};

v1::StepResponse RunStep(StateCache& cache, const StepBuilder& b) {
  v1::StepResponse resp;
  absl::Status s = cache.Step(b.request(), &resp);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.results_size(), b.request().operations_size());
  return resp;
}

std::vector<int64_t> Slots(const v1::AdmitResult& a) {
  return {a.slots().begin(), a.slots().end()};
}

TEST(StateCacheTest, AttachRefusesEachMismatchedIdentityField) {
  Fixture f;
  struct Case {
    const char* field;
    std::function<void(v1::Identity&)> mutate;
  };
  const std::vector<Case> cases = {
      {"model_id", [](v1::Identity& i) { i.set_model_id("other"); }},
      {"hash_block_size", [](v1::Identity& i) { i.set_hash_block_size(16); }},
      {"hash_namespace", [](v1::Identity& i) { i.set_hash_namespace("x"); }},
      {"num_spec", [](v1::Identity& i) { i.set_num_spec(2); }},
  };
  for (const Case& c : cases) {
    v1::AttachRequest req;
    *req.mutable_identity() = TestIdentity();
    c.mutate(*req.mutable_identity());
    v1::AttachResponse resp;
    absl::Status s = f.cache->Attach(req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << c.field;
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s;
    EXPECT_TRUE(resp.session_id().empty());
  }
  v1::GetStatsResponse stats;
  f.cache->GetStats(&stats);
  EXPECT_EQ(stats.sessions(), 0);
}

TEST(StateCacheTest, AttachReturnsEpochLeaseAndPool) {
  Fixture f;
  v1::AttachRequest req;
  *req.mutable_identity() = TestIdentity();
  v1::AttachResponse resp;
  ASSERT_TRUE(f.cache->Attach(req, &resp).ok());
  EXPECT_EQ(resp.epoch(), 42u);
  EXPECT_EQ(resp.lease_ttl_ms(), 10000);
  EXPECT_EQ(resp.num_slots(), 8);
  EXPECT_EQ(resp.transfer().kind(), "fork");
  EXPECT_EQ(resp.session_id().size(), 32u);
}

TEST(StateCacheTest, CheckpointThenResumeForksFromTheCheckpoint) {
  Fixture f;
  const std::string s = f.Attach();
  const std::vector<int64_t> hashes = {101, 102, 103};
  // Turn 1: cold start, prompt of 3 blocks + a few tokens, checkpoint at end.
  auto r1 = RunStep(
      *f.cache, StepBuilder(s).BeginPass().Admit("a", 1, 200, hashes, 0, 192));
  ASSERT_EQ(r1.results(1).code(), 0) << r1.results(1).message();
  EXPECT_EQ(Slots(r1.results(1).admit()), (std::vector<int64_t>{0}));
  EXPECT_EQ(r1.results(1).admit().fork_src(), -1);
  auto c = RunStep(*f.cache, StepBuilder(s).Checkpoint("a", 3, 103));
  ASSERT_EQ(c.results(0).code(), 0) << c.results(0).message();
  EXPECT_TRUE(c.results(0).checkpoint().kept());
  EXPECT_EQ(c.results(0).checkpoint().fork_src(), 0);
  EXPECT_EQ(c.results(0).checkpoint().state_slot(), 1);
  // Slot 0 is pinned (deferred): survives one begin_pass, goes at the next.
  RunStep(*f.cache, StepBuilder(s).BeginPass().ConsumeFork("a").Release("a"));
  EXPECT_EQ(f.cache->DumpPool().pinned,
            (std::vector<std::pair<int64_t, int64_t>>{{0, 1}}));
  RunStep(*f.cache, StepBuilder(s).BeginPass());
  EXPECT_TRUE(f.cache->DumpPool().pinned.empty());
  EXPECT_EQ(f.cache->DumpPool().checkpointed, (std::vector<int64_t>{0}));

  // Turn 2 extends the prompt: resumes at 3 blocks, forks from slot 0.
  const std::vector<int64_t> hashes2 = {101, 102, 103, 104, 105};
  auto r2 = RunStep(
      *f.cache, StepBuilder(s).BeginPass().Admit("b", 1, 330, hashes2, 5, 320));
  const v1::AdmitResult& a2 = r2.results(1).admit();
  ASSERT_EQ(r2.results(1).code(), 0) << r2.results(1).message();
  EXPECT_EQ(a2.blocks_resumed(), 3);
  EXPECT_EQ(a2.fork_src(), 0);
  EXPECT_FALSE(a2.adopted());
  EXPECT_EQ(Slots(a2), (std::vector<int64_t>{1}));
  v1::GetStatsResponse stats;
  f.cache->GetStats(&stats);
  EXPECT_EQ(stats.resumes_fork(), 1);
  EXPECT_EQ(stats.checkpoints_kept(), 1);
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
}

// An observer that wants operation timings gets, with an interval of 1, one
// sample per operation, in the operation's order, in seconds: together no
// more than the Step took (measured around it on steady_clock). Ticks taken
// for seconds, or the calibration skipped, would make them ~1e9 times too
// large.
class SampleRecorder : public StateCacheObserver {
 public:
  void OnOperations(const StepOperations& step) override {
    samples_.assign(step.timed.begin(), step.timed.end());
    refused_.assign(step.refused.begin(), step.refused.end());
    counts_ = step.counts;
    for (int k = 0; k < kOperationKinds; ++k) total_counts_[k] += counts_[k];
    for (const OperationSample& s : step.timed) ++total_timed_[s.kind];
  }
  bool wants_operations() const override { return true; }
  const std::vector<OperationSample>& samples() const { return samples_; }
  const std::vector<OperationSample>& refused() const { return refused_; }
  const std::array<int32_t, kOperationKinds>& counts() const { return counts_; }
  // Over every Step seen.
  const std::array<int64_t, kOperationKinds>& total_counts() const {
    return total_counts_;
  }
  const std::array<int64_t, kOperationKinds>& total_timed() const {
    return total_timed_;
  }

 private:
  std::vector<OperationSample> samples_;
  std::vector<OperationSample> refused_;
  std::array<int32_t, kOperationKinds> counts_{};
  std::array<int64_t, kOperationKinds> total_counts_{};
  std::array<int64_t, kOperationKinds> total_timed_{};
};

TEST(StateCacheTest, StepTimesEachOperationInSeconds) {
  Fixture f(/*num_slots=*/64,
            *StateTransfer::Create(TransferKind::kFork, 1, true),
            [](StateCacheOptions& o) { o.operation_timing_interval = 1; });
  SampleRecorder recorder;
  f.cache->AddObserver(&recorder);
  const std::string s = f.Attach();
  StepBuilder step(s);
  step.BeginPass();
  for (int i = 0; i < 20; ++i) {
    const std::string id = absl::StrCat("r", i);
    step.Admit(id, 1, 200, {1000 + i, 2000 + i, 3000 + i}, 0, 192)
        .Checkpoint(id, 3, 3000 + i);
  }
  step.Lookup(3000).Release("r0").Admit("bad", 0, 10, {}, 0);  // last refused
  const auto t0 = std::chrono::steady_clock::now();
  const v1::StepResponse resp = RunStep(*f.cache, step);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  ASSERT_EQ(recorder.samples().size(), 44u);
  double sum = 0;
  for (size_t i = 0; i < recorder.samples().size(); ++i) {
    const OperationSample& sample = recorder.samples()[i];
    EXPECT_EQ(sample.kind, step.request().operations(i).kind_case()) << i;
    EXPECT_GE(sample.seconds, 0) << i;
    sum += sample.seconds;
  }
  EXPECT_EQ(recorder.samples().back().code, absl::StatusCode::kInvalidArgument);
  EXPECT_NE(resp.results(43).code(), 0);
  EXPECT_GT(sum, 0);
  EXPECT_LE(sum, took);
}

// At the default interval every operation is still counted by kind and
// every refusal reported, but only a sample is timed: about one in 16, and
// of every kind, however the pass's kinds alternate. 400 passes of
// begin_pass, then lookup and release alternating (the release refused:
// NOT_FOUND), and one refused admit: a fixed stride of 16 would time only
// lookups, or only releases.
TEST(StateCacheTest, StepTimesARandomSampleAndCountsEveryOperation) {
  Fixture f(/*num_slots=*/64);
  SampleRecorder recorder;
  f.cache->AddObserver(&recorder);
  const std::string s = f.Attach();
  constexpr int kPasses = 400;
  constexpr int kPairs = 20;
  for (int pass = 0; pass < kPasses; ++pass) {
    StepBuilder step(s);
    step.BeginPass();
    for (int i = 0; i < kPairs; ++i) step.Lookup(7).Release("nobody");
    if (pass == 0) step.Admit("bad", 0, 10, {}, 0);
    RunStep(*f.cache, step);
    if (pass == 0) {
      EXPECT_EQ(recorder.counts()[v1::Operation::kAdmit], 1);
      ASSERT_EQ(recorder.refused().size(), kPairs + 1u);
      EXPECT_EQ(recorder.refused().back().kind, v1::Operation::kAdmit);
      EXPECT_EQ(recorder.refused().back().code,
                absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(recorder.refused().front().kind, v1::Operation::kRelease);
      EXPECT_EQ(recorder.refused().front().code, absl::StatusCode::kNotFound);
    }
  }
  const auto& counts = recorder.total_counts();
  EXPECT_EQ(counts[v1::Operation::kBeginPass], kPasses);
  EXPECT_EQ(counts[v1::Operation::kLookup], kPasses * kPairs);
  EXPECT_EQ(counts[v1::Operation::kRelease], kPasses * kPairs);
  const auto& timed = recorder.total_timed();
  const int64_t operations = kPasses * (2 * kPairs + 1) + 1;
  int64_t all_timed = 0;
  for (int64_t t : timed) all_timed += t;
  // Gaps uniform in [1, 31] (mean 16, deviation 9): over ~16000 operations
  // about 1000 are timed, within a few dozen.
  EXPECT_GT(all_timed, operations / 16 * 8 / 10);
  EXPECT_LT(all_timed, operations / 16 * 12 / 10);
  // Both alternating kinds, in like measure.
  EXPECT_GT(timed[v1::Operation::kLookup], all_timed * 4 / 10);
  EXPECT_GT(timed[v1::Operation::kRelease], all_timed * 4 / 10);
}

// The clock releases a session's pins in slot order, however many there are
// (past the clock's radix-sort cut-over): 150 fork-source pins, taken in a
// shuffled order, come back in slot order. Each is a speculative checkpoint
// (its request never reached the boundary), which release files at the LRU
// head, so head first the LRU reads 149, 148, ..., 0; any other release
// order scrambles it.
TEST(StateCacheTest, ClockReleasesManyPinsInSlotOrder) {
  constexpr int kRequests = 150;
  Fixture f(/*num_slots=*/512);
  const std::string s = f.Attach();
  for (int first = 0; first < kRequests; first += 50) {
    StepBuilder admit(s);
    for (int i = first; i < first + 50; ++i) {
      admit.Admit(absl::StrCat("r", i), 1, 10, {}, 0);
    }
    RunStep(*f.cache, admit);  // cold starts: request i holds slot i
  }
  std::vector<int> order(kRequests);
  for (int i = 0; i < kRequests; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  for (int first = 0; first < kRequests; first += 50) {
    StepBuilder checkpoint(s);
    for (int k = first; k < first + 50; ++k) {
      checkpoint.Checkpoint(absl::StrCat("r", order[k]), 0, 1000 + order[k]);
    }
    auto resp = RunStep(*f.cache, checkpoint);
    for (const auto& r : resp.results()) {
      ASSERT_EQ(r.code(), 0) << r.message();
      ASSERT_TRUE(r.checkpoint().kept());
    }
  }
  EXPECT_EQ(f.cache->DumpPool().pinned.size(), static_cast<size_t>(kRequests));
  RunStep(*f.cache, StepBuilder(s).BeginPass());  // deferrals end
  auto pass = RunStep(*f.cache, StepBuilder(s).BeginPass());
  EXPECT_EQ(pass.results(0).begin_pass().pins_released(), kRequests);
  std::vector<int64_t> want(kRequests);
  for (int i = 0; i < kRequests; ++i) want[i] = kRequests - 1 - i;
  const PoolSnapshot pool = f.cache->DumpPool();
  EXPECT_EQ(pool.checkpointed, want);
  EXPECT_EQ(pool.speculative.size(), static_cast<size_t>(kRequests));
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
}

TEST(StateCacheTest, ResumeAdoptsTheCheckpointWhenTooFewSlotsAreFree) {
  Fixture f(2);
  const std::string s = f.Attach();
  RunStep(*f.cache, StepBuilder(s).Admit("a", 1, 100, {7}, 0, 64));
  RunStep(*f.cache,
          StepBuilder(s).Checkpoint("a", 1, 7));  // a -> slot 1, 0 pinned
  RunStep(*f.cache,
          StepBuilder(s).BeginPass().BeginPass());  // 0 back as checkpoint
  // a holds slot 1; slot 0 is the only free one and holds the checkpoint.
  auto r = RunStep(*f.cache, StepBuilder(s).Admit("b", 1, 100, {7}, 1, 64));
  ASSERT_EQ(r.results(0).code(), 0) << r.results(0).message();
  EXPECT_TRUE(r.results(0).admit().adopted());
  EXPECT_EQ(Slots(r.results(0).admit()), (std::vector<int64_t>{0}));
  EXPECT_EQ(r.results(0).admit().fork_src(), -1);
  EXPECT_TRUE(f.cache->CheckInvariants().ok());
}

TEST(StateCacheTest, PinClocksOfTwoSessionsDoNotInterfere) {
  Fixture f;
  const std::string s1 = f.Attach("one");
  const std::string s2 = f.Attach("two");
  // s1 files a checkpoint under hash 9 and lets its clock return it.
  RunStep(*f.cache, StepBuilder(s1).Admit("a", 1, 100, {9}, 0, 64));
  RunStep(*f.cache, StepBuilder(s1).Checkpoint("a", 1, 9));
  RunStep(*f.cache, StepBuilder(s1).BeginPass().BeginPass());
  // s2 resumes from it: slot 0 pinned by s2's clock.
  auto r = RunStep(*f.cache, StepBuilder(s2).Admit("b", 1, 100, {9}, 1, 64));
  ASSERT_EQ(r.results(0).admit().fork_src(), 0);
  // s1's passes must not release s2's pin.
  RunStep(*f.cache, StepBuilder(s1).BeginPass().BeginPass().BeginPass());
  EXPECT_EQ(f.cache->DumpPool().pinned,
            (std::vector<std::pair<int64_t, int64_t>>{{0, 1}}));
  // s2's own pass does.
  auto p = RunStep(*f.cache, StepBuilder(s2).BeginPass());
  EXPECT_EQ(p.results(0).begin_pass().pins_released(), 1);
  EXPECT_TRUE(f.cache->DumpPool().pinned.empty());
  EXPECT_TRUE(f.cache->CheckInvariants().ok());
}

TEST(StateCacheTest, LateReleaseDoesNotDropAPinThatIsNoLongerItsOwn) {
  Fixture f(4);
  const std::string s1 = f.Attach();
  const std::string s2 = f.Attach();
  RunStep(*f.cache, StepBuilder(s1).Admit("a", 1, 100, {9}, 0, 64));
  RunStep(*f.cache, StepBuilder(s1).Checkpoint("a", 1, 9));    // 0 pinned by s1
  RunStep(*f.cache, StepBuilder(s1).BeginPass().BeginPass());  // s1's pin gone
  // s2 resumes from slot 0 and pins it.
  RunStep(*f.cache, StepBuilder(s2).Admit("b", 1, 100, {9}, 1, 64));
  ASSERT_EQ(f.cache->DumpPool().pinned,
            (std::vector<std::pair<int64_t, int64_t>>{{0, 1}}));
  // a's fork source was forgotten by s1's clock: releasing a now must not
  // touch s2's pin.
  RunStep(*f.cache, StepBuilder(s1).Release("a"));
  EXPECT_EQ(f.cache->DumpPool().pinned,
            (std::vector<std::pair<int64_t, int64_t>>{{0, 1}}));
  EXPECT_TRUE(f.cache->CheckInvariants().ok());
}

TEST(StateCacheTest, AdoptForkSourceOnlyForTheOnlyReader) {
  Fixture f;
  const std::string s = f.Attach();
  RunStep(*f.cache, StepBuilder(s).Admit("a", 1, 100, {9}, 0, 64));
  RunStep(*f.cache, StepBuilder(s).Checkpoint("a", 1, 9));  // a: slot 1, src 0
  RunStep(*f.cache, StepBuilder(s).BeginPass());            // deferral ends
  // b resumes from the same source: 2 readers.
  RunStep(*f.cache, StepBuilder(s).Admit("b", 1, 100, {9}, 1, 64));
  auto refused = RunStep(*f.cache, StepBuilder(s).AdoptForkSource("a"));
  EXPECT_EQ(refused.results(0).code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_NE(refused.results(0).message().find("2 readers"), std::string::npos);
  RunStep(*f.cache, StepBuilder(s).Release("b"));
  const PoolSnapshot before = f.cache->DumpPool();
  auto ok = RunStep(*f.cache, StepBuilder(s).AdoptForkSource("a"));
  ASSERT_EQ(ok.results(0).code(), 0) << ok.results(0).message();
  EXPECT_EQ(ok.results(0).adopt_fork_source().state_slot(), 0);
  const PoolSnapshot after = f.cache->DumpPool();
  EXPECT_TRUE(after.pinned.empty());
  EXPECT_NE(before, after);
  // a's fresh slot 1 went back.
  EXPECT_TRUE(std::count(after.free.begin(), after.free.end(), 1));
  EXPECT_TRUE(f.cache->CheckInvariants().ok());
}

TEST(StateCacheTest, MidstepReservePublishCancel) {
  Fixture f;
  const std::string s = f.Attach();
  RunStep(*f.cache, StepBuilder(s).Admit("a", 1, 300, {1, 2, 3, 4}, 0, 256));
  auto r = RunStep(*f.cache, StepBuilder(s).Reserve("a", {{128, 2}, {256, 4}}));
  ASSERT_EQ(r.results(0).reserve().reservations_size(), 2);
  EXPECT_EQ(r.results(0).reserve().reservations(0).slot(), 1);
  EXPECT_EQ(r.results(0).reserve().reservations(1).slot(), 2);
  // Not indexed until published.
  auto l = RunStep(*f.cache, StepBuilder(s).Lookup(4));
  EXPECT_EQ(l.results(0).lookup().slot(), -1);
  auto p = RunStep(*f.cache, StepBuilder(s).Publish("a").Lookup(4).Lookup(2));
  EXPECT_EQ(p.results(0).publish().published(), 2);
  EXPECT_EQ(p.results(1).lookup().slot(), 2);
  EXPECT_EQ(p.results(2).lookup().slot(), 1);
  // 128 is not the anchor: filed as a guess at the LRU head.
  const PoolSnapshot snap = f.cache->DumpPool();
  EXPECT_EQ(snap.checkpointed, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(snap.speculative, (std::vector<int64_t>{1}));
  // A second reserve cancels an unpublished first one.
  RunStep(*f.cache, StepBuilder(s).Reserve("a", {{192, 3}}));
  RunStep(*f.cache, StepBuilder(s).Reserve("a", {{192, 3}}));
  auto c = RunStep(*f.cache, StepBuilder(s).Cancel("a"));
  EXPECT_EQ(c.results(0).cancel().cancelled(), 1);
  EXPECT_EQ(f.cache->DumpPool().free.size(), 7u);
  EXPECT_TRUE(f.cache->CheckInvariants().ok());
}

TEST(StateCacheTest, RefusedOperationsChangeNothing) {
  Fixture f(4);
  const std::string s = f.Attach();
  const std::string other = f.Attach();
  RunStep(*f.cache, StepBuilder(s).Admit("a", 1, 100, {5}, 0, 64));
  RunStep(*f.cache, StepBuilder(other).Admit("theirs", 1, 100, {6}, 0, 64));
  struct Case {
    const char* name;
    StepBuilder step;
    absl::StatusCode code;
  };
  std::vector<Case> cases;
  auto add = [&](const char* name, absl::StatusCode code,
                 std::function<void(StepBuilder&)> build) {
    StepBuilder b(s);
    build(b);
    cases.push_back({name, b, code});
  };
  using C = absl::StatusCode;
  add("unknown request", C::kNotFound, [](StepBuilder& b) { b.Release("zz"); });
  add("another session's request", C::kNotFound,
      [](StepBuilder& b) { b.Release("theirs"); });
  add("duplicate admit", C::kAlreadyExists,
      [](StepBuilder& b) { b.Admit("a", 1, 10, {}, 0); });
  add("width 0", C::kInvalidArgument,
      [](StepBuilder& b) { b.Admit("w0", 0, 10, {}, 0); });
  add("width beyond the pool", C::kInvalidArgument,
      [](StepBuilder& b) { b.Admit("w9", 9, 10, {}, 0); });
  add("width beyond what is free", C::kResourceExhausted,
      [](StepBuilder& b) { b.Admit("w3", 3, 10, {}, 0); });
  add("kv hit beyond the hashes", C::kInvalidArgument,
      [](StepBuilder& b) { b.Admit("k", 1, 10, {1}, 2); });
  add("negative hash", C::kInvalidArgument,
      [](StepBuilder& b) { b.Admit("n", 1, 10, {-4}, 1); });
  add("negative num_tokens", C::kInvalidArgument,
      [](StepBuilder& b) { b.Admit("t", 1, -10, {}, 0); });
  add("empty request id", C::kInvalidArgument,
      [](StepBuilder& b) { b.Admit("", 1, 10, {}, 0); });
  add("negative checkpoint boundary", C::kInvalidArgument,
      [](StepBuilder& b) { b.Checkpoint("a", -1, 5); });
  add("negative checkpoint hash", C::kInvalidArgument,
      [](StepBuilder& b) { b.Checkpoint("a", 1, -5); });
  add("adopt without a fork source", C::kFailedPrecondition,
      [](StepBuilder& b) { b.AdoptForkSource("a"); });
  add("negative unindex hash", C::kInvalidArgument, [](StepBuilder& b) {
    b.Unindex({3, -3});
  });
  add("reserve negative hash", C::kInvalidArgument, [](StepBuilder& b) {
    b.Reserve("a", {{64, -1}});
  });
  for (Case& c : cases) {
    const PoolSnapshot before = f.cache->DumpPool();
    v1::GetStatsResponse stats_before;
    f.cache->GetStats(&stats_before);
    v1::StepResponse resp = RunStep(*f.cache, c.step);
    ASSERT_EQ(resp.results_size(), 1) << c.name;
    EXPECT_EQ(resp.results(0).code(), static_cast<int>(c.code))
        << c.name << ": " << resp.results(0).message();
    EXPECT_FALSE(resp.results(0).message().empty()) << c.name;
    EXPECT_EQ(resp.results(0).result_case(),
              v1::OperationResult::RESULT_NOT_SET)
        << c.name;
    EXPECT_EQ(f.cache->DumpPool(), before) << c.name;
    v1::GetStatsResponse stats_after;
    f.cache->GetStats(&stats_after);
    stats_after.set_uptime_seconds(stats_before.uptime_seconds());
    EXPECT_EQ(stats_after.SerializeAsString(), stats_before.SerializeAsString())
        << c.name;
  }
  EXPECT_TRUE(f.cache->CheckInvariants().ok());
}

TEST(StateCacheTest, WholeStepRefusals) {
  Fixture f;
  const std::string s = f.Attach();
  v1::StepResponse resp;
  v1::StepRequest unknown;
  unknown.set_session_id("nope");
  unknown.add_operations()->mutable_begin_pass();
  EXPECT_EQ(f.cache->Step(unknown, &resp).code(), absl::StatusCode::kNotFound);
  v1::StepRequest huge;
  huge.set_session_id(s);
  for (int i = 0; i < 65; ++i) huge.add_operations()->mutable_begin_pass();
  absl::Status st = f.cache->Step(huge, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("65"), std::string::npos);
  v1::StepRequest empty_op;
  empty_op.set_session_id(s);
  empty_op.add_operations();
  EXPECT_EQ(f.cache->Step(empty_op, &resp).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StateCacheTest, LapsedLeaseReleasesEverythingAndKeepsCheckpoints) {
  Fixture f(4);
  const std::string s = f.Attach();
  RunStep(*f.cache, StepBuilder(s).Admit("a", 1, 100, {5}, 0, 64));
  RunStep(*f.cache, StepBuilder(s).Checkpoint("a", 1, 5));  // 0 pinned, a on 1
  RunStep(*f.cache, StepBuilder(s).Admit("b", 2, 100, {}, 0));
  EXPECT_EQ(f.cache->DumpPool().free.size(), 0u);
  f.clock.Advance(absl::Seconds(9));
  v1::KeepAliveRequest ka;
  ka.set_session_id(s);
  v1::KeepAliveResponse kar;
  ASSERT_TRUE(f.cache->KeepAlive(ka, &kar).ok());  // renews
  f.clock.Advance(absl::Seconds(9));
  f.cache->Tick();
  EXPECT_EQ(f.cache->DumpPool().free.size(), 0u);  // still alive
  f.clock.Advance(absl::Seconds(2));
  f.cache->Tick();
  const PoolSnapshot snap = f.cache->DumpPool();
  EXPECT_EQ(snap.free.size(), 4u);
  EXPECT_TRUE(snap.pinned.empty());
  EXPECT_EQ(snap.hash_to_slot,
            (std::vector<std::pair<int64_t, int64_t>>{{5, 0}}));
  v1::GetStatsResponse stats;
  f.cache->GetStats(&stats);
  EXPECT_EQ(stats.sessions(), 0);
  EXPECT_EQ(stats.lease_expiries(), 1);
  v1::StepResponse resp;
  absl::Status st = f.cache->Step(StepBuilder(s).BeginPass().request(), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(st.message().find("expired"), std::string::npos) << st;
  EXPECT_TRUE(f.cache->CheckInvariants().ok());
}

TEST(StateCacheTest, ShrinkMovesLiveSlotsInTheirSessionsBeginPass) {
  Fixture f(6);
  const std::string s = f.Attach();
  // Fill 0..5, then release the low ones so the top is live with room below.
  RunStep(*f.cache, StepBuilder(s)
                        .Admit("a", 1, 10, {}, 0)
                        .Admit("b", 1, 10, {}, 0)
                        .Admit("c", 1, 10, {}, 0)
                        .Admit("d", 1, 10, {}, 0)
                        .Admit("e", 1, 10, {}, 0)
                        .Admit("top", 1, 10, {}, 0));
  RunStep(*f.cache, StepBuilder(s).Release("a").Release("b").Release("e"));
  absl::Status result = absl::UnknownError("not run");
  v1::ResizeResponse out;
  v1::ResizeRequest req;
  req.set_target_slots(3);
  f.cache->Resize(req, [&](absl::Status st, const v1::ResizeResponse& r) {
    result = st;
    out = r;
  });
  // The top slot is live: its engine may be writing it until the session's
  // next begin_pass.
  EXPECT_EQ(result.code(), absl::StatusCode::kUnknown) << result;
  EXPECT_EQ(f.cache->DumpPool().num_slots, 6);
  auto p = RunStep(*f.cache, StepBuilder(s).BeginPass());
  ASSERT_TRUE(result.ok()) << result;
  EXPECT_EQ(out.num_slots(), 3);
  EXPECT_EQ(out.relocated(), 2);  // top (5) -> 0, d (3) -> 1
  const auto& moves = p.results(0).begin_pass().moves();
  ASSERT_EQ(moves.size(), 2);
  EXPECT_EQ(moves[0].request_id(), "top");
  EXPECT_EQ(moves[0].from_slot(), 5);
  EXPECT_EQ(moves[0].to_slot(), 0);
  EXPECT_EQ(moves[1].request_id(), "d");
  EXPECT_EQ(moves[1].from_slot(), 3);
  EXPECT_EQ(moves[1].to_slot(), 1);
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
  // Moves are reported once.
  auto p2 = RunStep(*f.cache, StepBuilder(s).BeginPass());
  EXPECT_EQ(p2.results(0).begin_pass().moves_size(), 0);
}

TEST(StateCacheTest, ShrinkWaitsForPinsThenHitsItsDeadline) {
  Fixture f(2);
  const std::string s = f.Attach();
  RunStep(*f.cache, StepBuilder(s).Admit("a", 1, 100, {5}, 0, 64));
  RunStep(*f.cache, StepBuilder(s).Checkpoint("a", 1, 5));  // 0 pinned, a on 1
  absl::Status result = absl::UnknownError("pending");
  v1::ResizeRequest req;
  req.set_target_slots(1);
  req.set_deadline_ms(1000);
  f.cache->Resize(
      req, [&](absl::Status st, const v1::ResizeResponse&) { result = st; });
  // Top (1) is live and slot 0 is pinned: nowhere to go yet.
  EXPECT_EQ(result.code(), absl::StatusCode::kUnknown);
  v1::ResizeRequest again;
  again.set_target_slots(1);
  absl::Status second;
  f.cache->Resize(
      again, [&](absl::Status st, const v1::ResizeResponse&) { second = st; });
  EXPECT_EQ(second.code(), absl::StatusCode::kAborted);
  f.clock.Advance(absl::Seconds(2));
  f.cache->Tick();
  EXPECT_EQ(result.code(), absl::StatusCode::kDeadlineExceeded) << result;

  // Now let the pin clear: the next resize completes from the Step.
  result = absl::UnknownError("pending");
  req.set_deadline_ms(60000);
  f.cache->Resize(
      req, [&](absl::Status st, const v1::ResizeResponse&) { result = st; });
  EXPECT_EQ(result.code(), absl::StatusCode::kUnknown);
  // The first begin_pass keeps the pin (its reader is the next batch); the
  // second returns it, and in the same begin_pass a's slot moves onto it.
  auto p = RunStep(*f.cache, StepBuilder(s).BeginPass().BeginPass());
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(f.cache->DumpPool().num_slots, 1);
  EXPECT_EQ(p.results(0).begin_pass().moves_size(), 0);
  ASSERT_EQ(p.results(1).begin_pass().moves_size(), 1);
  EXPECT_EQ(p.results(1).begin_pass().moves(0).from_slot(), 1);
  EXPECT_EQ(p.results(1).begin_pass().moves(0).to_slot(), 0);
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
}

// A shrink used to move a live slot at once, under the forward
// writing it, and report the move at the next begin_pass, by when a
// checkpoint could have moved the request again. Now only the holder's own
// begin_pass moves it, and every reported move starts from the slot the
// request holds.
TEST(StateCacheTest, AShrinkNeverMovesAnotherSessionsLiveSlot) {
  Fixture f(8);
  const std::string a = f.Attach("a");
  const std::string b = f.Attach("b");
  // a holds 0..5, b's request "r" the top, 7 (then a frees 2..5).
  StepBuilder fill(a);
  for (int i = 0; i < 6; ++i) fill.Admit(absl::StrCat("a", i), 1, 10, {}, 0);
  RunStep(*f.cache, fill);
  RunStep(*f.cache, StepBuilder(b).Admit("low", 1, 10, {}, 0));  // 6
  auto admitted =
      RunStep(*f.cache, StepBuilder(b).Admit("r", 1, 300, {11, 12}, 0, 256));
  ASSERT_EQ(admitted.results(0).admit().slots(0), 7);
  RunStep(*f.cache, StepBuilder(b).Release("low"));
  RunStep(
      *f.cache,
      StepBuilder(a).Release("a2").Release("a3").Release("a4").Release("a5"));
  absl::Status result = absl::UnknownError("pending");
  v1::ResizeRequest req;
  req.set_target_slots(4);
  f.cache->Resize(
      req, [&](absl::Status st, const v1::ResizeResponse&) { result = st; });
  EXPECT_EQ(result.code(), absl::StatusCode::kUnknown);
  // a's passes do not move b's slot.
  auto pa = RunStep(*f.cache, StepBuilder(a).BeginPass());
  EXPECT_EQ(pa.results(0).begin_pass().moves_size(), 0);
  EXPECT_EQ(f.cache->DumpPool().num_slots, 8);
  // b's forward wrote 7; postprocess checkpoints it: r moves to a fresh
  // slot (the lowest vacant, 2) and 7 is pinned as its fork source.
  auto ck = RunStep(*f.cache, StepBuilder(b).Checkpoint("r", 1, 11));
  ASSERT_TRUE(ck.results(0).checkpoint().kept());
  int64_t holds = ck.results(0).checkpoint().state_slot();
  EXPECT_EQ(holds, 2);
  // Every move b hears of starts where r is.
  for (int pass = 0; pass < 3; ++pass) {
    auto pb = RunStep(*f.cache, StepBuilder(b).ConsumeFork("r").BeginPass());
    for (const v1::SlotMove& m : pb.results(1).begin_pass().moves()) {
      EXPECT_EQ(m.request_id(), "r");
      EXPECT_EQ(m.from_slot(), holds) << pb.ShortDebugString();
      holds = m.to_slot();
    }
  }
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(f.cache->DumpPool().num_slots, 4);
  EXPECT_LT(holds, 4);
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
}

TEST(StateCacheTest, GrowIsImmediate) {
  Fixture f(2);
  absl::Status result = absl::UnknownError("pending");
  v1::ResizeRequest req;
  req.set_target_slots(10);
  f.cache->Resize(req, [&](absl::Status st, const v1::ResizeResponse& r) {
    result = st;
    EXPECT_EQ(r.num_slots(), 10);
  });
  EXPECT_TRUE(result.ok());
  req.set_target_slots(0);
  f.cache->Resize(
      req, [&](absl::Status st, const v1::ResizeResponse&) { result = st; });
  EXPECT_EQ(result.code(), absl::StatusCode::kInvalidArgument);
}

// A single session's steps make the decisions the reference's caller makes.
// The mirror drives a plain SlotPool (proven equal to the reference by the
// parity suite) with the reference caller's call sequence; after every step
// the daemon's pool must be identical to it.
// ---- The edges statecache.proto documents, one test each.

int Code(const v1::StepResponse& response, int i) {
  return response.results(i).code();
}
constexpr int kInvalidArgument =
    static_cast<int>(absl::StatusCode::kInvalidArgument);

// "a request_id is 1..256 bytes": 256 is admitted, 257 and 0 are refused
// with a message naming the limit, and nothing changed.
// ------------------------------------------------------------------ limits

Fixture WithLimits(int64_t num_slots, int64_t max_slots_per_session,
                   int32_t max_sessions) {
  return Fixture(num_slots,
                 *StateTransfer::Create(TransferKind::kFork, 1, true),
                 [&](StateCacheOptions& o) {
                   o.max_slots_per_session = max_slots_per_session;
                   o.max_sessions = max_sessions;
                 });
}

TEST(LimitsTest, AnAdmitPastTheSessionsQuotaIsRefusedAndChangesNothing) {
  Fixture f = WithLimits(16, 4, 0);
  const std::string s = f.Attach("greedy");
  const std::string other = f.Attach("other");
  RunStep(*f.cache, StepBuilder(s).Admit("a", 3, 10, {}, 0));
  const std::string before = f.cache->DebugDump();
  v1::StepResponse r =
      RunStep(*f.cache, StepBuilder(s).Admit("b", 2, 10, {}, 0));
  EXPECT_EQ(r.results(0).code(),
            static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(r.results(0).message().find("--max_slots_per_session"),
            std::string::npos)
      << r.results(0).message();
  EXPECT_NE(r.results(0).message().find("quota of 4"), std::string::npos);
  EXPECT_EQ(f.cache->DebugDump(), before);
  // Up to the quota is fine, and another session is not starved by it.
  r = RunStep(*f.cache, StepBuilder(s).Admit("b", 1, 10, {}, 0));
  EXPECT_EQ(r.results(0).code(), 0);
  r = RunStep(*f.cache, StepBuilder(other).Admit("x", 4, 10, {}, 0));
  EXPECT_EQ(r.results(0).code(), 0) << r.results(0).message();
  // A release gives the quota back.
  r = RunStep(*f.cache, StepBuilder(s).Release("a").Admit("c", 3, 10, {}, 0));
  EXPECT_EQ(r.results(1).code(), 0) << r.results(1).message();
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
}

TEST(LimitsTest, ReservationsCountAgainstTheQuotaUntilPublished) {
  Fixture f = WithLimits(16, 3, 0);
  const std::string s = f.Attach();
  RunStep(*f.cache, StepBuilder(s).Admit("a", 1, 300, {1, 2, 3, 4}, 0, 256));
  v1::StepResponse r = RunStep(
      *f.cache, StepBuilder(s).Reserve("a", {{64, 1}, {128, 2}, {192, 3}}));
  EXPECT_EQ(r.results(0).code(),
            static_cast<int>(absl::StatusCode::kResourceExhausted));
  r = RunStep(*f.cache, StepBuilder(s).Reserve("a", {{64, 1}, {128, 2}}));
  ASSERT_EQ(r.results(0).code(), 0);
  // A superseding reserve is judged net of what it supersedes.
  r = RunStep(*f.cache, StepBuilder(s).Reserve("a", {{64, 1}, {192, 3}}));
  EXPECT_EQ(r.results(0).code(), 0) << r.results(0).message();
  r = RunStep(*f.cache, StepBuilder(s).Admit("b", 1, 10, {}, 0));
  EXPECT_EQ(r.results(0).code(),
            static_cast<int>(absl::StatusCode::kResourceExhausted));
  // Published checkpoints belong to the pool, not the session.
  r = RunStep(*f.cache, StepBuilder(s).Publish("a").Admit("b", 2, 10, {}, 0));
  EXPECT_EQ(r.results(1).code(), 0) << r.results(1).message();
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
}

// A session that checkpoints in a loop without begin_pass pinned
// the whole pool past its quota. Pins count now.
TEST(LimitsTest, PinnedForkSourcesCountAgainstTheQuota) {
  Fixture f = WithLimits(64, 4, 0);
  const std::string s = f.Attach("looper");
  const std::string other = f.Attach("other");
  RunStep(*f.cache, StepBuilder(s).Admit("a", 1, 100000, {}, 0));
  int kept = 0;
  v1::StepResponse r;
  for (int k = 1; k <= 64; ++k) {
    const std::string before = f.cache->DebugDump();
    r = RunStep(*f.cache, StepBuilder(s).Checkpoint("a", k, 1000 + k));
    if (r.results(0).code() != 0) {
      EXPECT_EQ(f.cache->DebugDump(), before);
      break;
    }
    ++kept;
  }
  EXPECT_EQ(kept, 3);  // 1 held + 3 pinned = the quota of 4
  EXPECT_EQ(r.results(0).code(),
            static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(r.results(0).message().find("3 pinned fork sources"),
            std::string::npos)
      << r.results(0).message();
  EXPECT_NE(r.results(0).message().find("--max_slots_per_session"),
            std::string::npos);
  // The rest of the pool is the other sessions', each up to its quota.
  for (int k = 0; k < 15; ++k) {
    const std::string other_k = k == 0 ? other : f.Attach();
    StepBuilder four(other_k);
    for (int i = 0; i < 4; ++i) four.Admit(absl::StrCat("o", i), 1, 10, {}, 0);
    auto o = RunStep(*f.cache, four);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(o.results(i).code(), 0) << i << ": " << o.results(i).message();
    }
  }
  // The pin clock gives the quota back.
  r = RunStep(
      *f.cache,
      StepBuilder(s).ConsumeFork("a").BeginPass().BeginPass().Checkpoint(
          "a", 100, 2000));
  EXPECT_EQ(r.results(3).code(), 0) << r.results(3).message();
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
}

// A resume that may pin its checkpoint counts that slot before it does.
TEST(LimitsTest, AResumingAdmitCountsItsForkSource) {
  Fixture f = WithLimits(16, 2, 0);
  const std::string s = f.Attach();
  RunStep(*f.cache, StepBuilder(s).Admit("w", 1, 300, {1, 2, 3, 4}, 0, 256));
  RunStep(*f.cache, StepBuilder(s)
                        .Checkpoint("w", 4, 4)
                        .ConsumeFork("w")
                        .Release("w")
                        .BeginPass()
                        .BeginPass());
  auto r = RunStep(*f.cache,
                   StepBuilder(s).Admit("r", 2, 300, {1, 2, 3, 4}, 4, 256));
  EXPECT_EQ(r.results(0).code(),
            static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_NE(r.results(0).message().find("fork source"), std::string::npos)
      << r.results(0).message();
  // The same width cold fits.
  r = RunStep(*f.cache, StepBuilder(s).Admit("c", 2, 300, {1, 2, 3, 4}, 0));
  EXPECT_EQ(r.results(0).code(), 0) << r.results(0).message();
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
}

TEST(LimitsTest, AStepPastMaxHashesIsRefusedWholeInEitherForm) {
  Fixture f(16, *StateTransfer::Create(TransferKind::kFork, 1, true),
            [](StateCacheOptions& o) { o.max_hashes_per_step = 6; });
  const std::string s = f.Attach();
  RunStep(*f.cache, StepBuilder(s).Admit("a", 1, 300, {1, 2, 3, 4}, 0, 256));
  RunStep(*f.cache, StepBuilder(s).Checkpoint("a", 4, 4));
  const std::string before = f.cache->DebugDump();
  // 4 block hashes + 3 unindexed: seven, one past the cap.
  StepBuilder heavy = StepBuilder(s)
                          .Admit("b", 1, 300, {1, 2, 3, 4}, 0, 256)
                          .Unindex({4, 5, 6});
  v1::StepResponse response;
  absl::Status refused = f.cache->Step(heavy.request(), &response);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("7 hashes; at most 6"), std::string::npos)
      << refused;
  EXPECT_NE(refused.message().find("--max_hashes_per_step"), std::string::npos);
  v1::StepRequest packed;
  packed.set_session_id(s);
  ASSERT_TRUE(
      PackOperations(heavy.request().operations(), packed.mutable_packed())
          .ok());
  response.Clear();
  EXPECT_EQ(f.cache->Step(packed, &response).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.cache->DebugDump(), before) << "a refused step changed things";
  // At the cap it runs.
  v1::StepResponse ran = RunStep(
      *f.cache,
      StepBuilder(s).Admit("b", 1, 300, {1, 2, 3, 4}, 0, 256).Unindex({5, 6}));
  EXPECT_EQ(ran.results(0).code(), 0) << ran.results(0).message();
  v1::AttachRequest attach;
  *attach.mutable_identity() = TestIdentity();
  v1::AttachResponse attached;
  ASSERT_TRUE(f.cache->Attach(attach, &attached).ok());
  EXPECT_EQ(attached.max_hashes_per_step(), 6);
}

TEST(LimitsTest, AttachPastMaxSessionsIsRefusedUntilOneDetaches) {
  Fixture f = WithLimits(8, 0, 2);
  const std::string one = f.Attach("one");
  f.Attach("two");
  v1::AttachRequest req;
  *req.mutable_identity() = TestIdentity();
  v1::AttachResponse resp;
  const absl::Status refused = f.cache->Attach(req, &resp);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("--max_sessions=2"), std::string::npos)
      << refused;
  v1::DetachRequest detach;
  detach.set_session_id(one);
  v1::DetachResponse detached;
  ASSERT_TRUE(f.cache->Detach(detach, &detached).ok());
  EXPECT_TRUE(f.cache->Attach(req, &resp).ok());
}

TEST(LimitsTest, NegativeLimitsAreRefusedAtCreate) {
  StateCacheOptions options;
  options.identity = TestIdentity();
  options.num_slots = 8;
  options.max_slots_per_session = -1;
  EXPECT_EQ(StateCache::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ------------------------------------------------------------------ fencing

Fixture WithQuarantine(int64_t num_slots, absl::Duration quarantine) {
  return Fixture(num_slots,
                 *StateTransfer::Create(TransferKind::kFork, 1, true),
                 [&](StateCacheOptions& o) { o.quarantine = quarantine; });
}

std::vector<int64_t> AdmitAll(StateCache& cache, const std::string& session,
                              const std::string& prefix, int count) {
  std::vector<int64_t> got;
  for (int i = 0; i < count; ++i) {
    v1::StepResponse r = RunStep(
        cache,
        StepBuilder(session).Admit(absl::StrCat(prefix, i), 1, 10, {}, 0));
    if (r.results(0).code() != 0) break;
    got.push_back(r.results(0).admit().slots(0));
  }
  return got;
}

// GetStats' slots_quarantined.
int64_t Quarantined(StateCache& cache) {
  v1::GetStatsResponse stats;
  cache.GetStats(&stats);
  return stats.slots_quarantined();
}

TEST(FencingTest, ALapsedSessionsSlotsGoToNobodyUntilTheQuarantineEnds) {
  Fixture f = WithQuarantine(6, absl::Seconds(10));
  const std::string hung = f.Attach("hung");
  // Its request a, a forward's reservation, and a fork source it reads.
  RunStep(
      *f.cache,
      StepBuilder(hung).Admit("a", 2, 300, {7}, 0, 64).Checkpoint("a", 1, 7));
  RunStep(*f.cache, StepBuilder(hung).Reserve("a", {{64, 8}}));
  const PoolSnapshot held = f.cache->DumpPool();
  ASSERT_EQ(held.free.size(), 2u);  // a's 2 slots, 1 reservation, 1 pinned
  EXPECT_EQ(Quarantined(*f.cache), 0);
  f.clock.Advance(absl::Seconds(11));  // its lease lapses
  f.cache->Tick();
  EXPECT_EQ(Quarantined(*f.cache), 3);  // a's 2 slots and its reservation
  const std::string next = f.Attach("next");
  // The pin went (its checkpoint is free to be spent), the rest is fenced:
  // the next owner gets the two free slots and the checkpoint, no more.
  EXPECT_EQ(AdmitAll(*f.cache, next, "n", 6).size(), 3u);
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
  f.clock.Advance(absl::Seconds(9));  // 20 s in: fenced for 10 s until 21
  f.cache->Tick();
  EXPECT_TRUE(AdmitAll(*f.cache, next, "m", 1).empty());
  f.clock.Advance(absl::Seconds(2));
  f.cache->Tick();
  EXPECT_EQ(Quarantined(*f.cache), 0);
  // Now they are free: a's two slots and the reservation's.
  EXPECT_EQ(AdmitAll(*f.cache, next, "k", 6).size(), 3u);
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
}

TEST(FencingTest, AnEvictedSessionIsFencedAndADetachedOneIsNot) {
  Fixture f = WithQuarantine(4, absl::Seconds(10));
  const std::string evicted = f.Attach("evicted");
  const std::string detached = f.Attach("detached");
  RunStep(*f.cache, StepBuilder(evicted).Admit("e", 2, 10, {}, 0));
  RunStep(*f.cache, StepBuilder(detached).Admit("d", 2, 10, {}, 0));
  v1::EvictSessionRequest evict;
  evict.set_session_id(evicted);
  v1::EvictSessionResponse evict_resp;
  ASSERT_TRUE(f.cache->EvictSession(evict, &evict_resp).ok());
  EXPECT_EQ(evict_resp.requests_released(), 1);
  v1::DetachRequest detach;
  detach.set_session_id(detached);
  v1::DetachResponse detach_resp;
  ASSERT_TRUE(f.cache->Detach(detach, &detach_resp).ok());
  EXPECT_EQ(f.cache->DumpPool().free.size(), 2u);  // only the detached two
  EXPECT_EQ(Quarantined(*f.cache), 2);
  EXPECT_LE(f.cache->NextDeadline(), f.clock.Now() + absl::Seconds(10));
  f.clock.Advance(absl::Seconds(10));
  f.cache->Tick();
  EXPECT_EQ(f.cache->DumpPool().free.size(), 4u);
  EXPECT_EQ(Quarantined(*f.cache), 0);
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
}

TEST(FencingTest, AShrinkWaitsForAFencedSlotsQuarantine) {
  Fixture f = WithQuarantine(4, absl::Seconds(10));
  const std::string s = f.Attach();
  RunStep(*f.cache, StepBuilder(s).Admit("low", 2, 10, {}, 0));
  RunStep(*f.cache, StepBuilder(s).Admit("top", 1, 10, {}, 0));  // slot 2
  RunStep(*f.cache, StepBuilder(s).Release("low"));
  f.clock.Advance(absl::Seconds(11));
  f.cache->Tick();  // lapsed: "top" fenced in slot 2
  v1::ResizeRequest resize;
  resize.set_target_slots(2);
  absl::Status resized = absl::UnknownError("not answered");
  f.cache->Resize(resize, [&](absl::Status st, const v1::ResizeResponse&) {
    resized = st;
  });
  // Its hung engine may still be writing slot 2: it is not moved.
  EXPECT_EQ(resized.code(), absl::StatusCode::kUnknown) << resized;
  EXPECT_EQ(f.cache->DumpPool().num_slots, 3);
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
  f.clock.Advance(absl::Seconds(10));
  f.cache->Tick();  // the quarantine ends, the slot is free, the shrink done
  EXPECT_TRUE(resized.ok()) << resized;
  EXPECT_EQ(f.cache->DumpPool().num_slots, 2);
  EXPECT_EQ(f.cache->DumpPool().free.size(), 2u);
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
}

TEST(ProtoContractTest, AdmitRefusesARequestIdOver256Bytes) {
  Fixture f;
  const std::string s = f.Attach();
  const PoolSnapshot before = f.cache->DumpPool();
  auto refused =
      RunStep(*f.cache, StepBuilder(s)
                            .Admit(std::string(257, 'x'), 1, 10, {}, 0)
                            .Admit("", 1, 10, {}, 0));
  EXPECT_EQ(Code(refused, 0), kInvalidArgument);
  EXPECT_NE(refused.results(0).message().find("at most 256"), std::string::npos)
      << refused.results(0).message();
  EXPECT_EQ(Code(refused, 1), kInvalidArgument);
  EXPECT_EQ(f.cache->DumpPool(), before);
  auto admitted = RunStep(
      *f.cache, StepBuilder(s).Admit(std::string(256, 'y'), 1, 10, {}, 0));
  EXPECT_EQ(Code(admitted, 0), 0) << admitted.results(0).message();
}

// "the daemon accepts any width in [1, the pool's size] and does not tie it
// to num_spec" (the identity here has num_spec 0).
TEST(ProtoContractTest, AdmitWidthIsAnyValueUpToThePoolSize) {
  Fixture f(8);
  const std::string s = f.Attach();
  auto r = RunStep(*f.cache, StepBuilder(s)
                                 .Admit("three", 3, 10, {}, 0)
                                 .Admit("zero", 0, 10, {}, 0)
                                 .Admit("nine", 9, 10, {}, 0)
                                 .Admit("six", 6, 10, {}, 0));
  ASSERT_EQ(Code(r, 0), 0) << r.results(0).message();
  EXPECT_EQ(r.results(0).admit().slots_size(), 3);
  EXPECT_EQ(Code(r, 1), kInvalidArgument);
  EXPECT_EQ(Code(r, 2), kInvalidArgument);
  // Within the pool's size but more than the 5 free: admit later.
  EXPECT_EQ(Code(r, 3), static_cast<int>(absl::StatusCode::kResourceExhausted));
}

// copy's errors "checked in this order": an unknown request is NOT_FOUND;
// then, without state memory, FAILED_PRECONDITION whatever the indices.
TEST(ProtoContractTest, CopyChecksTheRequestThenStateMemoryThenIndices) {
  Fixture f(8);  // no state memory
  const std::string s = f.Attach();
  RunStep(*f.cache, StepBuilder(s).Admit("a", 2, 10, {}, 0));
  v1::StepRequest request;
  request.set_session_id(s);
  auto add_copy = [&](const std::string& id, int from, int to) {
    v1::Copy* copy = request.add_operations()->mutable_copy();
    copy->set_request_id(id);
    copy->set_from_index(from);
    copy->set_to_index(to);
  };
  add_copy("nope", 0, 5);
  add_copy("a", 0, 5);
  add_copy("a", 1, 1);
  add_copy("a", 1, 0);
  v1::StepResponse response;
  ASSERT_TRUE(f.cache->Step(request, &response).ok());
  EXPECT_EQ(Code(response, 0), static_cast<int>(absl::StatusCode::kNotFound));
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(Code(response, i),
              static_cast<int>(absl::StatusCode::kFailedPrecondition))
        << i << ": " << response.results(i).message();
  }
}

// consume_fork forgets the source at once, but the pin (and the slot's
// `used` count) lasts until the pin clock returns it: the begin_pass after
// next for a source this pass's checkpoint pinned.
TEST(ProtoContractTest, ConsumeForkLeavesThePinToThePinClock) {
  Fixture f(8);
  const std::string s = f.Attach();
  RunStep(*f.cache, StepBuilder(s).Admit("a", 1, 100, {9}, 0, 64));
  auto checkpoint = RunStep(*f.cache, StepBuilder(s).Checkpoint("a", 1, 9));
  ASSERT_EQ(checkpoint.results(0).checkpoint().fork_src(), 0);
  ASSERT_EQ(checkpoint.results(0).checkpoint().state_slot(), 1);
  auto used = [&] {
    v1::GetStatsResponse stats;
    f.cache->GetStats(&stats);
    return stats.slots_used();
  };
  EXPECT_EQ(used(), 2);  // a's slot 1, and slot 0 pinned as its source
  auto consumed = RunStep(*f.cache, StepBuilder(s).ConsumeFork("a"));
  EXPECT_EQ(consumed.results(0).consume_fork().fork_src(), 0);
  EXPECT_EQ(used(), 2);
  EXPECT_EQ(f.cache->DumpPool().pinned,
            (std::vector<std::pair<int64_t, int64_t>>{{0, 1}}));
  // Forgotten at once: a second consume_fork has nothing to forget.
  auto again = RunStep(*f.cache, StepBuilder(s).ConsumeFork("a"));
  EXPECT_EQ(again.results(0).consume_fork().fork_src(), -1);
  auto first = RunStep(*f.cache, StepBuilder(s).BeginPass());
  EXPECT_EQ(first.results(0).begin_pass().pins_released(), 0);
  EXPECT_EQ(used(), 2);
  auto second = RunStep(*f.cache, StepBuilder(s).BeginPass());
  EXPECT_EQ(second.results(0).begin_pass().pins_released(), 1);
  EXPECT_EQ(used(), 1);
  EXPECT_EQ(f.cache->DumpPool().checkpointed, (std::vector<int64_t>{0}));
}

// "A checkpoint another request already pins can be resumed from all the
// same: the new request becomes a second reader of the same source."
TEST(ProtoContractTest, ASecondRequestResumesFromAPinnedCheckpoint) {
  Fixture f(8);
  const std::string s = f.Attach();
  RunStep(*f.cache, StepBuilder(s).Admit("a", 1, 100, {9}, 0, 64));
  RunStep(*f.cache, StepBuilder(s).Checkpoint("a", 1, 9));  // 0 pinned
  auto r = RunStep(*f.cache, StepBuilder(s).Admit("b", 1, 100, {9}, 1, 64));
  ASSERT_EQ(Code(r, 0), 0) << r.results(0).message();
  EXPECT_EQ(r.results(0).admit().blocks_resumed(), 1);
  EXPECT_EQ(r.results(0).admit().fork_src(), 0);
  EXPECT_FALSE(r.results(0).admit().adopted());
  EXPECT_EQ(f.cache->DumpPool().pinned,
            (std::vector<std::pair<int64_t, int64_t>>{{0, 2}}));
  EXPECT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
}

TEST(StateCacheTest, OneSessionMatchesTheReferenceCallSequence) {
  constexpr int64_t kSlots = 12;
  Fixture f(kSlots);
  SlotPool mirror = *SlotPool::Create(
      kSlots, *StateTransfer::Create(TransferKind::kFork, 1, true), kBlock);
  const std::string s = f.Attach();
  std::mt19937_64 rng(7);
  struct Mirror {
    std::vector<int64_t> slots;
    int64_t fork_src = -1;
    std::vector<Reservation> reservations;
    Sequence seq;
    std::vector<int64_t> hashes;
  };
  std::map<std::string, Mirror> live;
  std::vector<std::vector<int64_t>> convs;  // block hashes of each conversation
  int next_id = 0;
  auto chain = [&](std::vector<int64_t> h, int add) {
    for (int i = 0; i < add; ++i) {
      h.push_back(static_cast<int64_t>(
          (rng() ^ (h.empty() ? 0 : static_cast<uint64_t>(h.back()) * 31)) >>
          1));
    }
    return h;
  };
  for (int pass = 0; pass < 400; ++pass) {
    StepBuilder step(s);
    step.BeginPass();
    mirror.ReleasePins();
    for (auto& [id, m] : live) {
      // The mirror's pin clock also forgets the readers' sources.
      if (m.fork_src >= 0 && !*mirror.IsPinned(m.fork_src)) m.fork_src = -1;
    }
    std::vector<std::string> admitted;
    // Admit up to 2 requests.
    for (int k = 0; k < 2; ++k) {
      std::vector<int64_t> hashes;
      const bool resume = !convs.empty() && rng() % 3 != 0;
      if (resume) {
        auto& conv = convs[rng() % convs.size()];
        conv = chain(conv, 1 + rng() % 2);
        hashes = conv;
      } else {
        hashes = chain({}, 1 + rng() % 3);
        convs.push_back(hashes);
      }
      const int64_t tokens = static_cast<int64_t>(hashes.size()) * kBlock + 5;
      const int kv_hit = static_cast<int>(hashes.size()) - (resume ? 1 : 0) -
                         (rng() % 4 == 0 ? 1 : 0);
      const int hit = std::max(0, kv_hit);
      const std::string id = absl::StrCat("r", next_id++);
      const int64_t anchor = static_cast<int64_t>(hashes.size()) * kBlock;
      if (!*mirror.HasFree(1)) break;
      step.Admit(id, 1, tokens, hashes, hit, anchor);
      // The reference caller's admission.
      Mirror m;
      m.seq = Sequence{-1, tokens, true, anchor, 0};
      m.hashes = hashes;
      int64_t L = *mirror.ResumableHit(m.seq, hit, hashes, false);
      int64_t src = L > 0 ? *mirror.Lookup(hashes[L - 1]) : -1;
      bool pinned = false;
      if (src >= 0) {
        pinned = *mirror.IsPinned(src);
        if (!pinned && !*mirror.IsFree(src)) {
          src = -1;
          L = 0;
        }
      }
      if (src >= 0) {
        ASSERT_TRUE(mirror.Promote(src).ok());
        if (!pinned) {
          ASSERT_TRUE(mirror.Claim(src).ok());
        }
        if (*mirror.HasFree(1)) {
          m.slots = *mirror.PopMany(1);
          ASSERT_TRUE(mirror.Pin(src, false).ok());
          m.fork_src = src;
        } else {
          ASSERT_TRUE(mirror.Invalidate(src).ok());
          m.slots = {src};
        }
      } else {
        m.slots = *mirror.PopMany(1);
      }
      m.seq.state_slot = m.slots[0];
      live[id] = m;
      admitted.push_back(id);
    }
    // Midstep for one admitted request, checkpoint in postprocess.
    for (const std::string& id : admitted) {
      Mirror& m = live[id];
      if (rng() % 2 == 0 && m.hashes.size() >= 2) {
        const int64_t b = 1;
        step.Reserve(id, {{b * kBlock, m.hashes[b - 1]}});
        m.reservations =
            *mirror.ReserveMidstep(m.seq, {{b * kBlock, m.hashes[b - 1]}});
        step.Publish(id);
        ASSERT_TRUE(mirror.PublishMidstep(m.reservations, m.seq).ok());
        m.reservations.clear();
      }
      const int64_t blocks = static_cast<int64_t>(m.hashes.size());
      step.Checkpoint(id, blocks, m.hashes.back());
      CheckpointResult r = *mirror.Checkpoint(m.seq, blocks, m.hashes.back());
      if (r.state_fork_src >= 0) {
        m.slots[0] = r.state_slot;
        m.seq.state_slot = r.state_slot;
        m.fork_src = r.state_fork_src;
      }
    }
    // Finish some requests.
    std::vector<std::string> finished;
    for (auto& [id, m] : live) {
      if (rng() % 3 == 0) finished.push_back(id);
    }
    for (const std::string& id : finished) {
      Mirror& m = live[id];
      step.Release(id);
      ASSERT_TRUE(mirror.ReleaseMany(m.slots).ok());
      ASSERT_TRUE(mirror.DropReader(m.fork_src).ok());
      live.erase(id);
    }
    if (pass % 37 == 0 && !convs.empty()) {
      const auto& conv = convs[rng() % convs.size()];
      step.Unindex({conv.front()});
      ASSERT_TRUE(mirror.Unindex(conv.front()).ok());
    }
    v1::StepResponse resp = RunStep(*f.cache, step);
    for (const auto& r : resp.results()) {
      ASSERT_EQ(r.code(), 0) << "pass " << pass << ": " << r.message();
    }
    PoolSnapshot got = f.cache->DumpPool();
    PoolSnapshot want = mirror.Dump();
    ASSERT_EQ(got, want) << "pass " << pass;
    ASSERT_TRUE(f.cache->CheckInvariants().ok()) << f.cache->CheckInvariants();
  }
  const CheckpointFates fates = mirror.Fates();
  EXPECT_GT(fates.kept, 100);
  EXPECT_GT(fates.evicted, 0);
  v1::GetStatsResponse stats;
  f.cache->GetStats(&stats);
  EXPECT_GT(stats.resumes_fork() + stats.resumes_adopt(), 20);
}

}  // namespace
}  // namespace statecache

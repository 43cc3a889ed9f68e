// The pool's call seam (daemon/core/pool_call.h) with the trace recorder
// (daemon/replay/trace_recorder.h) set on a StateCache: the core's own
// pool calls, written as a trace, replay to identical results through
// replay::ReplayTrace (what statecache-replay runs) and leave the pool the
// cache has; and a recording that differs from what the pool did fails.
#include "daemon/replay/trace_recorder.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/replay/trace.h"
#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"
#include "tests/service/random_operations.h"

namespace statecache {
namespace {

using replay::TraceRecorder;

v1::Identity Identity() { return TestIdentity("trace/model"); }

// A StateCache whose pool tells `recorder` of every call.
std::unique_ptr<StateCache> RecordedCache(TraceRecorder* recorder,
                                          int64_t num_slots = 8) {
  StateCacheOptions options;
  options.identity = Identity();
  options.num_slots = num_slots;
  options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
  options.max_operations_per_step = 64;
  options.pool_observer = recorder;
  return *StateCache::Create(std::move(options));
}

std::string Attach(StateCache& cache) {
  v1::AttachRequest req;
  *req.mutable_identity() = Identity();
  v1::AttachResponse resp;
  EXPECT_TRUE(cache.Attach(req, &resp).ok());
  return resp.session_id();
}

// A step of the session's, its operations added by `add`.
v1::StepResponse Step(StateCache& cache, const std::string& session,
                      const std::function<void(v1::StepRequest&)>& add) {
  v1::StepRequest req;
  req.set_session_id(session);
  add(req);
  v1::StepResponse resp;
  EXPECT_TRUE(cache.Step(req, &resp).ok());
  return resp;
}

void BeginPass(v1::StepRequest& r) { r.add_operations()->mutable_begin_pass(); }
void Admit(v1::StepRequest& r, const std::string& id,
           const std::vector<int64_t>& hashes, int32_t kv_hit,
           int32_t width = 1) {
  v1::Admit* a = r.add_operations()->mutable_admit();
  a->set_request_id(id);
  a->set_width(width);
  a->set_num_tokens(static_cast<int64_t>(hashes.size()) * kBlock + 5);
  a->set_anchor_pos(static_cast<int64_t>(hashes.size()) * kBlock);
  a->mutable_block_hashes()->Add(hashes.begin(), hashes.end());
  a->set_kv_hit_blocks(kv_hit);
}
void Checkpoint(v1::StepRequest& r, const std::string& id, int64_t blocks,
                int64_t hash) {
  v1::Checkpoint* c = r.add_operations()->mutable_checkpoint();
  c->set_request_id(id);
  c->set_boundary_blocks(blocks);
  c->set_hash(hash);
}
void Release(v1::StepRequest& r, const std::string& id) {
  r.add_operations()->mutable_release()->set_request_id(id);
}
void ConsumeFork(v1::StepRequest& r, const std::string& id) {
  r.add_operations()->mutable_consume_fork()->set_request_id(id);
}

// Passes of one session touching every verb a scheduler's pass uses:
// admissions cold, resumed by a fork and adopted, checkpoints, consumed
// forks, midstep reservations published and cancelled, queries, releases
// and the pin clock.
void RunPasses(StateCache& cache, const std::string& s) {
  Step(cache, s, [](v1::StepRequest& r) {
    BeginPass(r);
    Admit(r, "a", {11, 12}, 0);
    Admit(r, "b", {21}, 0, /*width=*/2);
  });
  Step(cache, s, [](v1::StepRequest& r) {
    BeginPass(r);
    Checkpoint(r, "a", 2, 12);
    Checkpoint(r, "b", 1, 21);
  });
  Step(cache, s, [](v1::StepRequest& r) {
    BeginPass(r);
    ConsumeFork(r, "a");
    ConsumeFork(r, "b");
    Release(r, "a");
    v1::Reserve* res = r.add_operations()->mutable_reserve();
    res->set_request_id("b");
    for (int64_t k : {1, 2}) {
      v1::MidstepPosition* p = res->add_positions();
      p->set_position(k * kBlock);
      p->set_hash(30 + k);
    }
  });
  Step(cache, s, [](v1::StepRequest& r) {
    BeginPass(r);
    r.add_operations()->mutable_publish()->set_request_id("b");
    Admit(r, "c", {11, 12, 13}, 2);  // resumes from a's checkpoint: a fork
    v1::ResumableHit* q = r.add_operations()->mutable_resumable_hit();
    q->set_num_tokens(3 * kBlock);
    for (int64_t h : {11, 12, 13}) q->add_block_hashes(h);
    q->set_kv_hit_blocks(3);
    r.add_operations()->mutable_lookup()->set_hash(21);
    Release(r, "c");  // before its forward read its fork source
  });
  Step(cache, s, [](v1::StepRequest& r) {
    BeginPass(r);
    Release(r, "b");
    r.add_operations()->mutable_unindex()->add_hashes(31);
  });
  // Fill the pool but for the checkpoint filed last (the LRU's tail), so
  // the next resume finds no room to fork: an adoption.
  Step(cache, s, [](v1::StepRequest& r) {
    BeginPass(r);
    for (int i = 0; i < 7; ++i) Admit(r, absl::StrCat("f", i), {100 + i}, 0);
  });
  const v1::StepResponse adopted = Step(cache, s, [](v1::StepRequest& r) {
    BeginPass(r);
    Admit(r, "d", {11, 12}, 2);
  });
  EXPECT_TRUE(adopted.results(1).admit().adopted());
  Step(cache, s, [](v1::StepRequest& r) {
    BeginPass(r);
    for (int i = 0; i < 7; ++i) Release(r, absl::StrCat("f", i));
    Release(r, "d");
    Admit(r, "e", {500}, 1);  // a miss
  });
}

// What statecache-replay prints for `lines`.
std::vector<std::string> Replayed(const std::vector<std::string>& lines) {
  return replay::ReplayTrace(lines, /*timing=*/nullptr);
}

bool HasLine(const TraceRecorder& recorder, const std::string& op) {
  for (const std::string& line : recorder.lines()) {
    if (absl::StrContains(line, absl::StrCat("\"op\":\"", op, "\""))) {
      return true;
    }
  }
  return false;
}

TEST(TraceRecorderTest, TheCoresPassesReplayToIdenticalResults) {
  TraceRecorder recorder;
  std::unique_ptr<StateCache> cache = RecordedCache(&recorder);
  RunPasses(*cache, Attach(*cache));
  // The whole state, as one more line: the replay must end where the
  // cache's pool is.
  const PoolSnapshot pool = cache->DumpPool();

  ASSERT_TRUE(recorder.status().ok()) << recorder.status();
  EXPECT_EQ(recorder.lines().front(),
            "{\"enabled\":true,\"hash_block_size\":64,\"num_slots\":8,"
            "\"op\":\"config\",\"transfer\":{\"fork_tokens\":1,\"kind\":"
            "\"fork\",\"readable_midstep\":true}}");
  for (const char* op :
       {"num_free", "resumable_hit", "lookup", "is_pinned", "promote", "claim",
        "pop_many", "pin", "checkpoint", "release_pins", "release_many",
        "drop_reader", "reserve_midstep", "publish_midstep", "invalidate",
        "unindex", "dump"}) {
    EXPECT_TRUE(HasLine(recorder, op)) << op;
  }
  EXPECT_EQ(recorder.lines().size(), recorder.results().size());
  EXPECT_EQ(recorder.calls().size() + 1, recorder.lines().size());
  EXPECT_EQ(Replayed(recorder.lines()), recorder.results());
  EXPECT_EQ(recorder.ReplayedDump(), pool);
}

TEST(TraceRecorderTest, RandomStepsReplayToIdenticalResults) {
  TraceRecorder recorder;
  std::unique_ptr<StateCache> cache = RecordedCache(&recorder, 12);
  const std::string s = Attach(*cache);
  Draw draw(20261204);
  for (int i = 0; i < 400; ++i) {
    v1::StepRequest req;
    req.set_session_id(s);
    for (int64_t n = 1 + draw.Below(6); n > 0; --n) {
      draw.Operation(req.add_operations());
    }
    v1::StepResponse resp;
    (void)cache->Step(req, &resp);
  }
  const PoolSnapshot pool = cache->DumpPool();
  ASSERT_TRUE(recorder.status().ok()) << recorder.status();
  EXPECT_GT(recorder.lines().size(), 400u);
  EXPECT_EQ(Replayed(recorder.lines()), recorder.results());
  EXPECT_EQ(recorder.ReplayedDump(), pool);
}

TEST(TraceRecorderTest, AChangedLineReplaysOtherwise) {
  TraceRecorder recorder;
  std::unique_ptr<StateCache> cache = RecordedCache(&recorder);
  RunPasses(*cache, Attach(*cache));
  (void)cache->DumpPool();
  ASSERT_TRUE(recorder.status().ok()) << recorder.status();
  ASSERT_EQ(Replayed(recorder.lines()), recorder.results());

  // Each a recording that is not what the core did: a pin clock tick
  // dropped, one slot fewer popped, the checkpoint of another hash.
  auto changed = [&](const std::string& op, const std::string& from,
                     const std::string& to) {
    std::vector<std::string> lines = recorder.lines();
    for (std::string& line : lines) {
      if (!absl::StrContains(line, absl::StrCat("\"op\":\"", op, "\""))) {
        continue;
      }
      const size_t at = line.find(from);
      if (at == std::string::npos) continue;
      line.replace(at, from.size(), to);
      return lines;
    }
    ADD_FAILURE() << "no " << op << " line with " << from;
    return lines;
  };
  EXPECT_NE(Replayed(changed("release_pins", "release_pins", "num_free")),
            recorder.results());
  EXPECT_NE(Replayed(changed("pop_many", "\"count\":2", "\"count\":1")),
            recorder.results());
  EXPECT_NE(Replayed(changed("checkpoint", "\"hash\":12", "\"hash\":13")),
            recorder.results());
}

TEST(TraceRecorderTest, FailsOnAResultThePoolDidNotGive) {
  TraceRecorder recorder;
  std::unique_ptr<StateCache> cache = RecordedCache(&recorder);
  RunPasses(*cache, Attach(*cache));
  ASSERT_TRUE(recorder.status().ok()) << recorder.status();
  const size_t lines = recorder.lines().size();
  // The pool has free slots; told it has none, the replay disagrees.
  recorder.OnCall(PoolCall{.op = PoolOp::kNumFree}, absl::OkStatus(),
                  PoolValue(int64_t{0}));
  EXPECT_EQ(recorder.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(recorder.status().message(), "num_free"))
      << recorder.status();
  // Nothing is written after the first failure.
  (void)cache->DumpPool();
  EXPECT_EQ(recorder.lines().size(), lines);
}

TEST(TraceRecorderTest, FailsOnATickThatIsNotTheWholePools) {
  TraceRecorder recorder;
  std::unique_ptr<StateCache> cache = RecordedCache(&recorder);
  const std::string s1 = Attach(*cache);
  const std::string s2 = Attach(*cache);
  for (const std::string& s : {s1, s2}) {
    Step(*cache, s, [](v1::StepRequest& r) {
      BeginPass(r);
      Admit(r, "a", {7}, 0);
    });
    Step(*cache, s, [](v1::StepRequest& r) { Checkpoint(r, "a", 1, 7); });
  }
  ASSERT_TRUE(recorder.status().ok()) << recorder.status();
  // s1's clock ends its own deferral; s2's pin stays deferred in the pool,
  // which release_pins would end too.
  Step(*cache, s1, BeginPass);
  Step(*cache, s1, BeginPass);
  EXPECT_EQ(recorder.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TraceRecorderTest, FailsOnAPoolAlreadyUsed) {
  absl::StatusOr<SlotPool> pool = SlotPool::Create(
      4, *StateTransfer::Create(TransferKind::kFork, 1, false), 64);
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE(pool->Pop().ok());
  TraceRecorder recorder;
  pool->SetCallObserver(&recorder);
  EXPECT_EQ(recorder.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(recorder.lines().empty());
}

}  // namespace
}  // namespace statecache

// Placement advice through StateCache (no RPC): a branch point found,
// advised, checkpointed as known and resumed from; continuations replacing
// each other; a decode continuation that would spend another checkpoint
// not kept; sessions that did not ask, and a daemon that does not give
// advice, getting the reference's decisions.
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"
#include "tests/service/test_identity.h"

namespace statecache {
namespace {

constexpr int64_t kBlock = kTestBlock;

class Advised {
 public:
  explicit Advised(int64_t num_slots,
                   const std::function<void(StateCacheOptions&)>& tweak = {}) {
    StateCacheOptions options;
    options.identity = TestIdentity();
    options.num_slots = num_slots;
    options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
    options.epoch = 7;
    if (tweak) tweak(options);
    cache_ = *StateCache::Create(options);
  }

  // Attaches; returns the session id and sets *advised.
  std::string Attach(bool ask, bool* advised = nullptr) {
    v1::AttachRequest request;
    *request.mutable_identity() = TestIdentity();
    request.set_advise_placement(ask);
    v1::AttachResponse response;
    EXPECT_TRUE(cache_->Attach(request, &response).ok());
    if (advised != nullptr) *advised = response.placement_advised();
    EXPECT_EQ(response.eviction(), "lru");
    return response.session_id();
  }

  // One operation in a Step of its own; its result, which must be OK.
  v1::OperationResult Run(const std::string& session, v1::Operation op) {
    v1::StepRequest request;
    request.set_session_id(session);
    *request.add_operations() = std::move(op);
    v1::StepResponse response;
    EXPECT_TRUE(cache_->Step(request, &response).ok());
    EXPECT_EQ(response.results_size(), 1);
    EXPECT_EQ(response.results(0).code(), 0) << response.results(0).message();
    return response.results(0);
  }

  // A prompt of `hashes.size()` full blocks and `tail` more tokens, anchored
  // at its last full block.
  v1::AdmitResult Admit(const std::string& session, const std::string& id,
                        const std::vector<int64_t>& hashes, int32_t kv_hit,
                        int32_t width = 1, int64_t tail = 10) {
    v1::Operation op;
    v1::Admit* a = op.mutable_admit();
    a->set_request_id(id);
    a->set_width(width);
    a->set_num_tokens(static_cast<int64_t>(hashes.size()) * kBlock + tail);
    a->set_anchor_pos(static_cast<int64_t>(hashes.size()) * kBlock);
    for (int64_t h : hashes) a->add_block_hashes(h);
    a->set_kv_hit_blocks(kv_hit);
    return Run(session, std::move(op)).admit();
  }

  v1::CheckpointResult Checkpoint(const std::string& session,
                                  const std::string& id, int64_t blocks,
                                  int64_t hash) {
    v1::Operation op;
    op.mutable_checkpoint()->set_request_id(id);
    op.mutable_checkpoint()->set_boundary_blocks(blocks);
    op.mutable_checkpoint()->set_hash(hash);
    return Run(session, std::move(op)).checkpoint();
  }

  // The next forward read the request's fork source, and the pin clock
  // returned it.
  void ForwardRan(const std::string& session, const std::string& id) {
    v1::Operation consume;
    consume.mutable_consume_fork()->set_request_id(id);
    Run(session, std::move(consume));
    for (int i = 0; i < 2; ++i) {
      v1::Operation tick;
      tick.mutable_begin_pass();
      Run(session, std::move(tick));
    }
  }

  int64_t Lookup(const std::string& session, int64_t hash) {
    v1::Operation op;
    op.mutable_lookup()->set_hash(hash);
    return Run(session, std::move(op)).lookup().slot();
  }

  v1::GetStatsResponse Stats() {
    v1::GetStatsResponse stats;
    cache_->GetStats(&stats);
    return stats;
  }

  StateCache& cache() { return *cache_; }

 private:
  std::unique_ptr<StateCache> cache_;
};

const std::vector<int64_t> kDocument = {1, 2, 3, 4};

std::vector<int64_t> With(std::vector<int64_t> prefix,
                          const std::vector<int64_t>& own) {
  prefix.insert(prefix.end(), own.begin(), own.end());
  return prefix;
}

TEST(PlacementAdviceTest, ABranchPointIsFoundAdvisedKeptAndResumedFrom) {
  Advised daemon(16);
  bool advised = false;
  const std::string s = daemon.Attach(true, &advised);
  ASSERT_TRUE(advised);

  const v1::AdmitResult a = daemon.Admit(s, "a", With(kDocument, {10, 11}), 0);
  EXPECT_EQ(a.branch_blocks(), 0);  // nothing shares its prefix yet
  EXPECT_EQ(a.continuation_blocks(), 6);
  const v1::AdmitResult b = daemon.Admit(s, "b", With(kDocument, {20, 21}), 4);
  EXPECT_EQ(b.blocks_resumed(), 0);  // nothing checkpointed there
  EXPECT_EQ(b.branch_blocks(), 4);   // where it leaves a's prompt
  EXPECT_EQ(b.continuation_blocks(), 6);
  EXPECT_EQ(daemon.Stats().branch_points_advised(), 1);

  // b follows the advice: a checkpoint where its chunk ends at block 4.
  const v1::CheckpointResult kept = daemon.Checkpoint(s, "b", 4, kDocument[3]);
  ASSERT_TRUE(kept.kept());
  daemon.ForwardRan(s, "b");
  EXPECT_EQ(daemon.Lookup(s, kDocument[3]), kept.fork_src());

  // Filed as known: guesses (here a ladder rung of another session's
  // request, filed after it) are spent before it.
  const v1::AdmitResult c = daemon.Admit(s, "c", With(kDocument, {30}), 4);
  EXPECT_EQ(c.blocks_resumed(), 4);  // the next sharer resumes there
  EXPECT_EQ(c.fork_src(), kept.fork_src());
  EXPECT_EQ(c.branch_blocks(), 0);  // resumed as deep as the branch
}

TEST(PlacementAdviceTest, AdvisedBranchCheckpointsOutliveGuesses) {
  // 4 slots. A plain session's guess is filed first, the branch point
  // after it: a guess goes to the LRU head and a known checkpoint to the
  // tail, so a shortage of one spends the guess only if the branch point
  // was filed as known.
  Advised daemon(4);
  const std::string s = daemon.Attach(true);
  const std::string plain = daemon.Attach(false);
  daemon.Admit(plain, "g", {50, 51, 52}, 0);
  const v1::CheckpointResult guess = daemon.Checkpoint(plain, "g", 2, 51);
  ASSERT_TRUE(guess.kept());  // position 128 is not g's anchor: a guess
  daemon.ForwardRan(plain, "g");
  daemon.Admit(s, "a", With(kDocument, {10}), 0);
  v1::Operation release;
  release.mutable_release()->set_request_id("a");
  daemon.Run(s, release);
  ASSERT_EQ(daemon.Admit(s, "b", With(kDocument, {20}), 0).branch_blocks(), 4);
  const v1::CheckpointResult branch =
      daemon.Checkpoint(s, "b", 4, kDocument[3]);
  ASSERT_TRUE(branch.kept());
  daemon.ForwardRan(s, "b");
  ASSERT_EQ(daemon.Stats().slots_vacant(), 0);
  daemon.Admit(plain, "h", {60, 61}, 0);
  EXPECT_EQ(daemon.Lookup(s, 51), -1);
  EXPECT_EQ(daemon.Lookup(s, kDocument[3]), branch.fork_src());
}

TEST(PlacementAdviceTest, EachContinuationReplacesTheLast) {
  Advised daemon(16);
  const std::string s = daemon.Attach(true);
  const v1::AdmitResult r = daemon.Admit(s, "r", {1, 2, 3}, 0);
  ASSERT_EQ(r.continuation_blocks(), 3);
  // The prompt's end, then two boundaries the decode reaches.
  ASSERT_TRUE(daemon.Checkpoint(s, "r", 3, 3).kept());
  daemon.ForwardRan(s, "r");
  ASSERT_TRUE(daemon.Checkpoint(s, "r", 4, 104).kept());
  daemon.ForwardRan(s, "r");
  const v1::CheckpointResult last = daemon.Checkpoint(s, "r", 5, 105);
  ASSERT_TRUE(last.kept());
  EXPECT_EQ(daemon.Lookup(s, 3), -1);
  EXPECT_EQ(daemon.Lookup(s, 104), -1);
  EXPECT_EQ(daemon.Lookup(s, 105), last.fork_src());
  const v1::GetStatsResponse stats = daemon.Stats();
  EXPECT_EQ(stats.checkpoints_superseded(), 2);
  EXPECT_EQ(stats.checkpoints_evicted(), 0);
  // The next turn holds the prompt and the reply: it resumes at block 5.
  const v1::AdmitResult next =
      daemon.Admit(s, "r2", {1, 2, 3, 104, 105, 106}, 5);
  EXPECT_EQ(next.blocks_resumed(), 5);
}

TEST(PlacementAdviceTest, ADecodeContinuationNeverSpendsAnotherCheckpoint) {
  Advised daemon(3);
  const std::string s = daemon.Attach(true);
  daemon.Admit(s, "x", {1, 2}, 0);
  ASSERT_TRUE(daemon.Checkpoint(s, "x", 2, 2).kept());
  daemon.ForwardRan(s, "x");
  // A cold admission of two takes the vacant slot and spends x's
  // continuation: nothing is vacant now.
  daemon.Admit(s, "y", {70, 71}, 0, /*width=*/2);
  ASSERT_EQ(daemon.Lookup(s, 2), -1);
  const v1::GetStatsResponse before = daemon.Stats();
  ASSERT_EQ(before.slots_vacant(), 0);
  const v1::CheckpointResult decode = daemon.Checkpoint(s, "x", 3, 103);
  EXPECT_FALSE(decode.kept());
  EXPECT_EQ(decode.fork_src(), -1);
  const v1::GetStatsResponse after = daemon.Stats();
  EXPECT_EQ(after.checkpoints_evicted(), before.checkpoints_evicted());
  EXPECT_EQ(after.checkpoints_dropped(), before.checkpoints_dropped());
  EXPECT_EQ(after.slots_used(), 3);
}

TEST(PlacementAdviceTest, SessionsThatDoNotAskGetTheReferencesDecisions) {
  Advised daemon(16);
  bool advised = true;
  const std::string s = daemon.Attach(false, &advised);
  EXPECT_FALSE(advised);
  daemon.Admit(s, "a", With(kDocument, {10}), 0);
  const v1::AdmitResult b = daemon.Admit(s, "b", With(kDocument, {20}), 4);
  EXPECT_EQ(b.branch_blocks(), 0);
  EXPECT_EQ(b.continuation_blocks(), 0);
  EXPECT_EQ(b.ladder_blocks(), 0);
  // A deeper checkpoint replaces nothing.
  ASSERT_TRUE(daemon.Checkpoint(s, "b", 5, 20).kept());
  daemon.ForwardRan(s, "b");
  ASSERT_TRUE(daemon.Checkpoint(s, "b", 6, 120).kept());
  EXPECT_GE(daemon.Lookup(s, 20), 0);
  EXPECT_EQ(daemon.Stats().checkpoints_superseded(), 0);
  EXPECT_EQ(daemon.Stats().branch_points_advised(), 0);
}

TEST(PlacementAdviceTest, HostileNumbersChangeNothingAdvised) {
  Advised daemon(16);
  const std::string s = daemon.Attach(true);
  // An anchor whose block count does not fit AdmitResult's int32: no
  // continuation advised (rather than a wrapped one).
  v1::Operation op;
  v1::Admit* a = op.mutable_admit();
  a->set_request_id("huge");
  a->set_width(1);
  a->set_num_tokens(100);
  a->set_anchor_pos(std::numeric_limits<int64_t>::max() / kBlock * kBlock);
  a->add_block_hashes(1);
  EXPECT_EQ(daemon.Run(s, op).admit().continuation_blocks(), 0);
  // A boundary whose position overflows int64 is no advised position: an
  // ordinary checkpoint (a guess), nothing superseded.
  const v1::CheckpointResult far =
      daemon.Checkpoint(s, "huge", std::numeric_limits<int64_t>::max(), 9);
  EXPECT_TRUE(far.kept());
  EXPECT_EQ(daemon.Stats().checkpoints_superseded(), 0);
}

TEST(PlacementAdviceTest, ADaemonWithoutAdviceSaysSo) {
  Advised daemon(16, [](StateCacheOptions& o) { o.advise_placement = false; });
  bool advised = true;
  const std::string s = daemon.Attach(true, &advised);
  EXPECT_FALSE(advised);
  daemon.Admit(s, "a", With(kDocument, {10}), 0);
  EXPECT_EQ(daemon.Admit(s, "b", With(kDocument, {20}), 4).branch_blocks(), 0);
}

TEST(PlacementAdviceTest, ClearIndexForgetsThePrefixes) {
  Advised daemon(16);
  const std::string s = daemon.Attach(true);
  daemon.Admit(s, "a", With(kDocument, {10}), 0);
  v1::Operation clear;
  clear.mutable_clear_index();
  daemon.Run(s, clear);
  EXPECT_EQ(daemon.Admit(s, "b", With(kDocument, {20}), 0).branch_blocks(), 0);
}

TEST(PlacementAdviceTest, ALadderOnlyWhileThePoolHasRoom) {
  Advised roomy(64, [](StateCacheOptions& o) { o.advice_ladder_blocks = 2; });
  const std::string s = roomy.Attach(true);
  // 8 blocks: rungs at 2, 4 and 6; 64 vacant slots.
  EXPECT_EQ(roomy.Admit(s, "a", {1, 2, 3, 4, 5, 6, 7, 8}, 0).ladder_blocks(),
            2);
  Advised tight(3, [](StateCacheOptions& o) { o.advice_ladder_blocks = 2; });
  const std::string t = tight.Attach(true);
  // 2 vacant slots left after the admission, 3 rungs wanted.
  EXPECT_EQ(tight.Admit(t, "a", {1, 2, 3, 4, 5, 6, 7, 8}, 0).ladder_blocks(),
            0);
  StateCacheOptions bad;
  bad.identity = TestIdentity();
  bad.advice_ladder_blocks = -1;
  EXPECT_EQ(StateCache::ValidateOptions(bad).code(),
            absl::StatusCode::kInvalidArgument);
  bad.advice_ladder_blocks = 0;
  bad.branch_point_blocks = 1;
  EXPECT_EQ(StateCache::ValidateOptions(bad).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace statecache

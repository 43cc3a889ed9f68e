// A scheduler running multi-turn conversations against the real statecached
// over its Unix socket, through Step and through StepStream.
//
// Four conversations share a two-block system prompt; each runs three turns
// whose prompts extend the previous turn (64-token blocks, chained hashes).
// Every turn is one prefill pass (begin_pass, resumable_hit + lookup +
// admit + reserve; then publish, consume_fork, checkpoint at the prompt's
// end), a decode pass (consume_fork: the decode forward read the fork
// checkpoint) and a finishing pass (release). Conversations are staggered
// so one pass carries requests in different phases.
//
// The test keeps its own model of what the daemon must hold (live slots,
// the session's pins, the hashes filed) and checks every answer against it:
// resumes hit exactly the previous turn's checkpoint, every slot handed out
// is in range and not held by anyone else, checkpoints_kept grows by what
// was published and forked, and GetStats occupancy matches the model.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/attach_session.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/test_util.h"

namespace statecache::testing {
namespace {

constexpr int64_t kSlots = 256;
constexpr int kConversations = 4;
constexpr int kTurns = 3;
constexpr int kSystemBlocks = 2;
// Decode output per turn (tokens): one full block lands in the KV cache
// beyond the turn's checkpoint, so a KV hit must be shrunk by one block.
constexpr int64_t kOutputTokens = 100;
// Each turn's prompt is the previous prompt + output + a user message,
// rounded so prompts end on a block boundary: P(t+1) = P(t) + 128.
constexpr int64_t kTurnGrowth = 128;

struct Pin {
  int count = 0;
  bool deferred = false;
};

struct Conversation {
  int id = 0;
  int start_round = 0;
  std::vector<int64_t> hashes;  // enough blocks for the last turn
  // The current turn's request.
  std::string request;
  int64_t prompt = 0;
  std::vector<int64_t> slots;
  int64_t admit_fork_src = -1;
  int64_t checkpoint_src = -1;  // the fork checkpoint's slot (old slot 0)
  std::vector<MidstepReservation> reservations;
  // The previous turn's fork checkpoint.
  int64_t anchor_blocks = 0;
  int64_t anchor_slot = -1;
};

// How the test's Steps travel: unary Step, StepStream, or a step channel.
enum class Transport { kStep, kStepStream, kChannel };

class SchedulerTest : public ::testing::TestWithParam<Transport> {
 protected:
  bool streamed() const { return GetParam() == Transport::kStepStream; }
  AttachOptions Options() const {
    return AttachOptions{.transport = GetParam() == Transport::kChannel
                                          ? AttachOptions::Transport::kChannel
                                          : AttachOptions::Transport::kGrpc};
  }

  void SetUp() override {
    auto daemon = DaemonProcess::Start(
        WithIdentity({absl::StrCat("--num_slots=", kSlots)}));
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    auto client = Client::Connect(daemon_->address());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  void TearDown() override {
    client_.reset();
    if (daemon_) {
      EXPECT_TRUE(daemon_->StopCleanly().ok()) << daemon_->log();
    }
  }

  absl::StatusOr<StepResults> Run(const StepBuilder& step) {
    return streamed() ? client_->StepStreamed(step) : client_->Step(step);
  }

  // A slot handed out now must be in range and held by nobody.
  void ExpectFresh(int64_t slot, const std::string& what) {
    EXPECT_GE(slot, 0) << what;
    EXPECT_LT(slot, kSlots) << what;
    EXPECT_FALSE(live_.contains(slot))
        << what << ": slot " << slot << " is already live";
    EXPECT_FALSE(pins_.contains(slot))
        << what << ": slot " << slot << " is a pinned fork source";
    live_.insert(slot);
  }

  // The model's begin_pass: deferred pins survive one pass, others go.
  int ModelBeginPass() {
    int released = 0;
    for (auto it = pins_.begin(); it != pins_.end();) {
      if (it->second.deferred) {
        it->second.deferred = false;
        ++it;
      } else {
        released += it->second.count;
        it = pins_.erase(it);
      }
    }
    return released;
  }

  void CheckStats(const std::string& when) {
    auto stats = client_->GetStats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->slots_total, kSlots) << when;
    EXPECT_EQ(stats->slots_used + stats->slots_held + stats->slots_vacant,
              stats->slots_total)
        << when;
    EXPECT_EQ(stats->slots_used,
              static_cast<int64_t>(live_.size() + pins_.size()))
        << when << ": used = live request slots + pinned fork sources";
    EXPECT_EQ(stats->checkpoints_kept, kept_) << when;
    EXPECT_EQ(stats->indexed_hashes, static_cast<int64_t>(filed_.size()))
        << when;
    EXPECT_EQ(stats->checkpoints_evicted, 0) << when;
    EXPECT_EQ(stats->checkpoints_dropped, 0) << when;
    EXPECT_EQ(stats->sessions, 1) << when;
    auto sessions = client_->ListSessions();
    ASSERT_TRUE(sessions.ok()) << sessions.status();
    ASSERT_EQ(sessions->size(), 1u) << when;
    int64_t pins = 0;
    for (const auto& [slot, pin] : pins_) pins += pin.count;
    EXPECT_EQ((*sessions)[0].pins, pins) << when;
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
  std::set<int64_t> live_;       // slots of live requests and reservations
  std::map<int64_t, Pin> pins_;  // the session's fork-source pins
  std::set<int64_t> filed_;      // hashes filed as checkpoints
  int64_t kept_ = 0;             // checkpoints_kept expected
};

TEST_P(SchedulerTest, MultiTurnConversationsResumeFromTheirCheckpoints) {
  auto session = client_->Attach(TestIdentity(), "it-scheduler", Options());
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(session->transport,
            GetParam() == Transport::kChannel ? "channel" : "grpc");
  EXPECT_EQ(client_->transport(), session->transport);
  EXPECT_EQ(session->num_slots, kSlots);
  EXPECT_EQ(session->transfer.kind, "fork");
  EXPECT_TRUE(session->transfer.readable_midstep);

  std::vector<Conversation> convs(kConversations);
  const int64_t max_blocks =
      (256 + 64 * kConversations) / kBlock + kTurns * kTurnGrowth / kBlock;
  for (int c = 0; c < kConversations; ++c) {
    Conversation& conv = convs[c];
    conv.id = c;
    conv.start_round = c;
    std::vector<uint64_t> content;
    for (int64_t b = 0; b < max_blocks; ++b) {
      content.push_back(b < kSystemBlocks ? 1000 + b
                                          : (c + 1) * 1000000ULL + b);
    }
    conv.hashes = ChainedHashes(content);
  }
  // The system prompt's checkpoint (filed by conversation 0's first
  // forward as a midstep reservation), which later first turns resume.
  int64_t system_slot = -1;
  int resumes = 0;

  const int rounds = kConversations - 1 + 3 * kTurns;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    // ------------------------------------------------ schedule (step 1)
    StepBuilder schedule;
    schedule.BeginPass();
    struct Admission {
      Conversation* conv = nullptr;
      int64_t blocks = 0;
      int32_t kv_hit = 0;
      int64_t expect_resumed = 0;
      int64_t expect_src = -1;
      size_t hit_op = 0, lookup_op = 0, admit_op = 0, reserve_op = 0;
      std::vector<MidstepPosition> positions;
    };
    std::vector<Admission> admissions;
    std::vector<Conversation*> decoding, finishing;
    for (Conversation& conv : convs) {
      if (round < conv.start_round) continue;
      const int turn = (round - conv.start_round) / 3;
      const int phase = (round - conv.start_round) % 3;
      if (turn >= kTurns) continue;
      if (phase == 1) decoding.push_back(&conv);
      if (phase == 2) finishing.push_back(&conv);
      if (phase != 0) continue;
      Admission a;
      a.conv = &conv;
      conv.request = absl::StrCat("conv", conv.id, "-turn", turn);
      conv.prompt = 256 + 64 * conv.id + kTurnGrowth * turn;
      a.blocks = conv.prompt / kBlock;
      if (turn == 0) {
        // The KV cache holds the shared system prompt once anyone ran it.
        a.kv_hit = conv.id == 0 ? 0 : kSystemBlocks;
        a.expect_resumed = conv.id == 0 ? 0 : kSystemBlocks;
        a.expect_src = conv.id == 0 ? -1 : system_slot;
      } else {
        // The KV cache holds the previous prompt and its output: one block
        // more than the previous turn's checkpoint covers.
        a.kv_hit = static_cast<int32_t>(
            (conv.anchor_blocks * kBlock + kOutputTokens) / kBlock);
        ASSERT_EQ(a.kv_hit, conv.anchor_blocks + 1);
        a.expect_resumed = conv.anchor_blocks;
        a.expect_src = conv.anchor_slot;
      }
      const std::vector<int64_t> hashes(conv.hashes.begin(),
                                        conv.hashes.begin() + a.blocks);
      schedule.ResumableHit(conv.prompt, hashes, a.kv_hit);
      a.hit_op = schedule.size() - 1;
      a.lookup_op = 0;
      if (a.expect_resumed > 0) {
        schedule.Lookup(hashes[a.expect_resumed - 1]);
        a.lookup_op = schedule.size() - 1;
      }
      schedule.Admit(conv.request, kWidth, conv.prompt,
                     /*anchor_pos=*/conv.prompt, hashes, a.kv_hit);
      a.admit_op = schedule.size() - 1;
      // Midstep checkpoints at every block boundary the forward passes
      // below the prompt's end (where the fork checkpoint goes).
      for (int64_t b = a.expect_resumed + 1; b < a.blocks; ++b) {
        a.positions.push_back({.position = b * kBlock, .hash = hashes[b - 1]});
      }
      schedule.Reserve(conv.request, a.positions);
      a.reserve_op = schedule.size() - 1;
      admissions.push_back(std::move(a));
    }

    auto scheduled = Run(schedule);
    ASSERT_TRUE(scheduled.ok()) << scheduled.status();
    ASSERT_EQ(scheduled->results.size(), schedule.size());
    EXPECT_EQ(scheduled->epoch, session->epoch);
    {
      auto begin = scheduled->Get<BeginPassResult>(0);
      ASSERT_TRUE(begin.ok()) << begin.status();
      EXPECT_EQ(begin->pins_released, ModelBeginPass());
      EXPECT_TRUE(begin->moves.empty());
    }
    for (Admission& a : admissions) {
      Conversation& conv = *a.conv;
      SCOPED_TRACE(conv.request);
      auto hit = scheduled->Get<ResumableHitResult>(a.hit_op);
      ASSERT_TRUE(hit.ok()) << hit.status();
      EXPECT_EQ(hit->blocks, a.expect_resumed);
      if (a.expect_resumed > 0) {
        auto lookup = scheduled->Get<LookupResult>(a.lookup_op);
        ASSERT_TRUE(lookup.ok()) << lookup.status();
        EXPECT_EQ(lookup->slot, a.expect_src);
      }
      auto admit = scheduled->Get<AdmitResult>(a.admit_op);
      ASSERT_TRUE(admit.ok()) << admit.status();
      EXPECT_EQ(admit->blocks_resumed, a.expect_resumed);
      EXPECT_EQ(admit->fork_src, a.expect_src);
      EXPECT_FALSE(admit->adopted);
      ASSERT_EQ(admit->slots.size(), static_cast<size_t>(kWidth));
      for (int64_t slot : admit->slots) ExpectFresh(slot, "admit");
      EXPECT_NE(admit->slots[0], admit->slots[1]);
      if (admit->fork_src >= 0) {
        ++resumes;
        ++pins_[admit->fork_src].count;
        EXPECT_FALSE(live_.contains(admit->fork_src));
      }
      conv.slots = admit->slots;
      conv.admit_fork_src = admit->fork_src;
      if (conv.id == 0 && round == 0) {
        ASSERT_GE(a.positions.size(), static_cast<size_t>(kSystemBlocks));
      }

      auto reserve = scheduled->Get<ReserveResult>(a.reserve_op);
      ASSERT_TRUE(reserve.ok()) << reserve.status();
      ASSERT_EQ(reserve->reservations.size(), a.positions.size());
      conv.reservations = reserve->reservations;
      for (size_t i = 0; i < a.positions.size(); ++i) {
        const MidstepReservation& r = reserve->reservations[i];
        EXPECT_EQ(r.position, a.positions[i].position);
        EXPECT_EQ(r.hash, a.positions[i].hash);
        ExpectFresh(r.slot, "reserve");
        if (conv.id == 0 && round == 0 &&
            r.position == kSystemBlocks * kBlock) {
          system_slot = r.slot;
        }
      }
    }
    if (HasFatalFailure()) return;

    // ------------------------------------ after the forward (step 2)
    StepBuilder post;
    struct Post {
      Conversation* conv = nullptr;
      size_t publish_op = 0, consume_op = 0, checkpoint_op = 0;
    };
    std::vector<Post> posts;
    for (Admission& a : admissions) {
      Conversation& conv = *a.conv;
      Post p;
      p.conv = &conv;
      post.Publish(conv.request);
      p.publish_op = post.size() - 1;
      // The forward that read the admit's fork source was issued.
      post.ConsumeFork(conv.request);
      p.consume_op = post.size() - 1;
      // The committed state reached the prompt's end, a block boundary.
      post.Checkpoint(conv.request, a.blocks, conv.hashes[a.blocks - 1]);
      p.checkpoint_op = post.size() - 1;
      posts.push_back(p);
    }
    std::vector<size_t> decode_ops, release_ops;
    for (Conversation* conv : decoding) {
      post.ConsumeFork(conv->request);
      decode_ops.push_back(post.size() - 1);
    }
    for (Conversation* conv : finishing) {
      post.Release(conv->request);
      release_ops.push_back(post.size() - 1);
    }
    if (post.empty()) continue;
    auto posted = Run(post);
    ASSERT_TRUE(posted.ok()) << posted.status();
    ASSERT_EQ(posted->results.size(), post.size());
    for (const Post& p : posts) {
      Conversation& conv = *p.conv;
      SCOPED_TRACE(conv.request);
      auto publish = posted->Get<PublishResult>(p.publish_op);
      ASSERT_TRUE(publish.ok()) << publish.status();
      EXPECT_EQ(publish->published,
                static_cast<int32_t>(conv.reservations.size()));
      for (const MidstepReservation& r : conv.reservations) {
        live_.erase(r.slot);  // free now, holding the checkpoint
        filed_.insert(r.hash);
        ++kept_;
      }
      conv.reservations.clear();
      auto consume = posted->Get<ConsumeForkResult>(p.consume_op);
      ASSERT_TRUE(consume.ok()) << consume.status();
      EXPECT_EQ(consume->fork_src, conv.admit_fork_src);
      auto checkpoint = posted->Get<ForkCheckpointResult>(p.checkpoint_op);
      ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
      EXPECT_TRUE(checkpoint->kept);
      EXPECT_EQ(checkpoint->fork_src, conv.slots[0]);
      live_.erase(conv.slots[0]);
      ExpectFresh(checkpoint->state_slot, "checkpoint");
      Pin& pin = pins_[checkpoint->fork_src];
      ++pin.count;
      pin.deferred = true;
      conv.checkpoint_src = checkpoint->fork_src;
      conv.slots[0] = checkpoint->state_slot;
      conv.anchor_blocks = conv.prompt / kBlock;
      conv.anchor_slot = checkpoint->fork_src;
      filed_.insert(conv.hashes[conv.anchor_blocks - 1]);
      ++kept_;
    }
    for (size_t i = 0; i < decoding.size(); ++i) {
      auto consume = posted->Get<ConsumeForkResult>(decode_ops[i]);
      ASSERT_TRUE(consume.ok()) << consume.status();
      EXPECT_EQ(consume->fork_src, decoding[i]->checkpoint_src)
          << decoding[i]->request;
    }
    for (size_t i = 0; i < finishing.size(); ++i) {
      auto release = posted->Get<ReleaseResult>(release_ops[i]);
      ASSERT_TRUE(release.ok()) << release.status();
      EXPECT_EQ(release->slots_released, kWidth) << finishing[i]->request;
      for (int64_t slot : finishing[i]->slots) live_.erase(slot);
      finishing[i]->slots.clear();
    }
    CheckStats(absl::StrCat("after round ", round));
    if (HasFatalFailure()) return;
  }

  // Every resume hit: three first turns on the system prompt, and every
  // later turn on its own previous turn.
  EXPECT_EQ(resumes, (kConversations - 1) + kConversations * (kTurns - 1));
  EXPECT_TRUE(live_.empty());
  // Two more passes return the last fork checkpoints' pins.
  for (int i = 0; i < 2; ++i) {
    StepBuilder pass;
    pass.BeginPass();
    auto result = Run(pass);
    ASSERT_TRUE(result.ok()) << result.status();
    auto begin = result->Get<BeginPassResult>(0);
    ASSERT_TRUE(begin.ok());
    EXPECT_EQ(begin->pins_released, ModelBeginPass());
  }
  EXPECT_TRUE(pins_.empty());
  CheckStats("after the last pass");
  auto stats = client_->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->slots_used, 0);
  EXPECT_EQ(stats->requests, 0);
  EXPECT_EQ(stats->slots_held, static_cast<int64_t>(filed_.size()));
  EXPECT_EQ(stats->resumes_fork, resumes);
  EXPECT_EQ(stats->resumes_adopt, 0);
  EXPECT_EQ(stats->resumes_miss, 0);
  EXPECT_GT(stats->checkpoints_kept, kConversations * kTurns);

  auto released = client_->Detach();
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, 0);
  stats = client_->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->sessions, 0);
  // Checkpoints are shared: they outlive the session.
  EXPECT_EQ(stats->indexed_hashes, static_cast<int64_t>(filed_.size()));
}

INSTANTIATE_TEST_SUITE_P(
    Transport, SchedulerTest,
    ::testing::Values(Transport::kStep, Transport::kStepStream,
                      Transport::kChannel),
    [](const ::testing::TestParamInfo<Transport>& param_info) {
      switch (param_info.param) {
        case Transport::kStep:
          return "Step";
        case Transport::kStepStream:
          return "StepStream";
        case Transport::kChannel:
          return "StepChannel";
      }
      return "unknown";
    });

// ------------------------------------------------------------ StepStream

class StepStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = DaemonProcess::Start(WithIdentity({"--num_slots=32"}));
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    stubs_ = std::make_unique<RawStubs>(daemon_->address());
  }
  void TearDown() override {
    stubs_.reset();
    if (daemon_) {
      EXPECT_TRUE(daemon_->StopCleanly().ok()) << daemon_->log();
    }
  }
  std::string Attach(const std::string& name) {
    v1::AttachResponse response;
    std::string id = AttachSession(*stubs_, name, &response);
    epoch_ = response.epoch();
    return id;
  }
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<RawStubs> stubs_;
  uint64_t epoch_ = 0;
};

// Many steps written back to back on one stream come back one reply each,
// in order; a message naming another session is refused alone and the
// stream stays usable; half-closing ends it with OK.
TEST_F(StepStreamTest, OneReplyPerStepInOrderAndRefusalsKeepTheStreamOpen) {
  const std::string a = Attach("stream-a");
  const std::string b = Attach("stream-b");
  auto context = Ctx(absl::Seconds(30));
  auto stream = stubs_->scheduler->StepStream(context.get());
  ASSERT_NE(stream, nullptr);

  // resumable_hit with assume_checkpointed answers exactly kv_hit_blocks
  // (plenty of fork room), so each reply says which message it answers.
  constexpr int kMessages = 64;
  std::vector<int64_t> hashes;
  for (int i = 0; i < kMessages; ++i) hashes.push_back(Mix(i));
  auto message = [&](const std::string& session, int i) {
    v1::StepRequest request;
    request.set_session_id(session);
    v1::ResumableHit* hit = request.add_operations()->mutable_resumable_hit();
    hit->set_num_tokens(1 << 20);
    hit->mutable_block_hashes()->Add(hashes.begin(), hashes.end());
    hit->set_kv_hit_blocks(i);
    hit->set_assume_checkpointed(true);
    return request;
  };
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(stream->Write(message(a, i))) << "write " << i;
  }
  for (int i = 0; i < kMessages; ++i) {
    v1::StepResponse response;
    ASSERT_TRUE(stream->Read(&response)) << "read " << i;
    EXPECT_EQ(response.error_code(), 0) << response.error_message();
    EXPECT_EQ(response.epoch(), epoch_);
    ASSERT_EQ(response.results_size(), 1) << "reply " << i;
    EXPECT_EQ(response.results(0).code(), 0);
    EXPECT_EQ(response.results(0).resumable_hit().blocks(), i)
        << "reply " << i << " answers another message";
  }

  // Another session's message on A's stream: refused alone.
  ASSERT_TRUE(stream->Write(message(b, 3)));
  v1::StepResponse refused;
  ASSERT_TRUE(stream->Read(&refused));
  EXPECT_NE(refused.error_code(), 0);
  EXPECT_FALSE(refused.error_message().empty());
  EXPECT_EQ(refused.results_size(), 0);

  // The stream still works.
  ASSERT_TRUE(stream->Write(message(a, 5)));
  v1::StepResponse after;
  ASSERT_TRUE(stream->Read(&after));
  EXPECT_EQ(after.error_code(), 0) << after.error_message();
  ASSERT_EQ(after.results_size(), 1);
  EXPECT_EQ(after.results(0).resumable_hit().blocks(), 5);

  ASSERT_TRUE(stream->WritesDone());
  grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_code() << ": "
                           << status.error_message();
}

// A stream whose first message names an unknown session gets NOT_FOUND in
// the reply (not a broken stream).
TEST_F(StepStreamTest, UnknownSessionIsRefusedInTheReply) {
  auto context = Ctx();
  auto stream = stubs_->scheduler->StepStream(context.get());
  v1::StepRequest request;
  request.set_session_id("no-such-session");
  request.add_operations()->mutable_begin_pass();
  ASSERT_TRUE(stream->Write(request));
  v1::StepResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.error_code(), grpc::StatusCode::NOT_FOUND)
      << response.error_message();
  EXPECT_EQ(response.results_size(), 0);
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace statecache::testing

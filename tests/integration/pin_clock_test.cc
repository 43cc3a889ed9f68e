// Two sessions whose pin clocks must not interfere: session B resumes from a
// checkpoint session A filed, and A's begin_pass ticks must not return the
// source B's next forward still reads. Observable from outside through the
// occupancy (a pinned source is "used"; a returned one would be "held"),
// ListSessions' per-session pin counts, and later resumes of the same prefix
// sharing the pinned source.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/test_util.h"

namespace statecache::testing {
namespace {

class PinClockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = DaemonProcess::Start(WithIdentity({"--num_slots=16"}));
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    for (auto* client : {&a_, &b_}) {
      auto connected = Client::Connect(daemon_->address());
      ASSERT_TRUE(connected.ok()) << connected.status();
      *client = *std::move(connected);
    }
    auto sa = a_->Attach(TestIdentity(), "clock-a");
    auto sb = b_->Attach(TestIdentity(), "clock-b");
    ASSERT_TRUE(sa.ok()) << sa.status();
    ASSERT_TRUE(sb.ok()) << sb.status();
    a_id_ = sa->session_id;
    b_id_ = sb->session_id;
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
    if (daemon_) {
      EXPECT_TRUE(daemon_->StopCleanly().ok()) << daemon_->log();
    }
  }

  // (pins of A, pins of B) as ListSessions reports them.
  std::pair<int64_t, int64_t> Pins() {
    auto sessions = a_->ListSessions();
    EXPECT_TRUE(sessions.ok());
    std::pair<int64_t, int64_t> pins{-1, -1};
    if (!sessions.ok()) return pins;
    for (const SessionSummary& s : *sessions) {
      if (s.client_name == "clock-a") pins.first = s.pins;
      if (s.client_name == "clock-b") pins.second = s.pins;
    }
    return pins;
  }

  int32_t BeginPass(Client& client) {
    StepBuilder step;
    step.BeginPass();
    auto result = client.Step(step);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return -1;
    auto begin = result->Get<BeginPassResult>(0);
    EXPECT_TRUE(begin.ok());
    return begin.ok() ? begin->pins_released : -1;
  }

  // Admits `id` resuming the three-block prompt (KV holds all three blocks;
  // the checkpoint sits at block 2).
  AdmitResult AdmitResume(Client& client, const std::string& id) {
    StepBuilder step;
    step.Admit(id, kWidth, 200, 200, hashes_, 3);
    auto result = client.Step(step);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return {};
    auto admit = result->Get<AdmitResult>(0);
    EXPECT_TRUE(admit.ok()) << admit.status();
    return admit.ok() ? *admit : AdmitResult{};
  }

  DaemonStats Stats() {
    auto stats = a_->GetStats();
    EXPECT_TRUE(stats.ok());
    return stats.ok() ? *stats : DaemonStats{};
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> a_, b_;
  std::string a_id_, b_id_;
  const std::vector<int64_t> hashes_ = ChainedHashes({71, 72, 73});
};

TEST_F(PinClockTest, OneSessionsPassesDoNotReleaseAnothersSource) {
  // A files a fork checkpoint at block 2 ...
  StepBuilder file;
  file.BeginPass()
      .Admit("a1", kWidth, 128, 128, {hashes_.data(), 2}, 0)
      .Checkpoint("a1", 2, hashes_[1]);
  auto filed = a_->Step(file);
  ASSERT_TRUE(filed.ok()) << filed.status();
  auto checkpoint = filed->Get<ForkCheckpointResult>(2);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_TRUE(checkpoint->kept);
  const int64_t source = checkpoint->fork_src;
  EXPECT_EQ(Pins(), std::make_pair(int64_t{1}, int64_t{0}));
  // ... and its clock returns it: pinned for one more pass, then released.
  EXPECT_EQ(BeginPass(*a_), 0);
  EXPECT_EQ(BeginPass(*a_), 1);
  StepBuilder done;
  done.Release("a1");
  ASSERT_TRUE(a_->Step(done).ok());
  EXPECT_EQ(Pins(), std::make_pair(int64_t{0}, int64_t{0}));
  DaemonStats stats = Stats();
  EXPECT_EQ(stats.slots_used, 0);
  EXPECT_EQ(stats.slots_held, 1);

  // B resumes from it: the source is pinned by B's clock.
  AdmitResult b1 = AdmitResume(*b_, "b1");
  EXPECT_EQ(b1.blocks_resumed, 2);
  EXPECT_EQ(b1.fork_src, source);
  EXPECT_EQ(Pins(), std::make_pair(int64_t{0}, int64_t{1}));
  const DaemonStats resumed = Stats();
  EXPECT_EQ(resumed.slots_used, kWidth + 1) << "b1's slots + the source";
  EXPECT_EQ(resumed.slots_held, 0);

  // A's clock ticks: none of its passes may return B's pin.
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(absl::StrCat("A's pass ", i));
    EXPECT_EQ(BeginPass(*a_), 0);
    EXPECT_EQ(Pins(), std::make_pair(int64_t{0}, int64_t{1}));
    const DaemonStats now = Stats();
    EXPECT_EQ(now.slots_used, resumed.slots_used)
        << "the source went back to the pool under B's forward";
    EXPECT_EQ(now.slots_held, resumed.slots_held);
  }

  // The source is still pinned and shared: later resumes of the same prefix,
  // in either session, read the same slot without claiming it.
  AdmitResult b2 = AdmitResume(*b_, "b2");
  EXPECT_EQ(b2.fork_src, source);
  EXPECT_EQ(b2.blocks_resumed, 2);
  AdmitResult a2 = AdmitResume(*a_, "a2");
  EXPECT_EQ(a2.fork_src, source);
  EXPECT_EQ(Pins(), std::make_pair(int64_t{1}, int64_t{2}));
  EXPECT_EQ(Stats().slots_used, 3 * kWidth + 1);

  // A's next pass returns only A's own pin.
  EXPECT_EQ(BeginPass(*a_), 1);
  EXPECT_EQ(Pins(), std::make_pair(int64_t{0}, int64_t{2}));
  EXPECT_EQ(Stats().slots_used, 3 * kWidth + 1) << "B still pins the source";
  AdmitResult b3 = AdmitResume(*b_, "b3");
  EXPECT_EQ(b3.fork_src, source);
  EXPECT_EQ(Pins(), std::make_pair(int64_t{0}, int64_t{3}));

  // B's own pass releases B's pins: the source goes back, still indexed.
  EXPECT_EQ(BeginPass(*b_), 3);
  EXPECT_EQ(Pins(), std::make_pair(int64_t{0}, int64_t{0}));
  stats = Stats();
  EXPECT_EQ(stats.slots_used, 4 * kWidth) << "only the live requests";
  EXPECT_EQ(stats.slots_held, 1);
  EXPECT_EQ(stats.indexed_hashes, 1);
  EXPECT_EQ(stats.resumes_fork, 4);

  // And a resume now claims it afresh.
  AdmitResult b4 = AdmitResume(*b_, "b4");
  EXPECT_EQ(b4.fork_src, source);
  EXPECT_EQ(Pins(), std::make_pair(int64_t{0}, int64_t{1}));
  ASSERT_TRUE(a_->Detach().ok());
  ASSERT_TRUE(b_->Detach().ok());
  stats = Stats();
  EXPECT_EQ(stats.slots_used, 0);
  EXPECT_EQ(stats.sessions, 0);
}

}  // namespace
}  // namespace statecache::testing

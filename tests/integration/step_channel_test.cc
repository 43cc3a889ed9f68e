// Step channels against the real daemon and the real client: which
// transport a session gets and why, what the daemon counts, how a session's
// end and the daemon's death reach a client mid-use, and who may open the
// shared-memory object. (tests/service/step_channel_test.cc checks, in
// process, that a channel's Steps are exactly Step's.)
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/attach_session.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/test_util.h"

namespace statecache::testing {
namespace {

constexpr int kSlots = 32;

AttachOptions Using(AttachOptions::Transport transport) {
  return AttachOptions{.transport = transport};
}

// A pass that admits `id` cold over one block.
StepBuilder AdmitAndCheckpoint(const std::string& id, int64_t hash) {
  StepBuilder step;
  const int64_t hashes[] = {hash};
  step.BeginPass();
  step.Admit(id, /*width=*/1, /*num_tokens=*/kBlock, /*anchor_pos=*/0, hashes,
             /*kv_hit_blocks=*/1);
  return step;
}

class StepChannelTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags = {}) {
    flags.push_back(absl::StrCat("--num_slots=", kSlots));
    auto daemon = DaemonProcess::Start(WithIdentity(std::move(flags)));
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
  }

  void TearDown() override {
    if (daemon_) EXPECT_TRUE(daemon_->StopCleanly().ok()) << daemon_->log();
  }

  std::unique_ptr<Client> Connect(const std::string& address) {
    auto client = Client::Connect(address);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // Polls GetStats until `done` holds (the daemon notices a session's end
  // within a heartbeat); false after 10 s.
  bool StatsReach(Client& client,
                  const std::function<bool(const DaemonStats&)>& done) {
    const absl::Time limit = absl::Now() + absl::Seconds(10);
    while (absl::Now() < limit) {
      auto stats = client.GetStats();
      if (stats.ok() && done(*stats)) return true;
    }
    return false;
  }

  std::unique_ptr<DaemonProcess> daemon_;
};

TEST_F(StepChannelTest, AutoOnTheUnixSocketUsesTheChannelAndCountsIt) {
  Start();
  auto client = Connect(daemon_->address());
  ASSERT_NE(client, nullptr);
  auto session = client->Attach(TestIdentity(), "chan");
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(session->transport, "channel");
  EXPECT_EQ(session->transport_note, "");
  EXPECT_EQ(client->transport(), "channel");
  EXPECT_TRUE(client->PingChannel().ok());

  auto results = client->Step(AdmitAndCheckpoint("r1", 11));
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->results.size(), 2u);
  auto admit = results->Get<AdmitResult>(1);
  ASSERT_TRUE(admit.ok()) << admit.status();
  EXPECT_EQ(admit->slots.size(), 1u);

  auto stats = client->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->step_channels_open, 1);
  EXPECT_EQ(stats->step_channels_opened, 1);
  EXPECT_EQ(stats->requests, 1);

  ASSERT_TRUE(client->Detach().ok());
  EXPECT_TRUE(StatsReach(*client, [](const DaemonStats& s) {
    return s.step_channels_open == 0 && s.sessions == 0;
  }));
}

TEST_F(StepChannelTest, GrpcWhenAskedAndChannelRequiredFailsAttachCleanly) {
  Start({"--max_step_channels=0"});
  auto client = Connect(daemon_->address());
  ASSERT_NE(client, nullptr);
  auto grpc_session = client->Attach(TestIdentity(), "grpc",
                                     Using(AttachOptions::Transport::kGrpc));
  ASSERT_TRUE(grpc_session.ok());
  EXPECT_EQ(grpc_session->transport, "grpc");
  EXPECT_EQ(grpc_session->transport_note, "");
  ASSERT_TRUE(client->Detach().ok());

  auto automatic = client->Attach(TestIdentity(), "auto");
  ASSERT_TRUE(automatic.ok());
  EXPECT_EQ(automatic->transport, "grpc");
  EXPECT_TRUE(
      absl::StrContains(automatic->transport_note, "--max_step_channels=0"))
      << automatic->transport_note;
  EXPECT_TRUE(client->Step(AdmitAndCheckpoint("r1", 11)).ok());
  EXPECT_FALSE(client->PingChannel().ok());
  ASSERT_TRUE(client->Detach().ok());

  auto required = client->Attach(TestIdentity(), "required",
                                 Using(AttachOptions::Transport::kChannel));
  EXPECT_EQ(required.status().code(), absl::StatusCode::kFailedPrecondition)
      << required.status();
  auto stats = client->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->sessions, 0) << "a failed kChannel attach detaches";
}

TEST_F(StepChannelTest, TcpPeersGetGrpc) {
  Start({"--listen=127.0.0.1:0", "--insecure_tcp"});
  const std::string log = daemon_->log();
  const size_t at = log.find("listening on 127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << log;
  const size_t from = at + std::string("listening on ").size();
  const std::string address = log.substr(from, log.find(' ', from) - from);

  auto client = Connect(address);
  ASSERT_NE(client, nullptr);
  auto session = client->Attach(TestIdentity(), "tcp");
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->transport, "grpc");
  EXPECT_TRUE(absl::StrContains(session->transport_note, "TCP"))
      << session->transport_note;

  // The daemon refuses it too, whatever a client claims.
  RawStubs stubs(address);
  v1::OpenStepChannelRequest request;
  request.set_session_id(session->session_id);
  v1::OpenStepChannelResponse response;
  grpc::Status status =
      stubs.scheduler->OpenStepChannel(Ctx().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "Unix socket"))
      << status.error_message();
}

TEST_F(StepChannelTest, OpenNamesTheSessionsOwnProblems) {
  Start({"--max_step_channels=1"});
  RawStubs stubs(daemon_->address());
  const std::string a = AttachSession(stubs, "a");
  const std::string b = AttachSession(stubs, "b");
  auto open = [&](const std::string& session,
                  v1::OpenStepChannelResponse* response) {
    v1::OpenStepChannelRequest request;
    request.set_session_id(session);
    return stubs.scheduler->OpenStepChannel(Ctx().get(), request, response);
  };
  v1::OpenStepChannelResponse opened;
  ASSERT_TRUE(open(a, &opened).ok());
  EXPECT_TRUE(absl::StartsWith(opened.shm_name(), "/statecache_channel-"));
  v1::OpenStepChannelResponse unused;
  EXPECT_EQ(open(a, &unused).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(open(b, &unused).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(open("no-such-session", &unused).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// The object is the opener's: another uid cannot open it, even knowing its
// name (this test runs as root, so it can become someone else).
TEST_F(StepChannelTest, AnotherUidCannotOpenTheObject) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another uid";
  Start();
  RawStubs stubs(daemon_->address());
  const std::string session = AttachSession(stubs, "owner");
  v1::OpenStepChannelRequest request;
  request.set_session_id(session);
  v1::OpenStepChannelResponse opened;
  ASSERT_TRUE(
      stubs.scheduler->OpenStepChannel(Ctx().get(), request, &opened).ok());
  // No first request yet: the name is still there.
  const int own = ::shm_open(opened.shm_name().c_str(), O_RDWR, 0);
  ASSERT_GE(own, 0) << std::strerror(errno);
  ::close(own);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    const int fd = ::shm_open(opened.shm_name().c_str(), O_RDWR, 0);
    ::_exit(fd < 0 && errno == EACCES ? 0 : 1);
  }
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFEXITED(wait_status));
  EXPECT_EQ(WEXITSTATUS(wait_status), 0)
      << "uid 65534 could open another peer's step channel (or could not "
         "drop privileges: exit 2)";
}

TEST_F(StepChannelTest, AnEvictedSessionSeesWhatGrpcSays) {
  Start();
  auto client = Connect(daemon_->address());
  ASSERT_NE(client, nullptr);
  auto session = client->Attach(TestIdentity(), "victim");
  ASSERT_TRUE(session.ok());
  ASSERT_EQ(session->transport, "channel");
  ASSERT_TRUE(client->Step(AdmitAndCheckpoint("r1", 11)).ok());
  ASSERT_TRUE(client->EvictSession(session->handle).ok());

  auto results = client->Step(AdmitAndCheckpoint("r2", 12));
  EXPECT_EQ(results.status().code(), absl::StatusCode::kNotFound)
      << results.status();
  EXPECT_TRUE(client->lease_lost());
  EXPECT_TRUE(StatsReach(
      *client, [](const DaemonStats& s) { return s.step_channels_open == 0; }));
  // Closed: the client is back on gRPC, which says the same.
  EXPECT_EQ(client->transport(), "grpc");
  EXPECT_EQ(client->Step(AdmitAndCheckpoint("r3", 13)).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(StepChannelTest, ADeadDaemonIsUnavailableNotAHang) {
  Start();
  auto client = Connect(daemon_->address());
  ASSERT_NE(client, nullptr);
  auto session = client->Attach(TestIdentity(), "orphan");
  ASSERT_TRUE(session.ok());
  ASSERT_EQ(session->transport, "channel");
  ASSERT_TRUE(client->Step(AdmitAndCheckpoint("r1", 11)).ok());
  ASSERT_TRUE(daemon_->process().Kill(SIGKILL).ok());
  ASSERT_TRUE(daemon_->process().Wait(absl::Seconds(10)).ok());
  const absl::Time start = absl::Now();
  auto results = client->Step(AdmitAndCheckpoint("r2", 12));
  EXPECT_EQ(results.status().code(), absl::StatusCode::kUnavailable)
      << results.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  // Later passes go to gRPC, which has no daemon either.
  EXPECT_EQ(client->transport(), "grpc");
  EXPECT_EQ(client->Step(AdmitAndCheckpoint("r3", 13)).status().code(),
            absl::StatusCode::kUnavailable);
  daemon_.reset();
}

}  // namespace
}  // namespace statecache::testing

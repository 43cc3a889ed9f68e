// statecachectl run as an operator runs it, against a live daemon: every
// command, its output (tables and --json), its exit codes, and that resize
// and evict really act on the daemon.
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/daemon_process.h"
#include "tests/integration/test_util.h"

namespace statecache::testing {
namespace {

class StatecachectlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // --quarantine=0: an evicted session's slots come back at once, as
    // EvictEndsTheSession reads them (fencing: ExpiredSessionTest).
    auto daemon = DaemonProcess::Start(
        WithIdentity({"--num_slots=16", "--quarantine=0"}));
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    auto client = Client::Connect(daemon_->address());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    auto session = client_->Attach(TestIdentity(), "ctl-subject");
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *session;
    // Something to show: two requests, one with a fork checkpoint.
    const std::vector<int64_t> hashes = ChainedHashes({5, 6});
    StepBuilder step;
    step.BeginPass()
        .Admit("r1", kWidth, 128, 128, hashes, 0)
        .Admit("r2", kWidth, 10, 0, {}, 0)
        .Checkpoint("r1", 2, hashes[1]);
    auto result = client_->Step(step);
    ASSERT_TRUE(result.ok()) << result.status();
    for (const auto& r : result->results) ASSERT_TRUE(r.ok()) << r.status();
  }
  void TearDown() override {
    client_.reset();
    if (daemon_) {
      EXPECT_TRUE(daemon_->StopCleanly().ok()) << daemon_->log();
    }
  }

  CommandResult Ctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {StatecachectlPath(),
                                     "--address=" + daemon_->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto result = RunCommand(argv);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : CommandResult{};
  }

  static bool ExitedWith(const CommandResult& r, int code) {
    return r.exit.exited && r.exit.code == code;
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
  SessionInfo session_;
};

TEST_F(StatecachectlTest, Status) {
  CommandResult r = Ctl({"status"});
  ASSERT_TRUE(ExitedWith(r, 0)) << r.exit.ToString() << "\n" << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat(session_.epoch))) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, daemon_->address())) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "16 total")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, kModelId)) << r.out;

  r = Ctl({"status", "--json"});
  ASSERT_TRUE(ExitedWith(r, 0)) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["epoch"].get<uint64_t>(), session_.epoch);
  EXPECT_EQ(j["slots_total"].get<int64_t>(), 16);
  EXPECT_EQ(j["sessions"].get<int>(), 1);
  EXPECT_EQ(j["requests"].get<int>(), 2);
  EXPECT_EQ(j["identity"]["model_id"].get<std::string>(), kModelId);
  EXPECT_EQ(j["identity"]["hash_block_size"].get<int64_t>(), kBlock);
  EXPECT_EQ(j["transfer"]["kind"].get<std::string>(), "fork");
}

TEST_F(StatecachectlTest, StatsJsonMatchesGetStats) {
  auto stats = client_->GetStats();
  ASSERT_TRUE(stats.ok());
  CommandResult r = Ctl({"stats", "--json"});
  ASSERT_TRUE(ExitedWith(r, 0)) << r.exit.ToString() << "\n" << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["epoch"].get<uint64_t>(), stats->epoch);
  EXPECT_EQ(j["checkpoints_kept"].get<int64_t>(), stats->checkpoints_kept);
  EXPECT_EQ(j["checkpoints_kept"].get<int64_t>(), 1);
  EXPECT_EQ(j["indexed_hashes"].get<int64_t>(), 1);
  EXPECT_EQ(j["slots_total"].get<int64_t>(), 16);
  EXPECT_EQ(j["slots_used"].get<int64_t>(), stats->slots_used);
  EXPECT_EQ(j["slots_used"].get<int64_t>() + j["slots_held"].get<int64_t>() +
                j["slots_vacant"].get<int64_t>(),
            16);
  // The fixture's daemon fences nothing (--quarantine=0).
  EXPECT_EQ(j["slots_quarantined"].get<int64_t>(), 0);
  EXPECT_EQ(j["sessions"].get<int>(), 1);
  EXPECT_EQ(j["requests"].get<int>(), 2);
  EXPECT_EQ(j["warm_restart"]["outcome"].get<std::string>(), "off");
  // Every field of the generated struct, under the proto's name.
  for (const StatsField& field : StatsFields(*stats)) {
    nlohmann::json::json_pointer path(
        "/" + absl::StrReplaceAll(std::string(field.name), {{".", "/"}}));
    EXPECT_TRUE(j.contains(path)) << field.name << " missing from " << r.out;
  }

  // The table form says the same, and prints every field its sections do
  // not (none today: a "more" section means a field went unprinted).
  r = Ctl({"stats"});
  ASSERT_TRUE(ExitedWith(r, 0)) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "checkpoints")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "kept")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "unknown field")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "\nmore\n")) << r.out;
}

TEST_F(StatecachectlTest, SessionsListsTheAttachedScheduler) {
  CommandResult r = Ctl({"sessions"});
  ASSERT_TRUE(ExitedWith(r, 0)) << r.exit.ToString() << "\n" << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "s1 ")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "ctl-subject")) << r.out;
  // A session's id is its holder's secret: never listed.
  EXPECT_FALSE(absl::StrContains(r.out, session_.session_id)) << r.out;

  r = Ctl({"--json", "sessions"});
  ASSERT_TRUE(ExitedWith(r, 0)) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_EQ(j["sessions"].size(), 1u) << r.out;
  const nlohmann::json& s = j["sessions"][0];
  EXPECT_EQ(s["handle"].get<std::string>(), "s1");
  EXPECT_FALSE(s.contains("session_id")) << r.out;
  EXPECT_EQ(s["principal"].get<std::string>(),
            absl::StrCat("uid:", ::geteuid()));
  EXPECT_EQ(s["client_name"].get<std::string>(), "ctl-subject");
  EXPECT_EQ(s["requests"].get<int64_t>(), 2);
  EXPECT_EQ(s["slots"].get<int64_t>(), 2 * kWidth);
  EXPECT_EQ(s["pins"].get<int64_t>(), 1);
}

TEST_F(StatecachectlTest, ResizeGrowsAndShrinksThePool) {
  CommandResult r = Ctl({"resize", "24"});
  ASSERT_TRUE(ExitedWith(r, 0)) << r.exit.ToString() << "\n" << r.err;
  auto stats = client_->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->slots_total, 24);
  EXPECT_TRUE(absl::StrContains(r.out, "24")) << r.out;

  r = Ctl({"resize", "12", "--deadline=5s", "--json"});
  ASSERT_TRUE(ExitedWith(r, 0)) << r.exit.ToString() << "\n" << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["num_slots"].get<int64_t>(), 12);
  stats = client_->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->slots_total, 12);
  EXPECT_EQ(stats->slots_used + stats->slots_held + stats->slots_vacant, 12);
  EXPECT_EQ(stats->requests, 2) << "live requests survive a shrink";

  // Refused: exit 1 with the daemon's reason on stderr.
  r = Ctl({"resize", "0"});
  EXPECT_TRUE(ExitedWith(r, 1)) << r.exit.ToString();
  EXPECT_TRUE(absl::StrContains(r.err, "INVALID_ARGUMENT")) << r.err;
  EXPECT_EQ(client_->GetStats()->slots_total, 12);
  // Not a number: a usage error, exit 2, nothing sent.
  r = Ctl({"resize", "lots"});
  EXPECT_TRUE(ExitedWith(r, 2)) << r.exit.ToString();
  EXPECT_FALSE(r.err.empty());
}

TEST_F(StatecachectlTest, EvictEndsTheSession) {
  CommandResult r = Ctl({"evict", "s1"});
  ASSERT_TRUE(ExitedWith(r, 0)) << r.exit.ToString() << "\n" << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "s1")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "2 requests released")) << r.out;
  auto stats = client_->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->sessions, 0);
  EXPECT_EQ(stats->requests, 0);
  EXPECT_EQ(stats->slots_used, 0);
  EXPECT_EQ(stats->sessions_evicted, 1);
  EXPECT_EQ(stats->indexed_hashes, 1) << "checkpoints outlive the session";
  // The scheduler finds out on its next call.
  absl::Status keepalive = client_->KeepAlive();
  EXPECT_TRUE(absl::IsNotFound(keepalive)) << keepalive;
  EXPECT_TRUE(absl::StrContains(keepalive.message(), "evicted")) << keepalive;
  EXPECT_TRUE(client_->lease_lost());

  // Evicting it again, or anything unknown: exit 1, NOT_FOUND on stderr.
  for (const std::string& id : {std::string("s1"), std::string("nobody")}) {
    r = Ctl({"evict", id});
    EXPECT_TRUE(ExitedWith(r, 1)) << r.exit.ToString();
    EXPECT_TRUE(absl::StrContains(r.err, "NOT_FOUND")) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  r = Ctl({"sessions"});
  ASSERT_TRUE(ExitedWith(r, 0));
  EXPECT_FALSE(absl::StrContains(r.out, "s1 ")) << r.out;
}

TEST_F(StatecachectlTest, DrainStopsAdmittingAndResumeRestartsIt) {
  CommandResult r = Ctl({"drain", "--json"});
  ASSERT_TRUE(ExitedWith(r, 0)) << r.exit.ToString() << "\n" << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_TRUE(j["draining"].get<bool>()) << r.out;
  auto stats = client_->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_TRUE(stats->draining);
  EXPECT_EQ(stats->requests, 2) << "admitted requests run on";

  // While draining: a new session is refused, an admit is refused, and the
  // requests already admitted still work.
  auto other = Client::Connect(daemon_->address());
  ASSERT_TRUE(other.ok());
  auto refused = (*other)->Attach(TestIdentity(), "late");
  EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  StepBuilder step;
  step.BeginPass().Admit("r3", kWidth, 10, 0, {}, 0).Release("r2");
  auto result = client_->Step(step);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(absl::IsUnavailable(result->Get<AdmitResult>(1).status()))
      << result->Get<AdmitResult>(1).status();
  EXPECT_TRUE(result->Get<ReleaseResult>(2).ok());
  EXPECT_EQ(client_->GetStats()->requests, 1);

  // drain --wait times out while r1 runs: exit 3.
  r = Ctl({"drain", "--wait", "--timeout=300ms", "--interval=50ms"});
  EXPECT_TRUE(ExitedWith(r, 3)) << r.exit.ToString() << "\n" << r.err;

  r = Ctl({"drain", "--resume"});
  ASSERT_TRUE(ExitedWith(r, 0)) << r.exit.ToString() << "\n" << r.err;
  EXPECT_FALSE(client_->GetStats()->draining);
  EXPECT_TRUE((*other)->Attach(TestIdentity(), "late").ok());
  StepBuilder again;
  again.Admit("r3", kWidth, 10, 0, {}, 0);
  result = client_->Step(again);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->Get<AdmitResult>(0).ok())
      << result->Get<AdmitResult>(0).status();
  other->reset();
}

TEST_F(StatecachectlTest, UsageAndConnectionErrors) {
  CommandResult r = Ctl({"frobnicate"});
  EXPECT_TRUE(ExitedWith(r, 2)) << r.exit.ToString();
  EXPECT_TRUE(absl::StrContains(r.err, "frobnicate")) << r.err;
  r = Ctl({});
  EXPECT_TRUE(ExitedWith(r, 2)) << r.exit.ToString();
  r = Ctl({"evict"});
  EXPECT_TRUE(ExitedWith(r, 2)) << r.exit.ToString();
  r = Ctl({"--help"});
  EXPECT_TRUE(ExitedWith(r, 0)) << r.exit.ToString();
  EXPECT_TRUE(absl::StrContains(r.out, "usage")) << r.out;

  // Nobody listening there: exit 4 (unreachable), with a message.
  auto result =
      RunCommand({StatecachectlPath(),
                  "--address=unix:" + daemon_->socket_dir() + "/nobody.sock",
                  "--timeout=1s", "status"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(ExitedWith(*result, 4)) << result->exit.ToString();
  EXPECT_TRUE(absl::StrContains(result->err, "UNAVAILABLE")) << result->err;
}

}  // namespace
}  // namespace statecache::testing

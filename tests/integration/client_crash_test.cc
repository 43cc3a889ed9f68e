// A client process that holds slots is SIGKILLed: its lease lapses and the
// daemon releases everything it held, within about one lease TTL, while the
// checkpoint it published stays indexed (checkpoints are shared).
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/test_util.h"

namespace statecache::testing {
namespace {

// Long enough that the holder's renewals (every TTL/3) are not missed on a
// loaded machine; short enough to keep the test quick.
constexpr absl::Duration kTtl = absl::Seconds(2);
constexpr int kRequests = 3;

TEST(ClientCrashTest, KilledClientsSlotsComeBackWithinOneLease) {
  auto daemon = DaemonProcess::Start(
      WithIdentity({"--num_slots=32",
                    absl::StrCat("--lease_ttl=", absl::FormatDuration(kTtl))}));
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto admin = Client::Connect((*daemon)->address());
  ASSERT_TRUE(admin.ok()) << admin.status();

  Subprocess::Options options;
  options.argv = {SlotHolderPath(), "--address=" + (*daemon)->address(),
                  absl::StrCat("--requests=", kRequests),
                  absl::StrCat("--width=", kWidth)};
  options.pipe_stdout = true;
  options.stderr_path = (*daemon)->socket_dir() + "/slot_holder.log";
  auto holder = Subprocess::Start(options);
  ASSERT_TRUE(holder.ok()) << holder.status();
  auto line = (*holder)->ReadLine(absl::Seconds(30));
  ASSERT_TRUE(line.ok()) << line.status() << "\nslot_holder said: "
                         << ReadFileOrEmpty(options.stderr_path);
  // "held SESSION HASH SLOT"
  std::vector<std::string> words = absl::StrSplit(*line, ' ');
  ASSERT_EQ(words.size(), 4u) << *line;
  ASSERT_EQ(words[0], "held");
  const std::string session_id = words[1];
  int64_t hash = 0, checkpoint_slot = -1;
  ASSERT_TRUE(absl::SimpleAtoi(words[2], &hash));
  ASSERT_TRUE(absl::SimpleAtoi(words[3], &checkpoint_slot));

  auto held = (*admin)->GetStats();
  ASSERT_TRUE(held.ok()) << held.status();
  // kRequests sets of kWidth slots, plus the checkpoint pinned for the
  // request's next forward.
  EXPECT_EQ(held->slots_used, kRequests * kWidth + 1);
  EXPECT_EQ(held->sessions, 1);
  EXPECT_EQ(held->requests, kRequests);
  EXPECT_EQ(held->indexed_hashes, 1);
  EXPECT_EQ(held->lease_expiries, 0);
  auto sessions = (*admin)->ListSessions();
  ASSERT_TRUE(sessions.ok());
  ASSERT_EQ(sessions->size(), 1u);
  EXPECT_FALSE((*sessions)[0].handle.empty());
  EXPECT_EQ((*sessions)[0].client_name, "slot-holder");
  EXPECT_EQ((*sessions)[0].slots, kRequests * kWidth);
  EXPECT_EQ((*sessions)[0].pins, 1);

  // While the holder lives, its client library renews the lease: the
  // session must survive past one TTL.
  const absl::Time watch_until = absl::Now() + kTtl * 1.25;
  while (absl::Now() < watch_until) {
    auto stats = (*admin)->GetStats();
    ASSERT_TRUE(stats.ok());
    ASSERT_EQ(stats->sessions, 1) << "the live holder's session expired";
    absl::SleepFor(absl::Milliseconds(50));
  }

  ASSERT_TRUE((*holder)->Kill(SIGKILL).ok());
  auto exit = (*holder)->Wait(absl::Seconds(10));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->signal, SIGKILL) << exit->ToString();
  const absl::Time killed = absl::Now();

  DaemonStats after;
  ASSERT_TRUE(PollUntil(
      [&] {
        auto stats = (*admin)->GetStats();
        EXPECT_TRUE(stats.ok());
        if (!stats.ok()) return true;
        after = *stats;
        return after.slots_used == 0 && after.sessions == 0;
      },
      3 * kTtl))
      << "slots_used=" << after.slots_used << " sessions=" << after.sessions
      << " " << absl::FormatDuration(absl::Now() - killed)
      << " after the kill (TTL " << absl::FormatDuration(kTtl) << ")";
  const absl::Duration took = absl::Now() - killed;
  RecordProperty("expiry_ms", absl::StrCat(absl::ToInt64Milliseconds(took)));
  EXPECT_LT(took, 3 * kTtl);
  EXPECT_EQ(after.requests, 0);
  EXPECT_EQ(after.lease_expiries, 1);
  EXPECT_EQ(after.sessions_evicted, 0);
  // The checkpoint it published is shared: still indexed, now held.
  EXPECT_EQ(after.indexed_hashes, held->indexed_hashes);
  EXPECT_EQ(after.slots_held, 1);
  EXPECT_EQ(after.slots_used + after.slots_held + after.slots_vacant,
            after.slots_total);
  EXPECT_EQ((*admin)->ListSessions()->size(), 0u);

  // Another scheduler resumes from it.
  auto other = Client::Connect((*daemon)->address());
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->Attach(TestIdentity(), "after-crash").ok());
  std::vector<int64_t> hashes = ChainedHashes({424242, 424243, 424244, 424245});
  ASSERT_EQ(hashes[2], hash) << "slot_holder and this test hash differently";
  StepBuilder step;
  step.BeginPass().Admit("resume", kWidth, 300, 300, hashes, 4);
  auto results = (*other)->Step(step);
  ASSERT_TRUE(results.ok()) << results.status();
  auto admit = results->Get<AdmitResult>(1);
  ASSERT_TRUE(admit.ok()) << admit.status();
  EXPECT_EQ(admit->blocks_resumed, 3);
  EXPECT_EQ(admit->fork_src, checkpoint_slot);
  ASSERT_TRUE((*other)->Detach().ok());

  other->reset();
  admin->reset();
  EXPECT_TRUE((*daemon)->StopCleanly().ok());
}

}  // namespace
}  // namespace statecache::testing

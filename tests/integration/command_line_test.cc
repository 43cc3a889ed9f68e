// statecached's command line and start-up checks, as an operator's script
// meets them: a flag it does not know, or a value its flag cannot parse, is
// a configuration error (exit 2, one line naming the flag) before anything
// starts; --help lists the daemon's flags under its own name, not the path
// of the tree it was built in; a socket directory or state directory
// another user controls, or any directory above them, is refused (exit 2,
// naming it) rather than served from.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_process.h"

namespace statecache::testing {
namespace {

CommandResult RunDaemon(std::vector<std::string> args) {
  args.insert(args.begin(), StatecachedPath());
  absl::StatusOr<CommandResult> result = RunCommand(args);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : CommandResult{};
}

TEST(CommandLineTest, AnUnknownFlagExitsTwoNamingIt) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--bogus"},
           {"--num_slots", "8", "--bogus=1"},
           {"--noreadable_midstep", "--nobogus"},
           {"-bogus"}}) {
    const CommandResult r = RunDaemon(args);
    EXPECT_TRUE(r.exit.exited) << r.exit.ToString();
    EXPECT_EQ(r.exit.code, 2) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "unknown flag --")) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "bogus")) << r.err;
  }
}

TEST(CommandLineTest, AValueItsFlagCannotParseExitsTwo) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--num_slots=abc"},
                                             {"--num_slots", "abc"},
                                             {"--lease_ttl=5x"},
                                             {"--num_slots"}}) {
    const CommandResult r = RunDaemon(args);
    EXPECT_EQ(r.exit.code, 2) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "--num_slots") ||
                absl::StrContains(r.err, "--lease_ttl"))
        << r.err;
  }
}

// --num_slots=2^30 without a layout died of std::bad_alloc (exit
// 134, a core) before it checked anything. A pool whose bookkeeping alone
// is past the machine's memory is a configuration error now. (An
// unreachable --listen keeps a machine big enough to hold it from serving.)
TEST(CommandLineTest, APoolTheMachineCannotHoldExitsTwoNamingTheFlag) {
  for (const char* flag : {"--num_slots", "--max_slots"}) {
    const CommandResult r =
        RunDaemon({absl::StrCat(flag, "=1073741824"),
                   "--listen=unix:/nonexistent-statecache-dir/s.sock"});
    EXPECT_TRUE(r.exit.exited) << r.exit.ToString();
    EXPECT_EQ(r.exit.code, 2) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat(flag, "=1073741824")))
        << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "bookkeeping")) << r.err;
  }
}

TEST(CommandLineTest, AValueThatLooksLikeAFlagIsAValue) {
  // "--fork_tokens -1": -1 is the value (refused later, as a bad
  // configuration, by the pool's own check), not an unknown flag "-1".
  const CommandResult r = RunDaemon({"--fork_tokens", "-1"});
  EXPECT_EQ(r.exit.code, 2) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "unknown flag")) << r.err;
}

TEST(CommandLineTest, HelpListsTheDaemonsFlagsUnderItsName) {
  const CommandResult r = RunDaemon({"--help"});
  const std::string help = r.out + r.err;
  EXPECT_TRUE(absl::StrContains(help, "Flags from statecached:")) << help;
  EXPECT_TRUE(absl::StrContains(help, "--max_slots_per_session")) << help;
  EXPECT_FALSE(absl::StrContains(help, "daemon/main.cc")) << help;
  EXPECT_FALSE(absl::StrContains(help, STATECACHE_SOURCE_DIR)) << help;
}

TEST(StartupTest, ASocketDirectoryOthersCanWriteIsRefused) {
  absl::StatusOr<TempDir> dir = TempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string listen = "--listen=unix:" + dir->path() + "/s.sock";
  ASSERT_EQ(::chmod(dir->path().c_str(), 0777), 0);
  CommandResult r = RunDaemon({listen, "--metrics_address="});
  EXPECT_EQ(r.exit.code, 2) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "writable by others")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, dir->path())) << r.err;
  if (::geteuid() == 0) {
    // Another user's directory, however private, is theirs to tamper with.
    ASSERT_EQ(::chmod(dir->path().c_str(), 0700), 0);
    ASSERT_EQ(::chown(dir->path().c_str(), 65534, 65534), 0);
    r = RunDaemon({listen, "--metrics_address="});
    EXPECT_EQ(r.exit.code, 2) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "belongs to uid 65534")) << r.err;
    ASSERT_EQ(::chown(dir->path().c_str(), 0, 0), 0);
  }
  // Sticky, like /tmp: others cannot replace what is ours, so it serves.
  ASSERT_EQ(::chmod(dir->path().c_str(), 01777), 0);
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      DaemonProcess::Start({}, dir->path());
  EXPECT_TRUE(daemon.ok()) << daemon.status();
}

TEST(StartupTest, AnUnknownShmGroupExitsTwoNamingTheFlag) {
  absl::StatusOr<TempDir> dir = TempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status();
  const CommandResult r =
      RunDaemon({"--listen=unix:" + dir->path() + "/s.sock",
                 "--metrics_address=", "--shm_group=no-such-group-here"});
  EXPECT_EQ(r.exit.code, 2) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "--shm_group")) << r.err;
}

// With --listen=unix:np/run/sc.sock where np was another user's,
// the daemon made run and served; that user renamed run, made a new one and
// listened on the same path. Every directory above the socket is checked.
TEST(StartupTest, ASocketUnderAnotherUsersDirectoryIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a directory away needs root";
  absl::StatusOr<TempDir> dir = TempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string theirs = dir->path() + "/np";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  const CommandResult r = RunDaemon(
      {"--listen=unix:" + theirs + "/run/sc.sock", "--metrics_address="});
  EXPECT_EQ(r.exit.code, 2) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, theirs + " belongs to uid 65534"))
      << r.err;
  struct stat st;
  EXPECT_NE(::stat((theirs + "/run").c_str(), &st), 0);  // nothing made
}

// With --state_dir mode 0777, another user planted index.tmp and
// lock as symlinks; a root daemon started without a warning and wrote
// through both.
TEST(StartupTest, AStateDirectoryOthersCanWriteIsRefused) {
  absl::StatusOr<TempDir> dir = TempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string state = dir->path() + "/state";
  const std::string victim = dir->path() + "/victim";
  ASSERT_EQ(::mkdir(state.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(state.c_str(), 0777), 0);
  { std::ofstream(victim) << "precious"; }
  ASSERT_EQ(::symlink(victim.c_str(), (state + "/index.tmp").c_str()), 0);
  ASSERT_EQ(
      ::symlink((dir->path() + "/planted").c_str(), (state + "/lock").c_str()),
      0);
  const std::string layout = dir->path() + "/layout.json";
  {
    std::ofstream(layout) << R"({"name": "tiny", "num_layers": 1, "tensors":
        [{"name": "ssm", "dtype": "f32", "shape": [4]}]})";
  }
  const CommandResult r =
      RunDaemon({"--listen=unix:" + dir->path() + "/s.sock",
                 "--metrics_address=", "--state_dir=" + state,
                 "--layout=" + layout, "--num_slots=4"});
  EXPECT_EQ(r.exit.code, 2) << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.err, "--state_dir: directory " + state + " is writable by others"))
      << r.err;
  std::ifstream in(victim);
  std::string kept((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "precious");
  struct stat st;
  EXPECT_NE(::stat((dir->path() + "/planted").c_str(), &st), 0);
}

}  // namespace
}  // namespace statecache::testing

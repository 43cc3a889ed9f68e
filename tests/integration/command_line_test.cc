// statecached's command line, as an operator's script meets it: a flag it
// does not know, or a value its flag cannot parse, is a configuration error
// (exit 2, one line naming the flag) before anything starts; --help lists
// the daemon's flags under its own name, not the path of the tree it was
// built in.
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

}  // namespace
}  // namespace statecache::testing

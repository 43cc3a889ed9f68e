// BranchPoints: a branch is found where a shared prefix is left, never
// where an earlier prompt simply ended, and the table forgets by
// generations.
#include "daemon/core/branch_points.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace statecache {
namespace {

// `shared` then `own`: a prompt's block hashes.
std::vector<int64_t> Prompt(const std::vector<int64_t>& shared,
                            const std::vector<int64_t>& own) {
  std::vector<int64_t> out = shared;
  out.insert(out.end(), own.begin(), own.end());
  return out;
}

TEST(BranchPointsTest, FanOutBranchesWhereTheSharedDocumentEnds) {
  BranchPoints table(1024);
  const std::vector<int64_t> document = {1, 2, 3, 4};
  EXPECT_EQ(table.Record(Prompt(document, {10, 11})), 0);  // nothing earlier
  EXPECT_EQ(table.Record(Prompt(document, {20})), 4);
  EXPECT_EQ(table.Record(Prompt(document, {30, 31, 32})), 4);
  // A prompt sharing only part of the document branches there.
  EXPECT_EQ(table.Record({1, 2, 40}), 2);
}

TEST(BranchPointsTest, AContinuationIsNotABranch) {
  BranchPoints table(1024);
  EXPECT_EQ(table.Record({1, 2, 3}), 0);
  // The next turn holds the whole previous prompt: it ended at 3, nothing
  // went on past it differently.
  EXPECT_EQ(table.Record({1, 2, 3, 4, 5}), 0);
  // A sibling of that turn (sub-agent) leaves it after block 5's prefix.
  EXPECT_EQ(table.Record({1, 2, 3, 4, 5, 6}), 0);
  EXPECT_EQ(table.Record({1, 2, 3, 4, 5, 7}), 5);
}

TEST(BranchPointsTest, APromptAllOfWhichWasSeenHasNoBranchInside) {
  BranchPoints table(1024);
  EXPECT_EQ(table.Record({1, 2, 3, 4}), 0);
  // Its end is where it leaves the other: the prompt's end covers it.
  EXPECT_EQ(table.Record({1, 2}), 0);
  EXPECT_EQ(table.Record({}), 0);
}

TEST(BranchPointsTest, ForgetsWhatNoPromptUsedForAGeneration) {
  BranchPoints table(8);  // generations of 4
  EXPECT_EQ(table.capacity(), 8);
  EXPECT_EQ(table.Record({1, 2, 3}), 0);
  EXPECT_EQ(table.Record({1, 2, 4}), 2);  // 1, 2, 3 and 4 current: full
  // Two generations on, 1..4 are gone.
  EXPECT_EQ(table.Record({100, 101, 102, 103}), 0);
  EXPECT_EQ(table.Record({200, 201, 202, 203}), 0);
  EXPECT_LE(table.size(), 8);
  EXPECT_EQ(table.Record({1, 2, 5}), 0);
  // A prefix in use stays: recording moves it to the current generation.
  BranchPoints kept(8);
  EXPECT_EQ(kept.Record({1, 2, 3}), 0);
  EXPECT_EQ(kept.Record({100, 101}), 0);  // 1, 2, 3, 100 current
  EXPECT_EQ(kept.Record({1, 2, 9}), 2);   // rolls; 1, 2 move back
  EXPECT_EQ(kept.Record({300, 301}), 0);
  EXPECT_EQ(kept.Record({1, 2, 7}), 2);
  kept.Clear();
  EXPECT_EQ(kept.size(), 0);
  EXPECT_EQ(kept.Record({1, 2, 8}), 0);
}

}  // namespace
}  // namespace statecache

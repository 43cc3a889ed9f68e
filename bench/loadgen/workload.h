// The workload bench/workload/gen_workload.py writes (JSON Lines, documented
// in bench/workload/README.md), read into sessions of turns.
//
// Contract: ReadWorkload accepts a file only if it is one the scheduler
// simulation can replay as written: a header line of format
// "statecache-workload" version 1 with hash_block_size >= 1, then request
// lines whose sessions are numbered 0, 1, ... in order of first appearance,
// each session's turns 0, 1, ... in order and consecutive, a sub-agent's
// parent an earlier session with that turn, every prompt_tokens >= 1 and
// output_tokens >= 1, exactly prompt_tokens / hash_block_size block hashes
// and, where the line has `output_blocks`, exactly (prompt_tokens +
// output_tokens) / hash_block_size - prompt_tokens / hash_block_size of
// them, every hash in [0, 2^63). Anything else is INVALID_ARGUMENT naming
// the line and the field; an unreadable file is NOT_FOUND. A line without
// `output_blocks` (a file from before the generator wrote them) is read
// with none and counted in Workload::lines_without_output_blocks.
//
// Thread safety: a Workload is an immutable value once read.
#ifndef STATECACHE_BENCH_LOADGEN_WORKLOAD_H_
#define STATECACHE_BENCH_LOADGEN_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace statecache::loadgen {

// One request: a turn of an agent session.
struct Turn {
  // Simulated milliseconds between the event this turn waits for (the
  // previous turn's finish; for turn 0, the session's start) and its
  // arrival.
  int64_t think_ms = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  // Chained hashes of the prompt's full blocks.
  std::vector<int64_t> blocks;
  // Chained hashes of the full blocks the reply completes after them
  // (blocks.size() .. (prompt_tokens + output_tokens) / block size - 1 of
  // the prompt-then-reply token stream): the first covers the prompt's
  // partial last block and the reply's first tokens. A later prompt that
  // contains this prompt and its reply carries the same hashes there.
  std::vector<int64_t> output_blocks;
};

struct Session {
  int32_t id = 0;
  // The parent session of a sub-agent and the parent's turn it branches
  // off (it may start once that turn finished); -1 for a top-level session.
  int32_t parent = -1;
  int32_t parent_turn = -1;
  int32_t agent = 0;
  std::vector<Turn> turns;
};

struct Workload {
  int64_t hash_block_size = 0;
  // The header's generator parameters, as JSON text (for reports).
  std::string params_json;
  std::vector<Session> sessions;
  // Request lines that had no `output_blocks`.
  int64_t lines_without_output_blocks = 0;

  int64_t requests() const;
  int64_t prompt_tokens() const;
  int64_t output_tokens() const;
};

absl::StatusOr<Workload> ReadWorkload(const std::string& path);

}  // namespace statecache::loadgen

#endif  // STATECACHE_BENCH_LOADGEN_WORKLOAD_H_

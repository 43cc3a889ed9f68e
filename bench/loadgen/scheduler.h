// The simulated scheduler: replays a Workload against a StepTarget, one
// Step per scheduler pass, in simulated time.
//
// Sessions: at most `concurrency` agent sessions are active (started and not
// finished) at once; the lowest-numbered eligible session starts when one
// ends. A top-level session is eligible from the start, a sub-agent once its
// parent's branching turn finished. Each runs its turns in order: turn t+1
// arrives think_ms after turn t finished (turn 0 think_ms after the start).
//
// A pass is one Step holding, in statecache.proto's call order, what the
// previous forward left to say (consume_fork for the forks it read,
// publish of its midstep reservations, checkpoint at the chunk ends that
// are checkpoint positions, release of finished requests, unindex of the
// KV blocks evicted), then begin_pass, admissions (resumable_hit, admit) and
// reserve for the forward it builds. Then the forward runs: its simulated
// time is prefill tokens / prefill_tokens_per_s, plus decode_ms_per_token
// when any request decodes.
//
// Admission: arrived requests in arrival order, while the pass's token
// budget (max_batch_tokens) lasts and the ledger (slot_ledger.h) says
// `width` slots are free; kv_hit_blocks is the leading prefix the simulated
// KV cache (kv_cache.h) holds. An admit refused RESOURCE_EXHAUSTED is tried
// again next pass; any other refusal, and any refusal of another kind of
// operation, ends the run with an error naming it.
//
// Prefill is chunked (chunk_tokens per request per pass). Checkpoint
// positions (transfer "fork" only): the prompt's end (its last full-block
// boundary, the request's anchor_pos) and, under Policy::kStateCache, every
// ladder_blocks-th block boundary of the prefill. A position at a chunk's
// end is a fork `checkpoint` after that forward; one inside a chunk is a
// midstep reserve/publish around it when the transfer is readable_midstep
// and the chunk is not the request's first (whose start the admit decides,
// in the same Step as the reserve would be), and otherwise ends the chunk
// there. Policy::kPromptEnd keeps the prompt end only, always as a chunk
// end; Policy::kNone never resumes (kv_hit_blocks 0) and sends nothing but
// begin_pass, admit and release.
//
// Deterministic: simulated time and the target's answers decide everything
// (wall time only what `--realtime` sleeps), so two targets that decide
// alike see the same passes, and RunResult::digest (every result value of
// every Step, hashed) says whether they did.
//
// Thread safety: Simulate is thread-compatible (it drives one target).
#ifndef STATECACHE_BENCH_LOADGEN_SCHEDULER_H_
#define STATECACHE_BENCH_LOADGEN_SCHEDULER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bench/loadgen/pass.h"
#include "bench/loadgen/workload.h"
#include "client/statecache_client.h"

namespace statecache::loadgen {

enum class Policy { kStateCache, kNone, kPromptEnd };

// "statecache", "none", "prompt-end". INVALID_ARGUMENT for anything else.
absl::StatusOr<Policy> ParsePolicy(absl::string_view name);
absl::string_view PolicyName(Policy policy);

struct SchedulerOptions {
  Policy policy = Policy::kStateCache;
  int32_t concurrency = 16;
  int64_t chunk_tokens = 2048;
  int64_t max_batch_tokens = 8192;
  int64_t ladder_blocks = 16;
  int64_t kv_blocks = 8192;
  int64_t prefill_tokens_per_s = 20000;
  double decode_ms_per_token = 25;
  // Slots per request (1 + num_spec).
  int32_t width = 1;
  // Sleep so that wall time follows simulated time.
  bool realtime = false;
  // Start with clear_index, so a daemon that served earlier runs starts as
  // a fresh pool would.
  bool clear_index = true;
};

// The pool as Attach describes it.
struct PoolConfig {
  int64_t num_slots = 0;
  TransferConfig transfer;
  int32_t max_operations_per_step = 0;
};

struct RunResult {
  int64_t passes = 0;
  // Steps timed: every pass, and the last one that says what the final
  // forward left to say.
  std::vector<double> step_seconds;
  int64_t operations = 0;
  int64_t requests = 0;
  int64_t admits = 0;
  int64_t admit_retries = 0;  // RESOURCE_EXHAUSTED, tried again
  int64_t resumes_fork = 0;
  int64_t resumes_adopt = 0;
  // Tokens: of every prompt; of the KV-side prefix hits ("asked for"); of
  // what the state cache resumed (saved); prefilled; decoded.
  int64_t prompt_tokens = 0;
  int64_t kv_hit_tokens = 0;
  int64_t resumed_tokens = 0;
  int64_t prefill_tokens = 0;
  int64_t output_tokens = 0;
  // Blocks resumable_hit said would resume, and blocks admit resumed.
  int64_t query_blocks = 0;
  int64_t resumed_blocks = 0;
  int64_t checkpoints_sent = 0;
  int64_t checkpoints_kept = 0;
  int64_t reserve_positions = 0;
  int64_t reservations = 0;
  int64_t published = 0;
  int64_t unindexed = 0;
  int64_t orphaned = 0;
  int64_t kv_evictions = 0;
  int64_t kv_over_capacity = 0;
  int64_t simulated_us = 0;
  double wall_seconds = 0;
  uint64_t digest = 0;

  // resumed_tokens / kv_hit_tokens (0 when nothing was asked).
  double hit_ratio() const;
};

// INVALID_ARGUMENT naming the first option out of range (a count below 1,
// chunk_tokens not a multiple of the block size, ...).
absl::Status ValidateOptions(const SchedulerOptions& options,
                             int64_t hash_block_size);

// Errors: ValidateOptions's; an operation refused unexpectedly (its code,
// with the pass, the operation and the request named); the Step call's own
// error; INTERNAL when the daemon's answers contradict the protocol (its
// pin clock disagrees with SlotLedger's); FAILED_PRECONDITION when the pool
// was resized mid-run; RESOURCE_EXHAUSTED when admits keep being refused
// with nothing running (another session holds the pool).
absl::StatusOr<RunResult> Simulate(const Workload& workload,
                                   const SchedulerOptions& options,
                                   const PoolConfig& pool, StepTarget& target);

}  // namespace statecache::loadgen

#endif  // STATECACHE_BENCH_LOADGEN_SCHEDULER_H_

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
// The KV cache holds, as vLLM's and SGLang's prefix caches do, every full
// block a request has computed: its prompt's blocks as prefill completes
// them and, with kv_cache_decode (the default), the blocks of its reply as
// decoding fills them, under the hashes the workload gives them
// (Turn::output_blocks, the ones a later prompt holding the reply
// carries). A request that decoded n tokens has computed prompt + n - 1 of
// them (the last sampled token is never fed back), so a later prompt's KV
// hit may run past this prompt's end, through the reply. Without
// kv_cache_decode only prompt blocks are cached.
//
// Prefill is chunked (chunk_tokens per request per pass). Checkpoints are
// taken at positions a Policy chooses (transfer "fork" only; Policy has
// them and the engine behaviour each mirrors). A position at a chunk's end
// is a fork `checkpoint` after that forward; one inside a chunk is, for
// the policies that write midstep (kStateCache, kEveryBlock), a midstep
// reserve/publish around it when the transfer is readable_midstep and the
// chunk is not the request's first (whose start the admit decides, in the
// same Step as the reserve would be), and otherwise ends the chunk there.
// kPromptEnd and kJunction always end the chunk at their positions.
// kJunction and kEveryBlock file every checkpoint as known (a checkpoint's
// anchor_pos, publish's keep_all), so the daemon spends theirs in LRU order
// as an engine's prefix cache does; kStateCache's ladder positions are
// guesses (spent first). kNone never resumes (kv_hit_blocks 0) and sends
// nothing but begin_pass, admit and release.
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

// Where a request's checkpoints go (the prompt's end is its last full-block
// boundary, the admit's anchor_pos). Positions at or before the point it
// resumed from are skipped.
enum class Policy {
  // What the daemon advises (a session attached with advise_placement;
  // AdmitResult.branch_blocks and continuation_blocks): the branch point
  // it names, the prompt's end, and every block boundary the decode
  // reaches after it (each continuation checkpoint replacing the last).
  kStateCache,
  // The prompt's end and every ladder_blocks-th block boundary of the
  // prefill (guesses): statecache's placement before placement advice.
  kLadder,
  // No state cache: every prefill from scratch (an engine without prefix
  // caching for the recurrent layers).
  kNone,
  // The prompt's end only: vLLM's mamba_cache_mode "align" and SGLang's
  // radix cache for hybrid models, which keep the state at the last block
  // boundary of each prefill.
  kPromptEnd,
  // The prompt's end and the junction: the block boundary where this prompt
  // stops matching what the KV cache held at admission (the end of the
  // longest prefix it shares with an earlier request), when that lies past
  // the resume point and before the prompt's end: vLLM's
  // --enable-mamba-fine-grained-prefix-cache, which materialises a
  // checkpoint at the shared-prefix junction so the next request sharing
  // it resumes there.
  kJunction,
  // Every block boundary of the prompt: vLLM's mamba_cache_mode "all",
  // one state per block, at the price of a slot per block.
  kEveryBlock,
};

// "statecache", "ladder", "none", "prompt-end", "junction", "every-block".
// INVALID_ARGUMENT for anything else.
absl::StatusOr<Policy> ParsePolicy(absl::string_view name);
absl::string_view PolicyName(Policy policy);

struct SchedulerOptions {
  Policy policy = Policy::kStateCache;
  int32_t concurrency = 16;
  int64_t chunk_tokens = 2048;
  int64_t max_batch_tokens = 8192;
  int64_t ladder_blocks = 16;
  int64_t kv_blocks = 8192;
  // Cache full blocks of decode output in the KV cache (the workload must
  // have Turn::output_blocks); false: prompt blocks only.
  bool kv_cache_decode = true;
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
  // The session gets placement advice (kStateCache asks for it).
  bool placement_advised = false;
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

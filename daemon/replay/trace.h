// Pool traces: parsing one JSON line of a trace (docs/trace_format.md) into
// a typed call, running it on a SlotPool, and printing the result exactly as
// the reference's trace runner does (sorted keys, no spaces).
//
// Parsing is strict in the same places the reference runner is: every
// argument the format lists must be present with its JSON type (an int is not
// a bool), unknown keys are refused, and a seq carries exactly its five
// fields. Parsing is kept apart from running so that a benchmark can convert
// every argument before its clock starts.
//
// Thread-compatible.
#ifndef STATECACHE_DAEMON_REPLAY_TRACE_H_
#define STATECACHE_DAEMON_REPLAY_TRACE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/core/pool_call.h"
#include "daemon/core/slot_pool.h"

namespace statecache::replay {

// The calls a line names and what they return are the core's own
// (daemon/core/pool_call.h): what a SlotPool tells its observer of.
using Op = PoolOp;
using Call = PoolCall;
using Value = PoolValue;

// The pool configuration of a trace's first line.
struct PoolConfig {
  int64_t num_slots = 0;
  int64_t hash_block_size = 1;
  bool enabled = true;
  TransferKind kind = TransferKind::kNone;
  int64_t fork_tokens = 0;
  bool readable_midstep = false;
};

// A line is either the config, a call, or unusable (parse error).
struct ParsedLine {
  enum class Kind { kConfig, kCall, kError } kind = Kind::kError;
  PoolConfig config;
  Call call;
  std::string error;  // for kError
};

ParsedLine ParseLine(std::string_view line);

// The line that ParseLine reads back as `config` / `call` (normalised:
// sorted keys, no spaces).
std::string FormatConfig(const PoolConfig& config);
std::string FormatCall(const Call& call);
// The configuration `pool` was made with (its size now, its hash block
// size, whether it is enabled, its transfer).
PoolConfig ConfigOf(const SlotPool& pool);

// Builds the pool a config line describes (the reference's refusals apply).
absl::StatusOr<SlotPool> MakePool(const PoolConfig& config);

// What one call returned, before it is printed.
struct CallResult {
  absl::Status status;
  Value value;
};

// Runs one call. A refused call leaves the pool unchanged.
CallResult Invoke(SlotPool& pool, const Call& call);

// {"ret":...} or {"error":"..."}, normalised.
std::string FormatResult(const CallResult& result);
std::string FormatError(std::string_view message);

// Replays a whole trace, one result line per input line. With `timing`, the
// nanoseconds spent inside pool calls (dump excluded) and their number are
// stored there.
struct Timing {
  int64_t calls = 0;
  int64_t nanos = 0;
};
//
// With `tier`, the checkpoints the pool spends also go to a host tier of
// tier->entries entries (daemon/core/host_tier.h), as the daemon's would:
// unindex and clear_index drop from it too. The result lines are the same
// (the pool's decisions do not depend on the tier); tier->events gets one
// JSON line per call that the tier saw something in: {"line": i,
// "demoted": [[hash, guess]...], "evicted": [hash...], "erased": [hash...],
// "tier_hit": blocks} (tier_hit: for resumable_hit, how deep the tier
// would resume beyond the pool's answer, 0 if not deeper), and a last line
// {"dump": [hash...]} (LRU order, head first).
struct TierReplay {
  int64_t entries = 0;
  std::vector<std::string> events;
};
std::vector<std::string> ReplayTrace(const std::vector<std::string>& lines,
                                     Timing* timing,
                                     TierReplay* tier = nullptr);

}  // namespace statecache::replay

#endif  // STATECACHE_DAEMON_REPLAY_TRACE_H_

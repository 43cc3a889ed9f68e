// PoolCall: one call on a SlotPool as a value, what it returned, and the
// observer a SlotPool can be handed to be told of every call made on it.
//
// The calls are the trace format's (docs/trace_format.md): one PoolOp per
// kind of line, with the arguments a line carries. An observer set on a
// pool (SlotPool::SetCallObserver) is told of each public call after it
// ran, with its arguments and its result, in the order the calls were made:
// the pool's own record of how its callers (SlotMemory's verbs, the
// service's pin clocks, its stats) drive it. daemon/replay/trace_recorder.h
// writes that record as a trace. Unset, it costs each call one test of a
// null pointer.
//
// Thread-compatible.
#ifndef STATECACHE_DAEMON_CORE_POOL_CALL_H_
#define STATECACHE_DAEMON_CORE_POOL_CALL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/pool_op.h"
#include "daemon/core/sequence.h"
#include "daemon/core/slot_pool.h"

namespace statecache {

// One call with its arguments. Which fields an op reads is fixed by the op
// (daemon/replay/trace.cc's table names them). Every field has a default,
// so a call names only its own ({.op = PoolOp::kClaim, .a = slot}).
struct PoolCall {
  PoolOp op = PoolOp::kNumFree;
  int64_t a = 0;      // count / slot / hash / hit / boundary_blocks / src
  int64_t b = 0;      // dst / hash (checkpoint)
  bool flag = false;  // assume_checkpointed / reader_is_next_batch
  // nullopt: absent, or publish_midstep's JSON null.
  std::optional<Sequence> seq = {};
  std::vector<int64_t> ints = {};                       // slots / block_hashes
  std::vector<std::pair<int64_t, int64_t>> pairs = {};  // positions
  std::vector<Reservation> reservations = {};
};

// What one call returned (monostate: null, or nothing).
using PoolValue = std::variant<
    std::monostate, bool, int64_t, std::vector<int64_t>,
    std::optional<SlotRetirement>, CheckpointResult, CheckpointFates, Occupancy,
    std::vector<std::pair<int64_t, int64_t>>, std::vector<Reservation>,
    // Held by pointer: a snapshot is large and rare, and would make every
    // value as large.
    std::shared_ptr<const PoolSnapshot>>;

// Told of the calls made on a pool, under whatever lock guards the pool:
// implementations must not call the pool back.
class PoolCallObserver {
 public:
  virtual ~PoolCallObserver() = default;
  // Told once, when set, before any call: the pool's configuration and
  // state as they are (a trace starts from the state its config line
  // makes). `pool` is not to be kept: it may move.
  virtual void OnStart(const SlotPool& pool) = 0;
  // A call the trace format has a line for, after it ran: `status` its
  // refusal, or OK with `value` what it returned.
  virtual void OnCall(const PoolCall& call, const absl::Status& status,
                      const PoolValue& value) = 0;
  // The calls the format has no line for: one session's share of the pin
  // clock (the reference has one clock for the pool, release_pins) and a
  // warm restart's refiling.
  virtual void OnReleasePin(int64_t slot, int64_t count,
                            const absl::Status& status) = 0;
  virtual void OnEndDeferral(int64_t slot, const absl::Status& status) = 0;
  virtual void OnRestoreCheckpoint(int64_t slot, int64_t hash, bool speculative,
                                   const absl::Status& status) = 0;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_POOL_CALL_H_

// TraceRecorder: the pool trace (docs/trace_format.md) of the calls a
// SlotPool is told of (daemon/core/pool_call.h). Handed to a pool
// (SlotPool::SetCallObserver, SlotMemory::SetPoolObserver or
// StateCacheOptions::pool_observer), it writes, call by call, the trace of
// what the pool's callers did to it, with the results the pool gave: the
// lines statecache-replay and the reference's run_trace.py run.
//
// Each line is checked as it is written: read back (ParseLine) and run on a
// pool of the recorder's own, made from the config line (Invoke), it must
// give what the observed pool gave. A trace the recorder vouches for
// (status() OK) therefore replays to identical results, and leaves its
// replay in the state the observed pool is in.
//
// The trace format has one pin clock for the whole pool (release_pins); the
// daemon keeps one per session, whose tick ends the session's deferrals
// (EndDeferral) and hands its other pins back whole, in slot order
// (ReleasePin). A tick that does exactly what release_pins would (it ends
// every deferral the pool holds and returns every other pin, whole) is
// written as one release_pins line. Any other has no line (a session's tick
// while another session holds pins, a detach returning deferred pins), nor
// has a warm restart's RestoreCheckpoint: the recorder stops at the first.
//
// Thread-compatible: the pool tells it under the pool's lock.
#ifndef STATECACHE_DAEMON_REPLAY_TRACE_RECORDER_H_
#define STATECACHE_DAEMON_REPLAY_TRACE_RECORDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/pool_call.h"
#include "daemon/core/slot_pool.h"
#include "daemon/replay/trace.h"

namespace statecache::replay {

class TraceRecorder final : public PoolCallObserver {
 public:
  TraceRecorder() = default;
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // OK while every call told so far has its lines and each replayed as the
  // pool gave it.
  // Errors: FAILED_PRECONDITION, naming the first call that could not be
  //   written (and nothing is written after it): the recorder set on a pool
  //   that was not fresh, or twice; a call whose line replays otherwise; a
  //   pin clock call release_pins does not account for, or a tick left
  //   part way; RestoreCheckpoint. Also while nothing was told yet.
  absl::Status status() const;

  // The trace: the config line, then one line per call.
  const std::vector<std::string>& lines() const { return lines_; }
  // One per line, as statecache-replay prints it: what the pool gave.
  const std::vector<std::string>& results() const { return results_; }
  // The calls of lines 2.., as read back from them.
  const std::vector<Call>& calls() const { return calls_; }
  const PoolConfig& config() const { return config_; }
  // The state the trace leaves its replay in (empty before OnStart).
  PoolSnapshot ReplayedDump() const;

  // PoolCallObserver.
  void OnStart(const SlotPool& pool) override;
  void OnCall(const PoolCall& call, const absl::Status& status,
              const PoolValue& value) override;
  void OnReleasePin(int64_t slot, int64_t count,
                    const absl::Status& status) override;
  void OnEndDeferral(int64_t slot, const absl::Status& status) override;
  void OnRestoreCheckpoint(int64_t slot, int64_t hash, bool speculative,
                           const absl::Status& status) override;

 private:
  // A release_pins line written for a tick the pool is still being told of:
  // the deferrals it ended and the pins it handed back, not yet told.
  struct Tick {
    std::vector<int64_t> deferred;
    std::vector<std::pair<int64_t, int64_t>> returned;  // slot order
    size_t next_returned = 0;
  };

  // Writes the line of `call`, checked against what the pool gave.
  void Write(const Call& call, const absl::Status& status, const Value& value);
  // Starts the tick a pin clock call belongs to: release_pins, written.
  void StartTick();
  void EndTickIfDone();
  void Fail(std::string why);
  bool recording() const { return replay_.has_value() && failure_.empty(); }

  PoolConfig config_;
  std::optional<SlotPool> replay_;
  std::optional<Tick> tick_;
  std::vector<std::string> lines_;
  std::vector<std::string> results_;
  std::vector<Call> calls_;
  std::string failure_;
};

}  // namespace statecache::replay

#endif  // STATECACHE_DAEMON_REPLAY_TRACE_RECORDER_H_

// OperationTiming: what a Step's operations did, for the observers that want
// it (metrics): every operation counted by kind, every refusal with its code,
// and a random sample of the operations timed.
//
// Why a sample: reading the cycle clock costs about as much as one of the
// cheap operations (a release, a consume_fork) does in the core, so timing
// every one would make the timing the largest single cost of a pass. One in
// `interval` operations is timed instead, at gaps drawn uniformly from
// [1, 2 * interval - 1]: each operation is as likely to be timed as any other
// whatever the pass's pattern (a fixed stride would time only one kind of a
// pass that alternates kinds), so the latency distribution of every kind is
// estimated without bias. The counts stay exact. Interval 1 times every
// operation.
//
// Thread-compatible: the StateCache uses one under its mutex.
#ifndef STATECACHE_DAEMON_SERVICE_OPERATION_TIMING_H_
#define STATECACHE_DAEMON_SERVICE_OPERATION_TIMING_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "daemon/service/cycle_clock.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {

// Operation kinds are Operation's `kind` field numbers, all below this.
inline constexpr int kOperationKinds = v1::Operation::kSnapshot + 1;

// One Step operation as observers see it: its kind, how it ended and, when
// it was timed, its time inside the core (its result's building included).
struct OperationSample {
  v1::Operation::KindCase kind = v1::Operation::KIND_NOT_SET;
  absl::StatusCode code = absl::StatusCode::kOk;
  double seconds = 0;
};

// What one Step's operations did.
struct StepOperations {
  // Every operation that ran, refused or not, by kind (indexed by
  // v1::Operation::KindCase).
  std::array<int32_t, kOperationKinds> counts{};
  // The operations timed, in order: about one in the interval, at random.
  std::vector<OperationSample> timed;
  // Every operation refused, in order (seconds set only if it was timed).
  std::vector<OperationSample> refused;
};

class OperationTiming {
 public:
  // REQUIRES: interval >= 1; seconds_per_tick > 0 (CycleClock's).
  OperationTiming(int32_t interval, double seconds_per_tick, uint64_t seed);

  // Before an operation: true if it is to be timed, the clock read if so.
  bool Start() {
    if (--until_timed_ != 0) return false;
    if (!chained_) start_ = CycleClock::Now();
    return true;
  }

  // After it. `timed`: what Start returned for it.
  void Finish(bool timed, v1::Operation::KindCase kind,
              const absl::Status& status) {
    ++step_.counts[kind];
    // ok() is inline; code() is not, and most operations succeed.
    const absl::StatusCode code =
        status.ok() ? absl::StatusCode::kOk : status.code();
    double seconds = 0;
    if (timed) {
      const uint64_t now = CycleClock::Now();
      // A thread moved to another core may read a TSC a little behind.
      seconds = static_cast<double>(now > start_ ? now - start_ : 0) *
                seconds_per_tick_;
      step_.timed.push_back(OperationSample{kind, code, seconds});
      until_timed_ = NextGap();
      // The next operation is timed too: its start is this one's end.
      chained_ = until_timed_ == 1;
      start_ = now;
    }
    if (code != absl::StatusCode::kOk) {
      step_.refused.push_back(OperationSample{kind, code, seconds});
    }
  }

  // The Step so far.
  const StepOperations& step() const { return step_; }

  // Forgets the Step (keeping the sampling's place and the lists' room).
  void Clear();

 private:
  // Operations until the next timed one: uniform in [1, 2 * interval - 1].
  uint32_t NextGap();

  const uint64_t gap_span_;  // 2 * interval - 1
  const double seconds_per_tick_;
  uint64_t rng_;
  uint32_t until_timed_;
  uint64_t start_ = 0;
  // start_ is already the next operation's start (the operation before it
  // in this Step was timed and ended there).
  bool chained_ = false;
  StepOperations step_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_OPERATION_TIMING_H_

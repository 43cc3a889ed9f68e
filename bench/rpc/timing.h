// How the RPC benchmarks time a call: one kind of round trip measured call
// by call, alone or interleaved with Pings, and the medians they print.
#ifndef STATECACHE_BENCH_RPC_TIMING_H_
#define STATECACHE_BENCH_RPC_TIMING_H_

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace statecache::bench {

using Clock = std::chrono::steady_clock;

// Microseconds from t0 to now.
double MicrosSince(Clock::time_point t0);

struct Latency {
  double p50_us = 0;
  double p99_us = 0;
};

// p50 and p99 of `us` (sorted in place). REQUIRES: us non-empty.
Latency Summarise(std::vector<double>& us);
// REQUIRES: v non-empty.
double Median(std::vector<double> v);

// One kind of round trip, measured call by call. Prepare() is what the
// client does before the call (build the pass), off the clock; Call() is
// the timed call. Construction sets up (attach, fill the running batch) and
// destruction tears down, both untimed.
class RoundTrip {
 public:
  virtual ~RoundTrip() = default;
  virtual void Prepare() {}
  virtual void Call() = 0;
};

// n calls, one after another. With a `gap`, each call waits until that long
// has passed since the last returned (spinning, as a scheduler's thread does
// while its forward runs): what a call costs once the daemon's side has gone
// idle, as it has between a scheduler's passes.
Latency Measure(RoundTrip& trip, int n, std::chrono::microseconds gap = {});

// n calls of `trip` interleaved with n of `ping` in blocks of 8 of each, so
// that both are timed at the same moments of the machine and their ratio
// does not move with the VM's drift (its speed changes within minutes). A
// block's first call follows the other kind's last, so it is made but not
// counted: each counted call follows one of its own kind, as in a loop of its
// own. `gap` is Measure's, for every call. Returns {trip, ping}.
std::pair<Latency, Latency> MeasurePaired(RoundTrip& trip, RoundTrip& ping,
                                          int n,
                                          std::chrono::microseconds gap = {});

// One row of a table of MeasurePaired runs ({row, its Ping} per run): the
// medians over the runs of the row's p50, its Ping's, their difference and
// ratio, and of `last`, the table's own column.
void PrintPairedRow(
    const std::string& name,
    const std::vector<std::pair<Latency, Latency>>& runs,
    const std::function<double(const Latency&, const Latency&)>& last);

}  // namespace statecache::bench

#endif  // STATECACHE_BENCH_RPC_TIMING_H_

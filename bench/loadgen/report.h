// What a loadgen run reports: each target's RunResult with the daemon's
// counters before and after it, as an aligned table for people or one JSON
// object (documented in bench/loadgen/README.md).
//
// Derived figures: hit ratio = tokens resumed / tokens asked for (the
// KV-side prefix hits); saved share = tokens resumed / prompt tokens;
// checkpoint fates = GetStats after - before; step latency p50/p99 =
// nearest-rank percentiles of the timed Steps; operations/s = operations /
// the time spent in Steps.
//
// Thread safety: pure functions.
#ifndef STATECACHE_BENCH_LOADGEN_REPORT_H_
#define STATECACHE_BENCH_LOADGEN_REPORT_H_

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "bench/loadgen/scheduler.h"
#include "bench/loadgen/workload.h"
#include "client/statecache_client.h"
#include "nlohmann/json.hpp"

namespace statecache::loadgen {

// One target's run.
struct TargetRun {
  std::string name = {};  // "daemon" or "in_process"
  RunResult run = {};
  DaemonStats before = {};
  DaemonStats after = {};
};

struct Report {
  std::string workload_path;
  const Workload* workload = nullptr;
  SchedulerOptions options;
  PoolConfig pool;
  std::string address;  // empty without a daemon run
  std::vector<TargetRun> runs;
};

// Nearest-rank percentile (q in [0, 1]) of `values`, in the same unit; 0
// for none.
double Percentile(absl::Span<const double> values, double q);

nlohmann::json ReportJson(const Report& report);
void PrintTable(const Report& report, std::FILE* out);

// Whether the runs agree (trivially true with fewer than two): the same
// tokens resumed and asked for, and the same digest of every answer.
bool SameHitRatio(const Report& report);
bool SameDecisions(const Report& report);

}  // namespace statecache::loadgen

#endif  // STATECACHE_BENCH_LOADGEN_REPORT_H_

// The daemon's core in the benchmark's own process: the same passes
// through StateCache::Step, without gRPC, protobuf parsing or the socket.
#ifndef STATECACHE_BENCH_RPC_IN_PROCESS_H_
#define STATECACHE_BENCH_RPC_IN_PROCESS_H_

#include <cstdint>
#include <memory>

#include "bench/rpc/passes.h"
#include "bench/rpc/timing.h"
#include "daemon/core/pool_call.h"
#include "daemon/metrics/metrics.h"
#include "daemon/service/state_cache.h"

namespace statecache::bench {

// A StateCache as the daemon runs it by default (metrics on, one operation
// in about `timing_interval` timed: statecached's
// --operation_timing_interval), with one attached session whose scheduler
// (seed 7, passes of `ops` operations) has filled its running batch with
// 50 list passes, untimed. `pool_observer` (not owned, may be null) is told
// of every pool call from the first (StateCacheOptions::pool_observer).
struct InProcessCache {
  InProcessCache(int ops, int32_t timing_interval,
                 PoolCallObserver* pool_observer = nullptr);

  std::unique_ptr<StateCache> cache;
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<Scheduler> sched;
};

// `n` passes of `ops` operations through an InProcessCache's
// StateCache::Step, p50 and p99 of one. With `wire`, each pass also makes
// the trip protobuf makes between the processes: the request serialised and
// parsed (onto the call's arena), the response serialised and parsed back;
// what is left between this and a unary Step is gRPC and the socket.
// `packed`: the passes in columns.
Latency InProcessStepLatency(int ops, int n, int32_t timing_interval,
                             bool wire = false, bool packed = false);

}  // namespace statecache::bench

#endif  // STATECACHE_BENCH_RPC_IN_PROCESS_H_

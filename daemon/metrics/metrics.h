// Metrics: the daemon's Prometheus metrics (prometheus-cpp), served on their
// own listen address.
//
// Every family is built once, at start, with prometheus-cpp's builders
// into one registry, and its children (one per label set) are kept by
// pointer; a scrape (or Render) refreshes values and serialises the
// registry, and builds no family, help text or label set. Two kinds of
// series:
//   * what StateCache already counts (the reference's checkpoint fates,
//     occupancy, sessions, resumes, lease expiries, evictions) is read once
//     per scrape through one GetStats call, which Set()s the held gauges and
//     Increment()s the held counters by what the totals grew since the last
//     scrape: one source of truth, and nothing on the hot path;
//   * what only the edges see (RPC and Step-operation latencies and refusals,
//     resizes, copies) is recorded into the held children directly, so
//     recording is an array index and an atomic add: no label set is built
//     and nothing is allocated per call. (The Step operations' counts and
//     sampled latencies are counted into plain arrays per Step and moved
//     into their held series at scrape; see OperationLatencies.)
//
// How to read them is in each family's help text (and docs/operators.md).
//
// Thread safety: thread-safe.
#ifndef STATECACHE_DAEMON_METRICS_METRICS_H_
#define STATECACHE_DAEMON_METRICS_METRICS_H_

#include <array>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/grpc/rpc_observer.h"
#include "daemon/service/state_cache.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace statecache {

class Metrics final : public StateCacheObserver, public RpcObserver {
 public:
  struct Options {
    std::string version;
    std::string backend = "host";
    absl::Time start_time = absl::Now();
  };
  // `cache` is not owned and must outlive this; register this as its
  // observer (AddObserver) and as the gRPC adapters' RpcObserver.
  Metrics(StateCache* cache, Options options);
  ~Metrics() override;

  // Serves /metrics on `address` (host:port; port 0 picks one).
  // Errors: UNAVAILABLE when the address cannot be bound.
  absl::Status Serve(const std::string& address);
  // Bound ports (for tests using port 0); empty when not serving.
  std::vector<int> ListeningPorts() const;

  // The exposition text, as a scrape would return it (tests, tools).
  std::string Render() const;

  // Tests only: the registry every family is built in, once (a family built
  // again at scrape would not be in it, or would add to it).
  prometheus::Registry& registry_for_testing() const { return *registry_; }

  // RpcObserver.
  void OnRpc(RpcMethod method, absl::StatusCode code, double seconds) override;
  // StateCacheObserver (called with the core's mutex held: cheap only).
  void OnOperations(const StepOperations& step) override;
  bool wants_operations() const override { return true; }
  void OnResize(int64_t from_slots, int64_t to_slots) override;

  void OnCopy(CopyReason reason, int64_t bytes, double seconds) override;
  void OnStateBytes(int64_t bytes) override;

 private:
  class Scrape;
  class OperationLatencies;
  struct StatsSeries;
  static constexpr int kOps = kOperationKinds;  // 1..15 (+ unset)
  static constexpr int kCodes = 17;             // absl::StatusCode 0..16

  // What a scrape does before the registry is serialised: the GetStats
  // series from one GetStats call, and the Step operations' latencies
  // counted since the last scrape into their histograms.
  void Refresh() const;

  StateCache* const cache_;
  std::shared_ptr<prometheus::Registry> registry_;
  // Registered with the exposer: Refresh(), then the registry's families.
  std::shared_ptr<Scrape> scrape_;
  std::unique_ptr<prometheus::Exposer> exposer_;

  // Refresh's counter deltas are read and applied under this, so that two
  // scrapes at once do not both add the same growth.
  mutable absl::Mutex refresh_mu_;
  std::unique_ptr<StatsSeries> stats_;

  std::array<prometheus::Histogram*, static_cast<int>(RpcMethod::kCount)>
      rpc_seconds_{};
  std::array<std::array<prometheus::Counter*, kCodes>,
             static_cast<int>(RpcMethod::kCount)>
      rpc_refusals_{};
  // statecache_step_operation_duration_seconds and
  // statecache_step_operations_total: plain counts under one lock per Step,
  // moved into the held histograms and counters at scrape.
  std::unique_ptr<OperationLatencies> op_seconds_;
  std::array<prometheus::Histogram*, kOps> op_histograms_{};
  std::array<prometheus::Counter*, kOps> op_counts_{};
  std::array<std::array<prometheus::Counter*, kCodes>, kOps> op_refusals_{};
  prometheus::Counter* resizes_grow_ = nullptr;
  prometheus::Counter* resizes_shrink_ = nullptr;
  std::array<prometheus::Counter*, static_cast<int>(CopyReason::kCount)>
      copy_bytes_{};
  std::array<prometheus::Counter*, static_cast<int>(CopyReason::kCount)>
      copy_seconds_{};
  prometheus::Gauge* state_bytes_ = nullptr;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_METRICS_METRICS_H_

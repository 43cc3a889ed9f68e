// InProcessTarget: runs passes on a StateCache (the daemon's core) built in
// this process with the pool size and transfer a daemon's Attach reported,
// so the same pass sequence meets the same decisions without RPC. Each pass
// is sent packed, as the client library sends it to a daemon, and its
// results are read back by the library's own code (client/from_proto.h);
// only StateCache::Step is timed (building the request and reading the
// results back into StepResults are not), so the step latency is the core's
// own.
//
// With `metrics`, the core is observed by the daemon's Prometheus metrics
// (not served), as a daemon with --metrics_address set (its default) runs.
// The lease is an hour: nothing renews it, and it must not lapse mid-run.
//
// Thread safety: thread-compatible (one simulation drives it).
#ifndef STATECACHE_BENCH_LOADGEN_IN_PROCESS_TARGET_H_
#define STATECACHE_BENCH_LOADGEN_IN_PROCESS_TARGET_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "bench/loadgen/pass.h"
#include "client/statecache_client.h"
#include "daemon/metrics/metrics.h"
#include "daemon/service/state_cache.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache::loadgen {

class InProcessTarget final : public StepTarget {
 public:
  // Errors: INVALID_ARGUMENT for a pool or transfer StateCache refuses (an
  // unknown transfer kind, num_slots < 1, ...).
  static absl::StatusOr<std::unique_ptr<InProcessTarget>> Create(
      const ModelIdentity& identity, int64_t num_slots,
      const TransferConfig& transfer, int32_t max_operations_per_step,
      bool metrics, bool advise_placement = false);
  ~InProcessTarget() override;

  absl::StatusOr<StepResults> Run(const Pass& pass, double* seconds) override;
  absl::StatusOr<DaemonStats> Stats() override;

 private:
  InProcessTarget() = default;

  std::unique_ptr<StateCache> cache_;
  std::unique_ptr<Metrics> metrics_;
  std::string session_id_;
};

// The list form of `op` (shared with tests).
void ToProto(const PassOp& op, v1::Operation* out);

}  // namespace statecache::loadgen

#endif  // STATECACHE_BENCH_LOADGEN_IN_PROCESS_TARGET_H_

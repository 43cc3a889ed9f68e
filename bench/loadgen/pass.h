// A scheduler pass as the simulation builds it, and the two things that run
// one: the daemon over gRPC (daemon_target.h) and the daemon's core in this
// process (in_process_target.h).
//
// A Pass is the ordered operations of one Step, in the kinds and with the
// arguments of statecache.proto; a StepTarget runs it as one Step and
// returns the client library's StepResults (one entry per operation, in
// order), so the simulation reads both targets' answers the same way.
//
// Thread safety: Pass is a plain value; a StepTarget is used by one thread.
#ifndef STATECACHE_BENCH_LOADGEN_PASS_H_
#define STATECACHE_BENCH_LOADGEN_PASS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/statecache_client.h"

namespace statecache::loadgen {

enum class OpKind {
  kBeginPass,
  kAdmit,
  kResumableHit,
  kReserve,
  kPublish,
  kCheckpoint,
  kConsumeFork,
  kRelease,
  kUnindex,
  kClearIndex,
};

// One operation; only the fields of its kind are read. (Every member has
// an initializer, so designated initializers may omit any.)
struct PassOp {
  OpKind kind = OpKind::kBeginPass;
  std::string request_id = {};
  // admit, resumable_hit: the prompt. The block hashes are borrowed (from
  // the workload, which outlives every pass). anchor_pos is also
  // checkpoint's (0: the request's own anchor).
  int32_t width = 1;
  int64_t num_tokens = 0;
  int64_t anchor_pos = 0;
  absl::Span<const int64_t> block_hashes = {};
  int32_t kv_hit_blocks = 0;
  // reserve.
  std::vector<MidstepPosition> positions = {};
  // publish.
  bool keep_all = false;
  // checkpoint.
  int64_t boundary_blocks = 0;
  int64_t hash = 0;
  // unindex (owned).
  std::vector<int64_t> hashes = {};
};

struct Pass {
  std::vector<PassOp> ops;
};

class StepTarget {
 public:
  virtual ~StepTarget() = default;
  // Runs `pass` as one Step. `seconds` gets the wall-clock time of the Step
  // call alone (not building the request or reading the results where the
  // target can tell them apart). Errors: the Step was refused whole or the
  // call failed (nothing in the pass is known to have run).
  virtual absl::StatusOr<StepResults> Run(const Pass& pass,
                                          double* seconds) = 0;
  // The daemon's counters (GetStats).
  virtual absl::StatusOr<DaemonStats> Stats() = 0;
};

}  // namespace statecache::loadgen

#endif  // STATECACHE_BENCH_LOADGEN_PASS_H_

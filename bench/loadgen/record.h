// Recorded passes: every Step a run sends, written as JSON Lines, and read
// back to be sent again (by `statecache-loadgen --replay`, or by
// bench/e2e/replay.py through the Python package), so that two clients can
// be timed on exactly the same pass sequence.
//
// The format ("statecache-passes", version 1). Line 1 is the header:
//
//   {"format":"statecache-passes","version":1,"source":"statecache-loadgen",
//    "identity":{"model_id":"","hash_block_size":64,"hash_namespace":"",
//                "num_spec":0},
//    "pool":{"num_slots":40,"transfer":{"kind":"fork","fork_tokens":1,
//            "readable_midstep":true},"max_operations_per_step":4096},
//    "run":{...}}                      (free-form: what produced the file)
//
// Every other line is one Step, in the order sent:
//
//   {"pass":0,"ops":[{"begin_pass":{}},
//                    {"admit":{"request_id":"s0.t0","width":1,...}}],
//    "codes":[0,0],
//    "results":[{"begin_pass":{"moves":[],"pins_released":0}},
//               {"admit":{"slots":[3],"fork_src":-1,"blocks_resumed":0,
//                         "adopted":false}}],
//    "us":271.3}
//
// `ops` are the operations in order, each an object with one key, the
// proto's Operation field name of its kind, whose value has the proto
// message's field names (proto/statecache/v1/statecache.proto); every field
// the recorder knows is written, defaults included. The rest is optional:
// `codes` are the result codes the recording run got (0 or a
// google.rpc.Code); `results` the results, in the same form (the key is
// OperationResult's field name, the fields the result message's), null for
// a refused operation; `us` the recording client's wall-clock time of the
// Step call.
//
// Sent again to a fresh daemon of the same configuration (the pool in the
// header), the same passes meet the same decisions, so the codes and the
// results must match.
//
// Thread safety: RecordingTarget is thread-compatible, like the target it
// wraps; the functions are pure.
#ifndef STATECACHE_BENCH_LOADGEN_RECORD_H_
#define STATECACHE_BENCH_LOADGEN_RECORD_H_

#include <cstdint>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/loadgen/pass.h"
#include "bench/loadgen/scheduler.h"
#include "client/statecache_client.h"
#include "nlohmann/json.hpp"

namespace statecache::loadgen {

// The header line's object (`run` as given).
nlohmann::json RecordHeader(const ModelIdentity& identity,
                            const PoolConfig& pool, nlohmann::json run);

// One operation in the record's form ({"admit": {...}}).
nlohmann::json OpJson(const PassOp& op);

// Writes each pass `inner` runs, with its result codes and time, to `out`
// (which it does not own), after `header`. Writing happens after the Step
// call returns, off its clock.
class RecordingTarget final : public StepTarget {
 public:
  RecordingTarget(StepTarget& inner, std::FILE* out,
                  const nlohmann::json& header);

  absl::StatusOr<StepResults> Run(const Pass& pass, double* seconds) override;
  absl::StatusOr<DaemonStats> Stats() override { return inner_.Stats(); }
  // Writes one pass's line as Run does (for a caller that ran it itself
  // and writes later, e.g. after a timed sequence).
  void Write(const Pass& pass, const absl::StatusOr<StepResults>& results,
             double seconds);

  int64_t passes() const { return passes_; }
  // False once a write failed.
  bool ok() const { return ok_; }

 private:
  void WriteLine(const std::string& line);

  StepTarget& inner_;
  std::FILE* const out_;
  int64_t passes_ = 0;
  bool ok_ = true;
};

// A record file read back.
struct RecordedPasses {
  nlohmann::json header;
  ModelIdentity identity;
  PoolConfig pool;
  std::vector<Pass> passes;
  // Per pass: the recorded codes, or empty when the line had none.
  std::vector<std::vector<int32_t>> codes;
  // Per pass: the recorded results (an array), or null when it had none.
  std::vector<nlohmann::json> results;
  // What the passes' block_hashes spans point into.
  std::deque<std::vector<int64_t>> hash_storage;
};

// Errors: NOT_FOUND (no such file); INVALID_ARGUMENT naming the line and
// the problem (not JSON, another format or version, an operation kind the
// loadgen does not send, a field of the wrong type, codes of another count).
absl::StatusOr<RecordedPasses> ReadRecordedPasses(const std::string& path);

// The result codes of `results` (0 for an applied operation).
std::vector<int32_t> ResultCodes(const StepResults& results);
// One result in the record's form; null for a refused operation.
nlohmann::json ResultJson(const absl::StatusOr<OperationResult>& result);
// Every result of `results`, in order.
nlohmann::json ResultsJson(const StepResults& results);

}  // namespace statecache::loadgen

#endif  // STATECACHE_BENCH_LOADGEN_RECORD_H_

// The Step operations: one handler per kind, over a session and the pool's
// verbs (daemon/core/slot_memory.h), dispatched from one kind -> handler
// table that serves the list form and the packed form alike, so both forms
// make the same decisions by construction.
//
// Each handler returns the operation's status and fills its result; a
// refusal leaves every structure as it was (its result is then discarded).
//
// Thread safety: thread-compatible; StateCache runs a Step's operations
// under its mutex, with one OperationScratch per StateCache.
#ifndef STATECACHE_DAEMON_SERVICE_OPERATIONS_H_
#define STATECACHE_DAEMON_SERVICE_OPERATIONS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "daemon/core/branch_points.h"
#include "daemon/core/slot_memory.h"
#include "daemon/service/resize.h"
#include "daemon/service/session.h"
#include "daemon/service/sessions.h"
#include "proto/packed_codec.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {

// The length of the operation's hash list (admit's and resumable_hit's
// block_hashes, reserve's positions, unindex's hashes); 0 for the others.
int64_t HashListLength(const v1::Operation& operation);

// The counters the service keeps (resumes, lease expiries, evictions) are
// kept in the GetStats message itself, so their list lives only in the
// .proto: GetStats starts its response from them.
using ServiceCounters = v1::GetStatsResponse;

// Told of each resumed admission (kv_hit_blocks > 0). Called under the
// core's mutex: must be cheap.
class ResumeObserver {
 public:
  virtual ~ResumeObserver() = default;
  virtual void OnResume(ResumeOutcome outcome, int64_t blocks_wanted,
                        int64_t blocks_resumed) {}
};

// What an operation runs against.
struct OperationContext {
  SlotMemory& memory;
  Session& session;
  ServiceCounters& counters;
  PinScratch& pins;
  uint64_t& next_request_seqno;
  const std::vector<ResumeObserver*>& resume_observers;
  bool draining = false;
  int64_t max_slots_per_session = 0;  // 0: no quota
  // The shrink in progress, or null: begin_pass moves the session's own
  // live slots out of its way (PendingShrink::Advance says why there).
  PendingShrink* shrink = nullptr;
  absl::Span<ResizeObserver* const> resize_observers;
  // The daemon's branch-point table, or null when it gives no placement
  // advice. Read and fed only by advised sessions' admissions.
  BranchPoints* branch_points = nullptr;
};

// One message of each operation kind and its result, which a packed Step's
// operations are read into in turn (reused: no allocation per operation).
class OperationScratch;
struct OperationScratchDeleter {
  void operator()(OperationScratch* scratch) const;
};
using OperationScratchPtr =
    std::unique_ptr<OperationScratch, OperationScratchDeleter>;
OperationScratchPtr NewOperationScratch();

// Runs one list-form operation.
// Errors: INVALID_ARGUMENT no kind set; else the operation's own refusal
//   (the .proto lists each kind's).
absl::Status RunOperation(OperationContext& context, const v1::Operation& op,
                          v1::OperationResult* result);

// Runs the next packed operation, of kind `kind`: read into the scratch
// message of its kind, run, its result written packed (or its refusal).
// REQUIRES: the pass passed ValidatePackedOperations; `kind` is the next
// operation's.
// Errors: the operation's own refusal (the .proto lists each kind's);
//   INTERNAL for a kind no handler serves (ValidatePackedOperations lets
//   none through).
absl::Status RunPackedOperation(OperationContext& context,
                                v1::Operation::KindCase kind,
                                PackedOperationReader& reader,
                                PackedResultWriter& writer,
                                OperationScratch& scratch);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_OPERATIONS_H_

// StateCache: the daemon's core. Sessions, their requests, and the slot pool
// they share, driven by the protocol of proto/statecache/v1/statecache.proto.
//
// The gRPC layer is a thin adapter over this class: every method takes the
// request message, fills the response message and returns an absl::Status
// (mapped to a gRPC status in one place, grpc_status.h). Nothing here knows
// about gRPC, so the whole protocol is unit-tested without an RPC stack.
//
// Each Step operation maps onto the pool exactly as the reference's caller
// (ATOM's scheduler pass) does; with one session, a run of steps makes the
// reference's decisions. With several, each session has its own pin clock
// (begin_pass releases only the pins this session took).
//
// Thread safety: thread-safe. One mutex guards the pool and every session; no
// method blocks on anything but that mutex. Resize completes asynchronously
// through a callback, which runs without the mutex held.
#ifndef STATECACHE_DAEMON_SERVICE_STATE_CACHE_H_
#define STATECACHE_DAEMON_SERVICE_STATE_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/core/slot_pool.h"
#include "daemon/device/device.h"
#include "daemon/service/cycle_clock.h"
#include "daemon/service/session.h"
#include "proto/packed_codec.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {

// Source of time, injectable so lease tests need no sleeping.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  static Clock* Real();
};

// A fresh daemon epoch: ordered by start time, distinct between daemons.
uint64_t NewEpoch(absl::Time now);

struct StateCacheOptions {
  // The identity every Attach must match.
  v1::Identity identity;
  int64_t num_slots = 1024;
  // Upper bound on Resize targets.
  int64_t max_slots = kMaxSlots;
  StateTransfer transfer = StateTransfer::None();
  absl::Duration lease_ttl = absl::Seconds(10);
  int32_t max_operations_per_step = 4096;
  // Changes on every daemon start; 0 = NewEpoch(clock->Now()).
  uint64_t epoch = 0;
  Clock* clock = nullptr;  // nullptr = Clock::Real()
  // The state memory and its copy engine; null = slot decisions only (no
  // bytes: Attach carries no memory, copy/snapshot are refused, relocations
  // are bookkeeping). REQUIRES: device->num_slots() == num_slots.
  std::shared_ptr<Device> device;
};

// Why the daemon copied slot contents.
enum class CopyReason { kRelocation, kCopy, kSnapshot, kCount };

// One Step operation as observers see it: its kind, how it ended and its
// time inside the core (its result's building included).
struct OperationSample {
  v1::Operation::KindCase kind = v1::Operation::KIND_NOT_SET;
  absl::StatusCode code = absl::StatusCode::kOk;
  double seconds = 0;
};

// Observer of core events, for metrics. Calls arrive with the core's mutex
// held: implementations must be cheap and must not call back into StateCache.
class StateCacheObserver {
 public:
  virtual ~StateCacheObserver() = default;
  virtual void OnResume(ResumeOutcome outcome, int64_t blocks_wanted,
                        int64_t blocks_resumed) {}
  virtual void OnSessionEnded(const std::string& session_id,
                              const std::string& client_name, SessionEnd how,
                              int32_t requests_released) {}
  virtual void OnResize(int64_t from_slots, int64_t to_slots) {}
  // A Step's operations ran (refused or not), one sample each, in order.
  // Once per Step rather than per operation, so an observer can aggregate
  // before it touches shared metrics (a 256-operation Step observed one by
  // one cost ~25 us). Called only when some observer wants it
  // (wants_operations).
  virtual void OnOperations(absl::Span<const OperationSample> samples) {}
  virtual bool wants_operations() const { return false; }
  // The copy engine ran one batch.
  virtual void OnCopy(CopyReason reason, int64_t bytes, double seconds) {}
  // The state memory now holds `bytes` (after start and every resize).
  virtual void OnStateBytes(int64_t bytes) {}
};

class StateCache {
 public:
  // REQUIRES: options.num_slots, transfer and identity valid (num_slots in
  // [1, max_slots], hash_block_size >= 1, transfer not copy).
  static absl::StatusOr<std::unique_ptr<StateCache>> Create(
      StateCacheOptions options);
  ~StateCache();

  StateCache(const StateCache&) = delete;
  StateCache& operator=(const StateCache&) = delete;

  uint64_t epoch() const { return epoch_; }

  // Not owned; must outlive this. Added before serving (not thread-safe
  // against calls in flight).
  void AddObserver(StateCacheObserver* observer) {
    observers_.push_back(observer);
    if (observer->wants_operations()) {
      seconds_per_tick_ = CycleClock::SecondsPerTick();  // calibrated once
    }
  }

  // ----------------------------------------------------------- scheduler

  // Errors: FAILED_PRECONDITION (identity mismatch, message names the
  // field), INVALID_ARGUMENT (client_name too long), UNAVAILABLE (draining).
  absl::Status Attach(const v1::AttachRequest& request,
                      v1::AttachResponse* response) ABSL_LOCKS_EXCLUDED(mu_);
  // Errors: NOT_FOUND (unknown or expired session).
  absl::Status Detach(const v1::DetachRequest& request,
                      v1::DetachResponse* response) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status KeepAlive(const v1::KeepAliveRequest& request,
                         v1::KeepAliveResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the step's operations, given as a list (`operations`, results in
  // response->results) or packed (`packed`, results in
  // response->packed_results): the same Apply for either. Per-operation
  // refusals go into the results; the returned status is non-OK only when
  // the whole step is refused, before anything ran (NOT_FOUND session;
  // INVALID_ARGUMENT too many operations, an empty operation, both forms, or
  // malformed packed columns).
  absl::Status Step(const v1::StepRequest& request, v1::StepResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ----------------------------------------------------------- operator

  void GetStats(v1::GetStatsResponse* response) ABSL_LOCKS_EXCLUDED(mu_);
  void ListSessions(v1::ListSessionsResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Errors: NOT_FOUND.
  absl::Status EvictSession(const v1::EvictSessionRequest& request,
                            v1::EvictSessionResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Starts a resize; `done` runs exactly once (possibly before Resize
  // returns, possibly from a later Step, Tick or ~StateCache), without the
  // mutex held, with the outcome. Errors (through `done`): INVALID_ARGUMENT,
  // ABORTED (another resize in progress), DEADLINE_EXCEEDED, CANCELLED (the
  // daemon is shutting down).
  using ResizeDone =
      std::function<void(absl::Status, const v1::ResizeResponse&)>;
  void Resize(const v1::ResizeRequest& request, ResizeDone done)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ----------------------------------------------------------- housekeeping

  // Expires lapsed leases and retries/expires a pending resize. Called by
  // the daemon's maintenance thread (and tests, with a fake clock).
  void Tick() ABSL_LOCKS_EXCLUDED(mu_);
  // When Tick next has something to do (a lease lapsing or a resize
  // deadline), so the maintenance thread can sleep until then.
  absl::Time NextDeadline() const ABSL_LOCKS_EXCLUDED(mu_);
  // Stops admitting (Attach UNAVAILABLE, admit FAILED_PRECONDITION) when on.
  void SetDraining(bool draining) ABSL_LOCKS_EXCLUDED(mu_);
  // Drain RPC: sets draining and reports it with the requests still held.
  void Drain(const v1::DrainRequest& request, v1::DrainResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);

  // For tests: the pool's observable state and invariants.
  PoolSnapshot DumpPool() const ABSL_LOCKS_EXCLUDED(mu_);
  // For tests and fuzzers: every structure a refused call must leave as it
  // was, as one text to compare before and after: the pool's whole dump (LRU
  // order and hash filings included) and each session's requests (slots,
  // fork source, reservations, tokens, anchor), pins (count, deferral,
  // readers) and pending moves, sessions and requests in id order. Leases
  // (renewed by any call) are left out. O(pool + requests).
  std::string DebugDump() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckInvariants() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct PendingResize;
  explicit StateCache(StateCacheOptions options, SlotPool pool);

  // One operation from a list-form Step: dispatches on its kind to Apply.
  absl::Status RunOperation(Session& session, const v1::Operation& op,
                            v1::OperationResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next operation of a packed Step, of kind `kind`: read into the reused
  // message of its kind, Apply, result written packed.
  absl::Status RunPackedOperation(Session& session,
                                  v1::Operation::KindCase kind,
                                  PackedOperationReader& reader,
                                  PackedResultWriter& writer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  template <typename Op, typename Result>
  absl::Status ApplyPacked(Session& session, PackedOperationReader& reader,
                           Op& op, Result& result, PackedResultWriter& writer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The operations, one overload per kind; both forms of Step run them. Each
  // returns the operation's status and fills its result; a refusal leaves
  // every structure unchanged (its result is then discarded). A kind that
  // names a request gets its id as `request_id` (the list form passes
  // op.request_id(); the packed form a view into its column, leaving the
  // message's empty, so no id is copied).
  absl::Status Apply(Session& session, const v1::BeginPass& op,
                     v1::BeginPassResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, absl::string_view request_id,
                     const v1::Admit& op, v1::AdmitResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, const v1::ResumableHit& op,
                     v1::ResumableHitResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, const v1::Lookup& op,
                     v1::LookupResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, absl::string_view request_id,
                     const v1::Reserve& op, v1::ReserveResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, absl::string_view request_id,
                     const v1::Publish& op, v1::PublishResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, absl::string_view request_id,
                     const v1::Cancel& op, v1::CancelResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, absl::string_view request_id,
                     const v1::Checkpoint& op, v1::CheckpointResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, absl::string_view request_id,
                     const v1::ConsumeFork& op, v1::ConsumeForkResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, absl::string_view request_id,
                     const v1::AdoptForkSource& op,
                     v1::AdoptForkSourceResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, absl::string_view request_id,
                     const v1::Release& op, v1::ReleaseResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, const v1::Unindex& op,
                     v1::UnindexResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, const v1::ClearIndex& op,
                     v1::ClearIndexResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, absl::string_view request_id,
                     const v1::Copy& op, v1::CopyResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Apply(Session& session, absl::string_view request_id,
                     const v1::Snapshot& op, v1::SnapshotResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs one batch on the device, reporting it to the observers.
  absl::StatusOr<uint64_t> RunCopy(
      absl::Span<const std::pair<int64_t, int64_t>> pairs, CopyReason reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillMemory(v1::StateMemory* memory) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Releases every request of the session and every pin its clock holds,
  // then forgets it.
  int32_t EndSession(std::string session_id, SessionEnd how)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseRequest(Session& session, Request& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops `count` of this session's pins on `slot`.
  void DropSessionPins(Session& session, int64_t slot, int32_t count)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Session*> FindSession(const std::string& session_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Request*> FindRequest(Session& session,
                                       absl::string_view request_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Sequence SequenceOf(const Request& request) const;
  void SetOwner(int64_t slot, Session* session, Request* request, int32_t index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ClearOwner(int64_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Shrinks towards the pending target; returns true when reached.
  bool AdvanceResize() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the finished resize's callback out for running after unlock.
  std::function<void()> FinishResize(absl::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::function<void()>> TickLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StateCacheOptions options_;
  Device* const device_;  // options_.device, or null
  Clock* const clock_;
  const uint64_t epoch_;
  const absl::Time start_time_;
  std::vector<StateCacheObserver*> observers_;
  // CycleClock's seconds per tick once some observer wants operation
  // timings; 0 while none does (then a Step reads no clock).
  double seconds_per_tick_ = 0;
  // The current Step's samples (reused: no allocation per Step).
  std::vector<OperationSample> samples_ ABSL_GUARDED_BY(mu_);
  // One message of each operation kind and its result, which a packed
  // Step's operations are read into in turn (reused: no allocation).
  struct PackedScratch;
  std::unique_ptr<PackedScratch> packed_scratch_ ABSL_GUARDED_BY(mu_);
  // A session's pins in slot order, for its clock (reused).
  std::vector<std::pair<int64_t, SessionPin*>> sorted_pins_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int64_t, SessionPin*>> sort_scratch_
      ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex mu_;
  SlotPool pool_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_
      ABSL_GUARDED_BY(mu_);
  // Who holds each live slot (indexed by slot), for relocations.
  std::vector<SlotOwner> owners_ ABSL_GUARDED_BY(mu_);
  // Recently ended sessions, so a late call is told why it is refused.
  absl::flat_hash_map<std::string, SessionEnd> ended_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> ended_order_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<PendingResize> resize_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  StateCacheCounters counters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_request_seqno_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_STATE_CACHE_H_

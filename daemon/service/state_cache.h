// StateCache: the daemon's service. Sessions, their requests, and the slot
// memory they share, driven by the protocol of
// proto/statecache/v1/statecache.proto.
//
// The gRPC layer is a thin adapter over this class: every method takes the
// request message, fills the response message and returns an absl::Status
// (mapped to a gRPC status in one place, proto/status_mapping.h). Nothing here
// knows about gRPC, so the whole protocol is unit-tested without an RPC stack.
//
// The decisions are the pool's verbs (daemon/core/slot_memory.h); this class
// adds sessions, leases and pin clocks (sessions.h), runs a Step's
// operations through the one operation table (operations.h), and drives
// resizes (resize.h). With one session, a run of steps makes the reference's
// decisions; with several, each session has its own pin clock (begin_pass
// releases only the pins this session took).
//
// Thread safety: thread-safe. One mutex guards the pool and every session; no
// method blocks on anything but that mutex. Resize completes asynchronously
// through a callback, which runs without the mutex held.
#ifndef STATECACHE_DAEMON_SERVICE_STATE_CACHE_H_
#define STATECACHE_DAEMON_SERVICE_STATE_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/core/slot_memory.h"
#include "daemon/device/device.h"
#include "daemon/service/access_policy.h"
#include "daemon/service/cycle_clock.h"
#include "daemon/service/fair_turns.h"
#include "daemon/service/operation_timing.h"
#include "daemon/service/operations.h"
#include "daemon/service/peer.h"
#include "daemon/service/resize.h"
#include "daemon/service/session.h"
#include "daemon/service/sessions.h"
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
  // Hashes one Step may carry over all its operations (see
  // AttachResponse.max_hashes_per_step): bounds one Step's time under the
  // lock, so one session's heavy legal Steps delay another's only so much.
  int64_t max_hashes_per_step = 65536;
  // Steps take turns round robin between sessions (fair_turns.h), so one
  // session's many Steps in flight wait behind each other, not in front of
  // another session's; false lets whoever takes the mutex first go first.
  bool fair_share = true;
  // When an observer wants operation timings: time about one Step operation
  // in this many, chosen at random (operation_timing.h); 1 times every one.
  // A clock read costs about what a cheap operation does. Counts and
  // refusals are exact either way. At least 1 (Create refuses less).
  int32_t operation_timing_interval = 16;
  // Room for the host tier's checkpoint images (SlotMemory's host tier);
  // 0 = off. Needs a device when > 0 (Create refuses it without one).
  uint64_t host_tier_bytes = 0;
  // Slots one session may keep from the others at once: its requests' slots
  // and midstep reservations and the fork sources its pin clock holds (an
  // admit, reserve or checkpoint past it is RESOURCE_EXHAUSTED). 0 = no
  // quota.
  int64_t max_slots_per_session = 0;
  // Sessions attached at once; 0 = no cap.
  int32_t max_sessions = 0;
  // Give placement advice to sessions that ask (AttachRequest's
  // advise_placement), remembering the block hashes of about the last
  // `branch_point_blocks` distinct prompt blocks they admitted
  // (BranchPoints). Off: a session that asks is told placement_advised
  // false, and every decision is the reference pool's.
  bool advise_placement = true;
  // Which checkpoint a shortage spends (SlotPool's Eviction); kLru is the
  // reference's. Not with a pool_observer (Create refuses it).
  Eviction eviction = Eviction::kLru;
  int64_t branch_point_blocks = int64_t{1} << 20;
  // Advise a ladder of guesses this many blocks apart while the pool has
  // vacant slots for it (AdmitResult.ladder_blocks); 0: never.
  int64_t advice_ladder_blocks = 16;
  // How long the slots of a session that lapsed or was evicted are fenced
  // before anyone else gets them (its hung engine's forward may still be
  // writing them); zero releases them at once, as a detach does.
  absl::Duration quarantine = absl::ZeroDuration();
  // Who may attach and who may make the operator calls; the default lets
  // everyone (in-process callers are always let).
  AccessPolicy access;
  // Changes on every daemon start; 0 = NewEpoch(clock->Now()).
  uint64_t epoch = 0;
  Clock* clock = nullptr;  // nullptr = Clock::Real()
  // Told of every call made on the pool, from the first
  // (SlotMemory::SetPoolObserver): for recording the core's pool calls as
  // a trace (daemon/replay/trace_recorder.h). Not owned; must outlive the
  // cache. Null (the daemon's) costs each pool call one test of a pointer.
  PoolCallObserver* pool_observer = nullptr;
  // The state memory and its copy engine; null = slot decisions only (no
  // bytes: Attach carries no memory, copy/snapshot are refused, relocations
  // are bookkeeping). Its num_slots() must be num_slots (Create refuses
  // another).
  std::shared_ptr<Device> device;
};

// Observer of core events, for metrics. Calls arrive with the core's mutex
// held: implementations must be cheap and must not call back into StateCache.
class StateCacheObserver : public ResumeObserver,
                           public CopyObserver,
                           public ResizeObserver {
 public:
  virtual void OnSessionEnded(const std::string& session_id,
                              const std::string& client_name, SessionEnd how,
                              int32_t requests_released) {}
  // A Step's operations ran (refused or not): their counts by kind, their
  // refusals, and the sample of them that was timed (see operation_timing.h
  // and StateCacheOptions::operation_timing_interval). Once per Step rather
  // than per operation, so an observer can aggregate before it touches
  // shared metrics. Called only when some observer wants it
  // (wants_operations).
  virtual void OnOperations(const StepOperations& step) {}
  virtual bool wants_operations() const { return false; }
};

class StateCache {
 public:
  // Errors: INVALID_ARGUMENT num_slots outside [1, max_slots], max_slots
  //   above kMaxSlots, a lease_ttl not positive, max_hashes_per_step,
  //   max_operations_per_step or operation_timing_interval below 1, a
  //   negative quarantine, max_slots_per_session, max_sessions or
  //   identity.num_spec, identity.hash_block_size below 1, a copy transfer,
  //   or a device whose num_slots() is not num_slots; the host tier's
  //   (SlotMemory::ResizeHostTier: FAILED_PRECONDITION host_tier_bytes
  //   without a device or under a replay transfer, INVALID_ARGUMENT room for
  //   no slot, RESOURCE_EXHAUSTED or INTERNAL the memory cannot be had).
  static absl::StatusOr<std::unique_ptr<StateCache>> Create(
      StateCacheOptions options);
  // The checks of `options`' own fields that Create makes first (all but
  // the device's, the transfer's and the host tier's), for a caller that
  // wants them answered before it allocates the state memory.
  // Errors: INVALID_ARGUMENT as Create's, naming the first field out of
  // range.
  static absl::Status ValidateOptions(const StateCacheOptions& options);
  ~StateCache();

  StateCache(const StateCache&) = delete;
  StateCache& operator=(const StateCache&) = delete;

  uint64_t epoch() const { return epoch_; }
  const AccessPolicy& access() const { return options_.access; }

  // Not owned; must outlive this. Added before serving (not thread-safe
  // against calls in flight).
  void AddObserver(StateCacheObserver* observer) ABSL_LOCKS_EXCLUDED(mu_);

  // ----------------------------------------------------------- scheduler
  //
  // Every call takes the `peer` it came from (the adapter's listeners
  // establish it; in-process callers are Peer::InProcess()). A session is
  // bound to the peer that attached it: a call naming it from another
  // principal is PERMISSION_DENIED, changes nothing and does not renew its
  // lease.

  // Errors: PERMISSION_DENIED (the peer is not in --attach_allow),
  // FAILED_PRECONDITION (identity mismatch, message names the field),
  // INVALID_ARGUMENT (client_name too long), UNAVAILABLE (draining),
  // RESOURCE_EXHAUSTED (max_sessions attached).
  absl::Status Attach(const v1::AttachRequest& request,
                      v1::AttachResponse* response,
                      const Peer& peer = Peer::InProcess())
      ABSL_LOCKS_EXCLUDED(mu_);
  // Errors: NOT_FOUND (unknown or expired session), PERMISSION_DENIED
  // (another principal's session); ReleaseSession's codes (sessions.h)
  // when giving its holdings back fails (a bug: the session is ended all
  // the same).
  absl::Status Detach(const v1::DetachRequest& request,
                      v1::DetachResponse* response,
                      const Peer& peer = Peer::InProcess())
      ABSL_LOCKS_EXCLUDED(mu_);
  // Errors: NOT_FOUND (unknown or expired session), PERMISSION_DENIED
  // (another principal's session).
  absl::Status KeepAlive(const v1::KeepAliveRequest& request,
                         v1::KeepAliveResponse* response,
                         const Peer& peer = Peer::InProcess())
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the step's operations, given as a list (`operations`, results in
  // response->results) or packed (`packed`, results in
  // response->packed_results): the same Apply for either. Per-operation
  // refusals go into the results; the returned status is non-OK only when
  // the whole step is refused, before anything ran (NOT_FOUND session;
  // PERMISSION_DENIED another principal's session; INVALID_ARGUMENT too many
  // operations or hashes, an empty operation, both forms, or malformed
  // packed columns).
  absl::Status Step(const v1::StepRequest& request, v1::StepResponse* response,
                    const Peer& peer = Peer::InProcess())
      ABSL_LOCKS_EXCLUDED(mu_);

  // ------------------------------------------------------- step channels
  //
  // The step channels (daemon/channel/step_channels.h) are a transport like
  // the gRPC adapter: they run Steps through Step() and keep no policy.
  // These let them bind a channel to a session and report to GetStats.

  // OK when session `session_id` is attached and `peer`'s; renews its lease
  // as any call does. Errors: as KeepAlive's.
  absl::Status CheckSession(const std::string& session_id, const Peer& peer)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether session `session_id` is still attached (without renewing it).
  bool SessionAttached(const std::string& session_id) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // A step channel opened (`opened`) or closed: GetStats'
  // step_channels_open and step_channels_opened.
  void CountStepChannel(bool opened) ABSL_LOCKS_EXCLUDED(mu_);

  // ----------------------------------------------------------- operator
  //
  // All but GetStats are PERMISSION_DENIED, changing nothing, to a peer
  // that --admin_allow does not name.

  void GetStats(v1::GetStatsResponse* response) ABSL_LOCKS_EXCLUDED(mu_);
  // A page of sessions in attach order, by handle; never their ids.
  // Errors: PERMISSION_DENIED; INVALID_ARGUMENT (bad page_token or a
  // negative page_size).
  absl::Status ListSessions(const v1::ListSessionsRequest& request,
                            v1::ListSessionsResponse* response,
                            const Peer& peer = Peer::InProcess())
      ABSL_LOCKS_EXCLUDED(mu_);
  // Errors: PERMISSION_DENIED; INVALID_ARGUMENT (both handle and
  // session_id); NOT_FOUND (no such session, or neither given); as Detach
  // when giving its holdings back fails (FenceSession's codes with a
  // quarantine).
  absl::Status EvictSession(const v1::EvictSessionRequest& request,
                            v1::EvictSessionResponse* response,
                            const Peer& peer = Peer::InProcess())
      ABSL_LOCKS_EXCLUDED(mu_);

  // Starts a resize; `done` runs exactly once (possibly before Resize
  // returns, possibly from a later Step, Tick or ~StateCache), without the
  // mutex held, with the outcome. Errors (through `done`): PERMISSION_DENIED,
  // INVALID_ARGUMENT, ABORTED (another resize in progress),
  // DEADLINE_EXCEEDED, CANCELLED (the daemon is shutting down).
  void Resize(const v1::ResizeRequest& request, ResizeDone done,
              const Peer& peer = Peer::InProcess()) ABSL_LOCKS_EXCLUDED(mu_);

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
  // Errors: PERMISSION_DENIED.
  absl::Status Drain(const v1::DrainRequest& request,
                     v1::DrainResponse* response,
                     const Peer& peer = Peer::InProcess())
      ABSL_LOCKS_EXCLUDED(mu_);

  // ----------------------------------------------------------- warm restart
  //
  // The pieces the state directory (state_keeper.h) saves and restores
  // through; the files are its business.

  // What the checkpoints are valid under: the identity clients attach
  // with, the transfer, the backend and the state layout's fingerprint.
  std::string StateFingerprint() const;
  // The state memory's backend ("host", "hip", "cuda"), or "none".
  std::string_view backend() const;
  // Checksums each checkpoint from now on (SlotMemory::EnableChecksums).
  // Errors: FAILED_PRECONDITION without state memory.
  absl::Status EnableChecksums() ABSL_LOCKS_EXCLUDED(mu_);
  // The checkpoints as they are now (sealed first), and the region their
  // bytes are in.
  // Errors: FAILED_PRECONDITION without state memory; the device's when
  // sealing fails (SlotMemory::SealCheckpoints).
  struct Checkpoints {
    SlotMemory::Saved saved;
    RegionExport region;
  };
  absl::StatusOr<Checkpoints> SaveCheckpoints() ABSL_LOCKS_EXCLUDED(mu_);
  // Shutdown, for a backend whose memory dies with the process: the images
  // of `device` (SlotMemory::ReadCheckpointImages; `device` keeps the
  // ones that still match their checksums).
  // Errors: SlotMemory::ReadCheckpointImages's (FAILED_PRECONDITION without
  // state memory; the device's).
  absl::StatusOr<std::unique_ptr<HostStaging>> ReadCheckpointImages(
      std::vector<SlotMemory::SavedCheckpoint>& device)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Shutdown: the tier's images (SlotMemory::CopyTierImages).
  std::string CopyTierImages(std::vector<SlotMemory::SavedCheckpoint>& tier)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Brings checkpoints back (SlotMemory::Restore), before serving.
  // Errors: FAILED_PRECONDITION a session is attached already;
  // SlotMemory::Restore's (FAILED_PRECONDITION without state memory or with
  // anything held or filed; INVALID_ARGUMENT; the device's).
  absl::StatusOr<SlotMemory::RestoreCounts> RestoreCheckpoints(
      absl::Span<const SlotMemory::RestoreImage> device,
      absl::Span<const SlotMemory::RestoreImage> tier) ABSL_LOCKS_EXCLUDED(mu_);
  // How the start went and the state directory since, for GetStats (the
  // keeper reports; the cache only carries it).
  void SetWarmRestartStats(const v1::WarmRestartStats& stats)
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
  // For tests: the pool's invariants, and that the sessions' requests and
  // pins agree with the pool and the owner table.
  // Errors: INTERNAL naming the first broken one.
  absl::Status CheckInvariants() const ABSL_LOCKS_EXCLUDED(mu_);
  // For tests: Steps waiting for their session's turn (fair_share).
  int StepsWaitingForTurn() const { return turns_.waiting(); }

 private:
  explicit StateCache(StateCacheOptions options, SlotMemory memory);

  // The live session `id` of `peer`'s principal with its lease renewed; a
  // lapsed one is ended here (the maintenance thread had not got to it
  // yet). Errors: NOT_FOUND, saying how a recently ended session ended;
  // PERMISSION_DENIED (another principal's: nothing changes).
  absl::StatusOr<Session*> FindSession(const std::string& id, const Peer& peer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns everything the session holds, tells the observers, forgets it.
  // Returns how many requests were released.
  absl::StatusOr<int32_t> EndSession(const std::string& id, SessionEnd how)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs a validated Step's operations in order, into `response`.
  void RunOperations(Session& session, const v1::StepRequest& request,
                     v1::StepResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillMemory(v1::StateMemory* memory) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void FillTransfer(const StateTransfer& transfer,
                           v1::TransferConfig* out);

  // A shrink in progress may complete after anything that frees slots:
  // the callback to run after unlocking, or null.
  std::function<void()> AdvanceResize() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::function<void()>> TickLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases the fenced requests whose deadline is past.
  void ReleaseFenced(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StateCacheOptions options_;
  Clock* const clock_;
  const uint64_t epoch_;
  const absl::Time start_time_;
  std::vector<StateCacheObserver*> observers_;
  // The same observers, as the narrower interfaces the parts take.
  std::vector<ResumeObserver*> resume_observers_;
  std::vector<ResizeObserver*> resize_observers_;

  // Taken before mu_ by each Step when options_.fair_share.
  FairTurns turns_;
  mutable absl::Mutex mu_;
  SlotMemory memory_ ABSL_GUARDED_BY(mu_);
  SessionTable sessions_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<PendingShrink> resize_ ABSL_GUARDED_BY(mu_);
  // Requests of lapsed or evicted sessions whose slots are fenced until
  // their deadline (oldest first).
  struct Fenced {
    absl::Time until;
    std::unique_ptr<Request> request;
  };
  std::vector<Fenced> fenced_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  ServiceCounters counters_ ABSL_GUARDED_BY(mu_);
  // Made when the first advised session attaches (so a daemon none asks
  // for advice spends nothing on it).
  std::optional<BranchPoints> branch_points_ ABSL_GUARDED_BY(mu_);
  v1::WarmRestartStats warm_restart_ ABSL_GUARDED_BY(mu_);
  uint64_t next_request_seqno_ ABSL_GUARDED_BY(mu_) = 0;
  // Made when some observer first wants operation timings; while none
  // does, a Step counts nothing and reads no clock.
  std::optional<OperationTiming> timing_ ABSL_GUARDED_BY(mu_);
  // Reused by every Step: the packed form's messages, room to sort pins.
  OperationScratchPtr scratch_ ABSL_GUARDED_BY(mu_);
  PinScratch pins_ ABSL_GUARDED_BY(mu_);
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_STATE_CACHE_H_

#include "daemon/service/state_cache.h"

#include <algorithm>
#include <optional>
#include <random>
#include <string_view>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/service/log.h"
#include "proto/packed_codec.h"
#include "vocabulary/dtype.h"

namespace statecache {
namespace {

constexpr size_t kMaxIdBytes = 256;

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

const char* EndName(SessionEnd how) {
  switch (how) {
    case SessionEnd::kDetached:
      return "detached";
    case SessionEnd::kExpired:
      return "expired (its lease lapsed)";
    case SessionEnd::kEvicted:
      return "evicted by an operator";
  }
  return "ended";
}

}  // namespace

void StateCache::FillTransfer(const StateTransfer& t, v1::TransferConfig* out) {
  out->set_kind(std::string(TransferKindName(t.kind())));
  out->set_fork_tokens(t.fork_tokens());
  out->set_readable_midstep(t.readable_midstep());
}

uint64_t NewEpoch(absl::Time now) {
  std::random_device rd;
  // Nanoseconds since the Unix epoch in the high bits keep epochs ordered
  // across restarts; random low bits keep two daemons started in the same
  // instant apart.
  const uint64_t nanos = static_cast<uint64_t>(absl::ToUnixNanos(now));
  return (nanos & ~uint64_t{0xffff}) | (rd() & 0xffff);
}

Clock* Clock::Real() {
  static RealClock* clock = new RealClock;
  return clock;
}

// ------------------------------------------------------------------ creation

absl::Status StateCache::ValidateOptions(const StateCacheOptions& options) {
  if (options.num_slots < 1 || options.num_slots > options.max_slots ||
      options.max_slots > kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_slots must be in [1, max_slots=", options.max_slots,
        "] (and max_slots <= ", kMaxSlots, "), got ", options.num_slots));
  }
  if (options.lease_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("lease_ttl must be positive");
  }
  if (options.max_hashes_per_step < 1) {
    return absl::InvalidArgumentError("max_hashes_per_step must be >= 1");
  }
  if (options.max_operations_per_step < 1) {
    return absl::InvalidArgumentError("max_operations_per_step must be >= 1");
  }
  if (options.operation_timing_interval < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("operation_timing_interval must be >= 1, got ",
                     options.operation_timing_interval));
  }
  if (options.quarantine < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("quarantine must be >= 0");
  }
  if (options.max_slots_per_session < 0 || options.max_sessions < 0) {
    return absl::InvalidArgumentError(
        "max_slots_per_session and max_sessions must be >= 0 (0: no limit)");
  }
  if (options.identity.num_spec() < 0) {
    return absl::InvalidArgumentError("num_spec must be >= 0");
  }
  if (options.pool_observer != nullptr && options.eviction != Eviction::kLru) {
    return absl::InvalidArgumentError(
        "a pool traced by a pool_observer must use LRU eviction (the trace "
        "format replays the reference's rule)");
  }
  if (options.advice_ladder_blocks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("advice_ladder_blocks must be >= 0, got ",
                     options.advice_ladder_blocks));
  }
  if (options.branch_point_blocks < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "branch_point_blocks must be >= 2, got ", options.branch_point_blocks));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StateCache>> StateCache::Create(
    StateCacheOptions options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  ASSIGN_OR_RETURN(
      SlotMemory memory,
      SlotMemory::Create(options.num_slots, options.transfer,
                         options.identity.hash_block_size(), options.device));
  if (options.host_tier_bytes > 0) {
    RETURN_IF_ERROR(memory.ResizeHostTier(options.host_tier_bytes));
  }
  memory.SetPoolObserver(options.pool_observer);
  memory.SetEviction(options.eviction);
  return std::unique_ptr<StateCache>(
      new StateCache(std::move(options), std::move(memory)));
}

StateCache::StateCache(StateCacheOptions options, SlotMemory memory)
    : options_(std::move(options)),
      clock_(options_.clock ? options_.clock : Clock::Real()),
      epoch_(options_.epoch ? options_.epoch : NewEpoch(clock_->Now())),
      start_time_(clock_->Now()),
      memory_(std::move(memory)),
      scratch_(NewOperationScratch()) {
  warm_restart_.set_outcome("off");
}

StateCache::~StateCache() {
  std::function<void()> done;
  {
    absl::MutexLock lock(&mu_);
    if (resize_) {
      done =
          resize_->Finish(absl::CancelledError("the daemon is shutting down"),
                          memory_, resize_observers_);
      resize_.reset();
    }
  }
  if (done) done();
}

void StateCache::AddObserver(StateCacheObserver* observer) {
  absl::MutexLock lock(&mu_);
  observers_.push_back(observer);
  resume_observers_.push_back(observer);
  resize_observers_.push_back(observer);
  memory_.AddCopyObserver(observer);
  if (observer->wants_operations() && !timing_) {
    timing_.emplace(options_.operation_timing_interval,
                    CycleClock::SecondsPerTick(),  // calibrated once
                    epoch_);
  }
}

// ------------------------------------------------------------------ sessions

absl::StatusOr<Session*> StateCache::FindSession(const std::string& id,
                                                 const Peer& peer) {
  Session* session = sessions_.Get(id);
  if (session == nullptr) {
    if (std::optional<SessionEnd> how = sessions_.EndedHow(id)) {
      return absl::NotFoundError(absl::StrCat("session '", id, "' was ",
                                              EndName(*how), "; attach again"));
    }
    return absl::NotFoundError(absl::StrCat("unknown session '", id, "'"));
  }
  if (!session->owner.SamePrincipal(peer) &&
      peer.kind != Peer::Kind::kInProcess) {
    return absl::PermissionDeniedError(absl::StrCat(
        "session ", session->handle, " belongs to ", session->owner.Principal(),
        " and this call comes from ", peer.Describe(),
        ": a session serves only the credentials that attached it"));
  }
  const absl::Time now = clock_->Now();
  if (now - session->last_seen > options_.lease_ttl) {
    counters_.set_lease_expiries(counters_.lease_expiries() + 1);
    RETURN_IF_ERROR(EndSession(id, SessionEnd::kExpired).status());
    return absl::NotFoundError(absl::StrCat("session '", id, "' was ",
                                            EndName(SessionEnd::kExpired),
                                            "; attach again"));
  }
  session->last_seen = now;
  return session;
}

absl::StatusOr<int32_t> StateCache::EndSession(const std::string& id,
                                               SessionEnd how) {
  Session* session = sessions_.Get(id);
  if (session == nullptr) return 0;
  // The session's id and name outlive it for the observers and the table.
  const std::string session_id = session->id;
  absl::StatusOr<int32_t> released;
  if (how != SessionEnd::kDetached &&
      options_.quarantine > absl::ZeroDuration()) {
    // Its engine may still be writing: fence its slots (see ReleaseFenced).
    std::vector<std::unique_ptr<Request>> fenced;
    const absl::Status st = FenceSession(memory_, *session, pins_, fenced);
    released =
        st.ok() ? absl::StatusOr<int32_t>(static_cast<int32_t>(fenced.size()))
                : absl::StatusOr<int32_t>(st);
    // Kept whatever the status: they still hold their slots.
    const absl::Time until = clock_->Now() + options_.quarantine;
    for (std::unique_ptr<Request>& request : fenced) {
      fenced_.push_back(Fenced{until, std::move(request)});
    }
  } else {
    released = ReleaseSession(memory_, *session, pins_);
  }
  for (StateCacheObserver* o : observers_) {
    o->OnSessionEnded(session_id, session->client_name, how,
                      released.ok() ? *released : 0);
  }
  sessions_.Erase(session_id, how);
  return released;
}

absl::Status StateCache::Attach(const v1::AttachRequest& request,
                                v1::AttachResponse* response,
                                const Peer& peer) {
  RETURN_IF_ERROR(options_.access.CheckAttach(peer));
  const v1::Identity& want = options_.identity;
  const v1::Identity& got = request.identity();
  if (got.model_id() != want.model_id()) {
    return absl::FailedPreconditionError(
        absl::StrCat("identity mismatch: model_id is '", got.model_id(),
                     "', this daemon serves '", want.model_id(), "'"));
  }
  if (got.hash_block_size() != want.hash_block_size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "identity mismatch: hash_block_size is ", got.hash_block_size(),
        ", this daemon uses ", want.hash_block_size()));
  }
  if (got.hash_namespace() != want.hash_namespace()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "identity mismatch: hash_namespace is '", got.hash_namespace(),
        "', this daemon uses '", want.hash_namespace(), "'"));
  }
  if (got.num_spec() != want.num_spec()) {
    return absl::FailedPreconditionError(
        absl::StrCat("identity mismatch: num_spec is ", got.num_spec(),
                     ", this daemon's state layout has ", want.num_spec()));
  }
  if (!got.layout_fingerprint().empty()) {
    if (options_.device == nullptr) {
      return absl::FailedPreconditionError(
          "identity mismatch: layout_fingerprint given, but this daemon runs "
          "without state memory (no --model or --layout)");
    }
    const std::string want_fp = options_.device->layout().FingerprintHex();
    if (got.layout_fingerprint() != want_fp) {
      return absl::FailedPreconditionError(absl::StrCat(
          "identity mismatch: layout_fingerprint is '",
          got.layout_fingerprint(), "', this daemon's layout (",
          options_.device->layout().name(), ") is '", want_fp, "'"));
    }
  }
  if (request.client_name().size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("client_name is ", request.client_name().size(),
                     " bytes; at most ", kMaxIdBytes));
  }
  absl::MutexLock lock(&mu_);
  if (draining_) {
    return absl::UnavailableError("the daemon is draining; attach elsewhere");
  }
  if (options_.max_sessions > 0 &&
      static_cast<int64_t>(sessions_.size()) >= options_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the daemon holds ", sessions_.size(), " sessions, its limit (",
        "--max_sessions=", options_.max_sessions,
        "); detach one or wait for an idle one's lease to lapse"));
  }
  Session& session = sessions_.Add(request.client_name(), peer, clock_->Now());
  response->set_session_id(session.id);
  response->set_handle(session.handle);
  response->set_lease_ttl_ms(absl::ToInt64Milliseconds(options_.lease_ttl));
  response->set_epoch(epoch_);
  response->set_num_slots(memory_.num_slots());
  FillTransfer(memory_.pool().transfer(), response->mutable_transfer());
  response->set_max_operations_per_step(options_.max_operations_per_step);
  response->set_max_hashes_per_step(options_.max_hashes_per_step);
  if (memory_.device() != nullptr) FillMemory(response->mutable_memory());
  session.advised = request.advise_placement() && options_.advise_placement;
  response->set_placement_advised(session.advised);
  response->set_eviction(EvictionName(options_.eviction));
  if (session.advised && !branch_points_.has_value()) {
    branch_points_.emplace(options_.branch_point_blocks);
  }
  return absl::OkStatus();
}

absl::Status StateCache::Detach(const v1::DetachRequest& request,
                                v1::DetachResponse* response,
                                const Peer& peer) {
  std::function<void()> done;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(Session * session,
                     FindSession(request.session_id(), peer));
    ASSIGN_OR_RETURN(int32_t released,
                     EndSession(session->id, SessionEnd::kDetached));
    response->set_requests_released(released);
    done = AdvanceResize();
  }
  if (done) done();
  return absl::OkStatus();
}

absl::Status StateCache::KeepAlive(const v1::KeepAliveRequest& request,
                                   v1::KeepAliveResponse* response,
                                   const Peer& peer) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(FindSession(request.session_id(), peer).status());
  response->set_epoch(epoch_);
  response->set_lease_ttl_ms(absl::ToInt64Milliseconds(options_.lease_ttl));
  return absl::OkStatus();
}

absl::Status StateCache::CheckSession(const std::string& session_id,
                                      const Peer& peer) {
  absl::MutexLock lock(&mu_);
  return FindSession(session_id, peer).status();
}

bool StateCache::SessionAttached(const std::string& session_id) const {
  absl::MutexLock lock(&mu_);
  return sessions_.Get(session_id) != nullptr;
}

void StateCache::CountStepChannel(bool opened) {
  absl::MutexLock lock(&mu_);
  counters_.set_step_channels_open(counters_.step_channels_open() +
                                   (opened ? 1 : -1));
  if (opened) {
    counters_.set_step_channels_opened(counters_.step_channels_opened() + 1);
  }
}

absl::Status StateCache::EvictSession(const v1::EvictSessionRequest& request,
                                      v1::EvictSessionResponse* response,
                                      const Peer& peer) {
  RETURN_IF_ERROR(options_.access.CheckAdmin(peer, "EvictSession"));
  if (!request.handle().empty() && !request.session_id().empty()) {
    return absl::InvalidArgumentError(
        "EvictSession names a session by its handle or by its id, not both");
  }
  std::function<void()> done;
  {
    absl::MutexLock lock(&mu_);
    const Session* session = request.handle().empty()
                                 ? sessions_.Get(request.session_id())
                                 : sessions_.GetByHandle(request.handle());
    if (session == nullptr) {
      return absl::NotFoundError(
          request.handle().empty()
              ? absl::StrCat("unknown session '", request.session_id(), "'")
              : absl::StrCat("no attached session has handle '",
                             request.handle(), "'"));
    }
    counters_.set_sessions_evicted(counters_.sessions_evicted() + 1);
    ASSIGN_OR_RETURN(int32_t released,
                     EndSession(session->id, SessionEnd::kEvicted));
    response->set_requests_released(released);
    done = AdvanceResize();
  }
  if (done) done();
  return absl::OkStatus();
}

// ------------------------------------------------------------------ step

absl::Status StateCache::Step(const v1::StepRequest& request,
                              v1::StepResponse* response, const Peer& peer) {
  // Everything that can refuse the whole step is checked before the lock.
  const bool packed = request.has_packed();
  const int n =
      packed ? request.packed().kinds_size() : request.operations_size();
  if (packed && request.operations_size() > 0) {
    return absl::InvalidArgumentError(
        "step carries both `operations` and `packed`; send one form");
  }
  if (n > options_.max_operations_per_step) {
    return absl::InvalidArgumentError(
        absl::StrCat("step carries ", n, " operations; at most ",
                     options_.max_operations_per_step));
  }
  int64_t hashes = 0;
  if (packed) {
    RETURN_IF_ERROR(ValidatePackedOperations(request.packed()));
    hashes = request.packed().hashes_size();
  } else {
    for (int i = 0; i < n; ++i) {
      const v1::Operation& op = request.operations(i);
      if (op.kind_case() == v1::Operation::KIND_NOT_SET) {
        return absl::InvalidArgumentError(
            absl::StrCat("operation ", i, " has no kind set"));
      }
      hashes += HashListLength(op);
    }
  }
  if (hashes > options_.max_hashes_per_step) {
    return absl::InvalidArgumentError(
        absl::StrCat("step carries ", hashes, " hashes; at most ",
                     options_.max_hashes_per_step,
                     " (the daemon's --max_hashes_per_step): split it"));
  }
  std::function<void()> done;
  {
    std::optional<FairTurns::Turn> turn;
    if (options_.fair_share) {
      turn.emplace(turns_,
                   absl::Hash<std::string_view>{}(request.session_id()));
    }
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(Session * session,
                     FindSession(request.session_id(), peer));
    response->set_epoch(epoch_);
    RunOperations(*session, request, response);
    // A pass may have released the pins a shrink is waiting on.
    done = AdvanceResize();
  }
  if (done) done();
  return absl::OkStatus();
}

void StateCache::RunOperations(Session& session, const v1::StepRequest& request,
                               v1::StepResponse* response) {
  const bool packed = request.has_packed();
  const int n =
      packed ? request.packed().kinds_size() : request.operations_size();
  PackedOperationReader reader(request.packed());
  v1::PackedResults* packed_results = nullptr;
  if (packed) {
    packed_results = response->mutable_packed_results();
    // Most results are a few values; room for them up front.
    packed_results->mutable_codes()->Reserve(n);
    packed_results->mutable_values()->Reserve(4 * n);
  } else {
    response->mutable_results()->Reserve(n);
  }
  PackedResultWriter writer(packed_results);
  OperationContext context{
      .memory = memory_,
      .session = session,
      .counters = counters_,
      .pins = pins_,
      .next_request_seqno = next_request_seqno_,
      .resume_observers = resume_observers_,
      .draining = draining_,
      .max_slots_per_session = options_.max_slots_per_session,
      .shrink = resize_.get(),
      .resize_observers = resize_observers_,
      .branch_points = branch_points_.has_value() ? &*branch_points_ : nullptr,
      .advice_ladder_blocks = options_.advice_ladder_blocks};
  OperationTiming* const timing = timing_ ? &*timing_ : nullptr;
  for (int i = 0; i < n; ++i) {
    v1::Operation::KindCase kind;
    absl::Status status;
    const bool timed = timing != nullptr && timing->Start();
    if (packed) {
      kind = static_cast<v1::Operation::KindCase>(request.packed().kinds(i));
      status = RunPackedOperation(context, kind, reader, writer, *scratch_);
    } else {
      const v1::Operation& op = request.operations(i);
      kind = op.kind_case();
      v1::OperationResult* result = response->add_results();
      status = RunOperation(context, op, result);
      if (!status.ok()) {
        result->clear_result();
        result->set_code(static_cast<int32_t>(status.code()));
        result->set_message(std::string(status.message()));
      }
    }
    if (timing != nullptr) timing->Finish(timed, kind, status);
  }
  if (timing != nullptr) {
    for (StateCacheObserver* o : observers_) o->OnOperations(timing->step());
    timing->Clear();
  }
  // The engine writes the slots this reply hands it: the checkpoints their
  // pops spent leave for the host tier first.
  if (absl::Status st = memory_.FlushDemotions(); !st.ok()) {
    LOG_ERROR("host tier: %s (those checkpoints are dropped)", st.ToString());
  }
  // The pass's new checkpoints are vouched for before the engine can touch
  // anything again.
  if (absl::Status st = memory_.SealCheckpoints(); !st.ok()) {
    LOG_ERROR("%s (those checkpoints will not be saved)", st.ToString());
  }
}

void StateCache::FillMemory(v1::StateMemory* memory) const {
  const RegionExport region = memory_.device()->Export();
  memory->set_backend(region.backend);
  memory->set_handle(region.handle);
  memory->set_device_ordinal(region.device_ordinal);
  memory->set_region_bytes(region.region_bytes);
  memory->set_num_slots(region.num_slots);
  memory->set_capacity_slots(region.capacity_slots);
  memory->set_layout_name(region.layout.name());
  memory->set_layout_fingerprint(region.layout_fingerprint);
  memory->set_arrangement(region.layout.arrangement() == Arrangement::kSlotMajor
                              ? "slot_major"
                              : "layer_major");
  memory->set_num_layers(region.layout.num_layers());
  memory->set_bytes_per_slot(region.layout.bytes_per_slot());
  for (const StateTensorSpec& t : region.layout.tensors()) {
    v1::StateTensor* out = memory->add_tensors();
    out->set_name(t.name);
    out->set_dtype(std::string(DTypeName(t.dtype)));
    for (int64_t d : t.shape) out->add_shape(d);
  }
  for (const TensorPlacement& p : region.placements) {
    v1::TensorPlacement* out = memory->add_placements();
    out->set_tensor(p.tensor);
    out->set_layer(p.layer);
    out->set_offset(p.offset);
    out->set_slot_stride(p.slot_stride);
    out->set_bytes(p.bytes);
    for (uint64_t st : p.strides) out->add_strides(st);
  }
}

// ------------------------------------------------------------------ resize

void StateCache::Resize(const v1::ResizeRequest& request, ResizeDone done,
                        const Peer& peer) {
  if (absl::Status denied = options_.access.CheckAdmin(peer, "Resize");
      !denied.ok()) {
    done(std::move(denied), v1::ResizeResponse());
    return;
  }
  v1::ResizeResponse response;
  absl::Status status;
  std::function<void()> finished;
  {
    absl::MutexLock lock(&mu_);
    const int64_t target = request.target_slots();
    const int64_t from = memory_.num_slots();
    response.set_num_slots(from);
    const bool resizes_tier = request.has_host_tier_bytes();
    const bool resizes_pool = !resizes_tier || target != 0;
    if (resizes_tier && request.host_tier_bytes() < 0) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "host_tier_bytes must be >= 0, got ", request.host_tier_bytes()));
    } else if (resizes_pool && (target < 1 || target > options_.max_slots)) {
      status = absl::InvalidArgumentError(
          absl::StrCat("target_slots must be in [1, ", options_.max_slots,
                       "], got ", target));
    } else if (resizes_pool && resize_) {
      status = absl::AbortedError(absl::StrCat(
          "a resize to ", resize_->target(), " slots is already in progress"));
    } else if (resizes_tier) {
      // At once; on an error the tier is unchanged and the pool untouched.
      status = memory_.ResizeHostTier(request.host_tier_bytes());
    }
    if (status.ok() && resizes_pool && target > from) {
      status = GrowPool(memory_, target, resize_observers_);
      response.set_num_slots(memory_.num_slots());
    } else if (status.ok() && resizes_pool && target < from) {
      const int64_t deadline_ms =
          request.deadline_ms() > 0 ? request.deadline_ms() : 10000;
      resize_ = std::make_unique<PendingShrink>(
          memory_, target, clock_->Now() + absl::Milliseconds(deadline_ms),
          std::move(done));
      finished = AdvanceResize();
      if (!finished) return;  // completes from a later Step, Tick or detach
    }
    response.set_host_tier_bytes(
        static_cast<int64_t>(memory_.host_tier_stats().capacity_bytes));
  }
  if (finished) {
    finished();
  } else {
    done(status, response);
  }
}

std::function<void()> StateCache::AdvanceResize() {
  if (!resize_ || !resize_->Advance(memory_, resize_observers_)) return {};
  std::function<void()> done =
      resize_->Finish(absl::OkStatus(), memory_, resize_observers_);
  resize_.reset();
  return done;
}

// ------------------------------------------------------------------ upkeep

void StateCache::ReleaseFenced(absl::Time now) {
  size_t n = 0;
  while (n < fenced_.size() && fenced_[n].until <= now) {
    // Its pins went when it was fenced; only slots and reservations remain.
    if (absl::Status st =
            memory_.Release(*fenced_[n].request, /*drop_reader=*/false);
        !st.ok()) {
      LOG_ERROR("releasing fenced request %s: %s", fenced_[n].request->id,
                st.ToString());
    }
    ++n;
  }
  fenced_.erase(fenced_.begin(), fenced_.begin() + n);
}

std::vector<std::function<void()>> StateCache::TickLocked() {
  std::vector<std::function<void()>> done;
  const absl::Time now = clock_->Now();
  for (const std::string& id : sessions_.Lapsed(now, options_.lease_ttl)) {
    counters_.set_lease_expiries(counters_.lease_expiries() + 1);
    if (absl::Status st = EndSession(id, SessionEnd::kExpired).status();
        !st.ok()) {
      // The session is gone all the same; the pool disagreeing with it is
      // a bug the invariant checks name.
      LOG_ERROR("ending lapsed session %s: %s", id, st.ToString());
    }
  }
  ReleaseFenced(now);
  if (resize_) {
    if (std::function<void()> finished = AdvanceResize()) {
      done.push_back(std::move(finished));
    } else if (now >= resize_->deadline()) {
      const int64_t target = resize_->target();
      done.push_back(resize_->Finish(
          absl::DeadlineExceededError(absl::StrCat(
              "resize reached ", memory_.num_slots(), " slots of target ",
              target,
              " before its deadline; the top slot is pinned, reserved, "
              "fenced, live with nowhere to go, or live in a session that "
              "ran no begin_pass since (slots given up so far stay given "
              "up)")),
          memory_, resize_observers_));
      resize_.reset();
    }
  }
  return done;
}

void StateCache::Tick() {
  std::vector<std::function<void()>> done;
  {
    absl::MutexLock lock(&mu_);
    done = TickLocked();
  }
  for (auto& f : done) f();
}

absl::Time StateCache::NextDeadline() const {
  absl::MutexLock lock(&mu_);
  absl::Time next = sessions_.NextLapse(options_.lease_ttl);
  if (!fenced_.empty()) next = std::min(next, fenced_.front().until);
  if (resize_) next = std::min(next, resize_->deadline());
  return next;
}

void StateCache::SetDraining(bool draining) {
  absl::MutexLock lock(&mu_);
  draining_ = draining;
}

absl::Status StateCache::Drain(const v1::DrainRequest& request,
                               v1::DrainResponse* response, const Peer& peer) {
  RETURN_IF_ERROR(options_.access.CheckAdmin(peer, "Drain"));
  absl::MutexLock lock(&mu_);
  draining_ = !request.resume();
  response->set_draining(draining_);
  response->set_requests(sessions_.NumRequests());
  return absl::OkStatus();
}

}  // namespace statecache

#include "daemon/service/state_cache.h"

#include <algorithm>
#include <random>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/common/status_macros.h"
#include "daemon/device/dtype.h"

namespace statecache {
namespace {

constexpr size_t kMaxIdBytes = 256;
constexpr size_t kEndedSessionsRemembered = 1024;

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

std::string RandomToken() {
  std::random_device rd;  // /dev/urandom on Linux
  uint64_t a = (uint64_t{rd()} << 32) | rd();
  uint64_t b = (uint64_t{rd()} << 32) | rd();
  return absl::StrFormat("%016x%016x", a, b);
}

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

absl::Status CheckRequestId(absl::string_view id) {
  if (id.empty()) return absl::InvalidArgumentError("request_id is empty");
  if (id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request_id is ", id.size(), " bytes; at most ", kMaxIdBytes));
  }
  return absl::OkStatus();
}

absl::Status CheckHashes(const google::protobuf::RepeatedField<int64_t>& hashes,
                         const char* what) {
  for (int64_t h : hashes) {
    if (h < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " contains ", h, "; hashes are in [0, 2^63)"));
    }
  }
  return absl::OkStatus();
}

void FillTransfer(const StateTransfer& t, v1::TransferConfig* out) {
  out->set_kind(std::string(TransferKindName(t.kind())));
  out->set_fork_tokens(t.fork_tokens());
  out->set_readable_midstep(t.readable_midstep());
}

}  // namespace

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

struct StateCache::PendingResize {
  absl::Status copy_error;  // first device failure, reported at the end
  int64_t from = 0;
  int64_t target = 0;
  absl::Time deadline;
  ResizeDone done;
  v1::ResizeResponse response;
  int64_t evicted_before = 0;
};

// ------------------------------------------------------------------ creation

absl::StatusOr<std::unique_ptr<StateCache>> StateCache::Create(
    StateCacheOptions options) {
  if (options.num_slots < 1 || options.num_slots > options.max_slots ||
      options.max_slots > kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_slots must be in [1, max_slots=", options.max_slots,
        "] (and max_slots <= ", kMaxSlots, "), got ", options.num_slots));
  }
  if (options.lease_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("lease_ttl must be positive");
  }
  if (options.max_operations_per_step < 1) {
    return absl::InvalidArgumentError("max_operations_per_step must be >= 1");
  }
  if (options.identity.num_spec() < 0) {
    return absl::InvalidArgumentError("num_spec must be >= 0");
  }
  if (options.device && options.device->num_slots() != options.num_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("the device holds ", options.device->num_slots(),
                     " slots, the pool is to have ", options.num_slots));
  }
  ASSIGN_OR_RETURN(SlotPool pool,
                   SlotPool::Create(options.num_slots, options.transfer,
                                    options.identity.hash_block_size()));
  return std::unique_ptr<StateCache>(
      new StateCache(std::move(options), std::move(pool)));
}

// Read into by RunPackedOperation, one kind at a time.
struct StateCache::PackedScratch {
  v1::BeginPass begin_pass;
  v1::BeginPassResult begin_pass_result;
  v1::Admit admit;
  v1::AdmitResult admit_result;
  v1::ResumableHit resumable_hit;
  v1::ResumableHitResult resumable_hit_result;
  v1::Lookup lookup;
  v1::LookupResult lookup_result;
  v1::Reserve reserve;
  v1::ReserveResult reserve_result;
  v1::Publish publish;
  v1::PublishResult publish_result;
  v1::Cancel cancel;
  v1::CancelResult cancel_result;
  v1::Checkpoint checkpoint;
  v1::CheckpointResult checkpoint_result;
  v1::ConsumeFork consume_fork;
  v1::ConsumeForkResult consume_fork_result;
  v1::AdoptForkSource adopt_fork_source;
  v1::AdoptForkSourceResult adopt_fork_source_result;
  v1::Release release;
  v1::ReleaseResult release_result;
  v1::Unindex unindex;
  v1::UnindexResult unindex_result;
  v1::ClearIndex clear_index;
  v1::ClearIndexResult clear_index_result;
  v1::Copy copy;
  v1::CopyResult copy_result;
  v1::Snapshot snapshot;
  v1::SnapshotResult snapshot_result;
};

StateCache::StateCache(StateCacheOptions options, SlotPool pool)
    : options_(std::move(options)),
      device_(options_.device.get()),
      clock_(options_.clock ? options_.clock : Clock::Real()),
      epoch_(options_.epoch ? options_.epoch : NewEpoch(clock_->Now())),
      start_time_(clock_->Now()),
      packed_scratch_(std::make_unique<PackedScratch>()),
      pool_(std::move(pool)) {
  owners_.resize(pool_.capacity());
}

StateCache::~StateCache() {
  std::function<void()> done;
  {
    absl::MutexLock lock(&mu_);
    if (resize_) {
      done = FinishResize(absl::CancelledError("the daemon is shutting down"));
    }
  }
  if (done) done();
}

// ------------------------------------------------------------------ sessions

absl::StatusOr<Session*> StateCache::FindSession(const std::string& id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    auto ended = ended_.find(id);
    if (ended != ended_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "session '", id, "' was ", EndName(ended->second), "; attach again"));
    }
    return absl::NotFoundError(absl::StrCat("unknown session '", id, "'"));
  }
  Session& session = *it->second;
  const absl::Time now = clock_->Now();
  if (now - session.last_seen > options_.lease_ttl) {
    // The maintenance thread has not got to it yet; the lease is gone all
    // the same.
    ++counters_.lease_expiries;
    EndSession(id, SessionEnd::kExpired);
    return absl::NotFoundError(absl::StrCat("session '", id, "' was ",
                                            EndName(SessionEnd::kExpired),
                                            "; attach again"));
  }
  session.last_seen = now;
  return &session;
}

absl::StatusOr<Request*> StateCache::FindRequest(Session& session,
                                                 absl::string_view id) {
  auto it = session.requests.find(id);
  if (it == session.requests.end()) {
    return absl::NotFoundError(
        absl::StrCat("this session holds no request '", id, "'"));
  }
  return it->second.get();
}

absl::Status StateCache::Attach(const v1::AttachRequest& request,
                                v1::AttachResponse* response) {
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
    if (device_ == nullptr) {
      return absl::FailedPreconditionError(
          "identity mismatch: layout_fingerprint given, but this daemon runs "
          "without state memory (no --model or --layout)");
    }
    const std::string want_fp = device_->layout().FingerprintHex();
    if (got.layout_fingerprint() != want_fp) {
      return absl::FailedPreconditionError(
          absl::StrCat("identity mismatch: layout_fingerprint is '",
                       got.layout_fingerprint(), "', this daemon's layout (",
                       device_->layout().name(), ") is '", want_fp, "'"));
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
  auto session = std::make_unique<Session>();
  session->id = RandomToken();
  session->client_name = request.client_name();
  session->attached_at = session->last_seen = clock_->Now();
  response->set_session_id(session->id);
  response->set_lease_ttl_ms(absl::ToInt64Milliseconds(options_.lease_ttl));
  response->set_epoch(epoch_);
  response->set_num_slots(pool_.num_slots());
  FillTransfer(pool_.transfer(), response->mutable_transfer());
  response->set_max_operations_per_step(options_.max_operations_per_step);
  if (device_ != nullptr) FillMemory(response->mutable_memory());
  sessions_.emplace(session->id, std::move(session));
  return absl::OkStatus();
}

absl::Status StateCache::Detach(const v1::DetachRequest& request,
                                v1::DetachResponse* response) {
  std::function<void()> done;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(Session * session, FindSession(request.session_id()));
    response->set_requests_released(
        EndSession(session->id, SessionEnd::kDetached));
    if (resize_ && AdvanceResize()) done = FinishResize(absl::OkStatus());
  }
  if (done) done();
  return absl::OkStatus();
}

absl::Status StateCache::KeepAlive(const v1::KeepAliveRequest& request,
                                   v1::KeepAliveResponse* response) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Session * session, FindSession(request.session_id()));
  (void)session;
  response->set_epoch(epoch_);
  response->set_lease_ttl_ms(absl::ToInt64Milliseconds(options_.lease_ttl));
  return absl::OkStatus();
}

absl::Status StateCache::EvictSession(const v1::EvictSessionRequest& request,
                                      v1::EvictSessionResponse* response) {
  std::function<void()> done;
  {
    absl::MutexLock lock(&mu_);
    if (!sessions_.contains(request.session_id())) {
      return absl::NotFoundError(
          absl::StrCat("unknown session '", request.session_id(), "'"));
    }
    ++counters_.sessions_evicted;
    response->set_requests_released(
        EndSession(request.session_id(), SessionEnd::kEvicted));
    if (resize_ && AdvanceResize()) done = FinishResize(absl::OkStatus());
  }
  if (done) done();
  return absl::OkStatus();
}

// By value: callers pass ids that live in the session being erased.
int32_t StateCache::EndSession(std::string session_id, SessionEnd how) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return 0;
  Session& session = *it->second;
  // Admission order, so what the pool files (and its LRU order) does not
  // depend on hash-map iteration.
  std::vector<Request*> requests;
  for (auto& [id, request] : session.requests)
    requests.push_back(request.get());
  std::sort(
      requests.begin(), requests.end(),
      [](const Request* a, const Request* b) { return a->seqno < b->seqno; });
  for (Request* request : requests) ReleaseRequest(session, *request);
  const int32_t released = static_cast<int32_t>(requests.size());
  session.requests.clear();
  // The pins its clock still holds go back as the clock would return them,
  // in slot order.
  session.SortedPins(sorted_pins_, sort_scratch_);
  for (const auto& [slot, pin] : sorted_pins_) {
    (void)pool_.ReleasePin(slot, pin->count);
  }
  sorted_pins_.clear();
  session.pins.clear();
  for (StateCacheObserver* o : observers_) {
    o->OnSessionEnded(session_id, session.client_name, how, released);
  }
  sessions_.erase(it);
  if (ended_.emplace(session_id, how).second) {
    ended_order_.push_back(session_id);
    if (ended_order_.size() > kEndedSessionsRemembered) {
      ended_.erase(ended_order_.front());
      ended_order_.erase(ended_order_.begin());
    }
  }
  return released;
}

// ------------------------------------------------------------------ owners

void StateCache::SetOwner(int64_t slot, Session* session, Request* request,
                          int32_t index) {
  if (slot >= static_cast<int64_t>(owners_.size())) owners_.resize(slot + 1);
  owners_[slot] = SlotOwner{session, request, index};
}

void StateCache::ClearOwner(int64_t slot) {
  if (slot >= 0 && slot < static_cast<int64_t>(owners_.size())) {
    owners_[slot] = SlotOwner{};
  }
}

Sequence StateCache::SequenceOf(const Request& request) const {
  Sequence seq;
  seq.state_slot = request.slots.empty() ? -1 : request.slots[0];
  seq.num_tokens = request.num_tokens;
  seq.has_per_req_cache = true;
  seq.midstep_anchor_pos = request.anchor_pos;
  seq.checkpoint_end_pos = 0;
  return seq;
}

// ------------------------------------------------------------------ step

absl::Status StateCache::Step(const v1::StepRequest& request,
                              v1::StepResponse* response) {
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
  if (packed) {
    RETURN_IF_ERROR(ValidatePackedOperations(request.packed()));
  } else {
    for (int i = 0; i < n; ++i) {
      if (request.operations(i).kind_case() == v1::Operation::KIND_NOT_SET) {
        return absl::InvalidArgumentError(
            absl::StrCat("operation ", i, " has no kind set"));
      }
    }
  }
  std::function<void()> done;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(Session * session, FindSession(request.session_id()));
    response->set_epoch(epoch_);
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
    const bool timed = seconds_per_tick_ > 0;
    // One clock read per operation boundary: each operation's end is the
    // next one's start.
    uint64_t mark = timed ? CycleClock::Now() : 0;
    for (int i = 0; i < n; ++i) {
      v1::Operation::KindCase kind;
      absl::Status status;
      if (packed) {
        kind = static_cast<v1::Operation::KindCase>(request.packed().kinds(i));
        status = RunPackedOperation(*session, kind, reader, writer);
      } else {
        const v1::Operation& op = request.operations(i);
        kind = op.kind_case();
        v1::OperationResult* result = response->add_results();
        status = RunOperation(*session, op, result);
        if (!status.ok()) {
          result->clear_result();
          result->set_code(static_cast<int32_t>(status.code()));
          result->set_message(std::string(status.message()));
        }
      }
      if (timed) {
        const uint64_t now = CycleClock::Now();
        const uint64_t ticks = now > mark ? now - mark : 0;
        samples_.push_back(
            OperationSample{kind, status.code(),
                            static_cast<double>(ticks) * seconds_per_tick_});
        mark = now;
      }
    }
    if (timed) {
      for (StateCacheObserver* o : observers_) o->OnOperations(samples_);
      samples_.clear();
    }
    // A pass may have released the pins a shrink is waiting on.
    if (resize_ && AdvanceResize()) done = FinishResize(absl::OkStatus());
  }
  if (done) done();
  return absl::OkStatus();
}

absl::Status StateCache::RunOperation(Session& session, const v1::Operation& op,
                                      v1::OperationResult* result) {
  switch (op.kind_case()) {
    case v1::Operation::kBeginPass:
      return Apply(session, op.begin_pass(), result->mutable_begin_pass());
    case v1::Operation::kAdmit:
      return Apply(session, op.admit().request_id(), op.admit(),
                   result->mutable_admit());
    case v1::Operation::kResumableHit:
      return Apply(session, op.resumable_hit(),
                   result->mutable_resumable_hit());
    case v1::Operation::kLookup:
      return Apply(session, op.lookup(), result->mutable_lookup());
    case v1::Operation::kReserve:
      return Apply(session, op.reserve().request_id(), op.reserve(),
                   result->mutable_reserve());
    case v1::Operation::kPublish:
      return Apply(session, op.publish().request_id(), op.publish(),
                   result->mutable_publish());
    case v1::Operation::kCancel:
      return Apply(session, op.cancel().request_id(), op.cancel(),
                   result->mutable_cancel());
    case v1::Operation::kCheckpoint:
      return Apply(session, op.checkpoint().request_id(), op.checkpoint(),
                   result->mutable_checkpoint());
    case v1::Operation::kConsumeFork:
      return Apply(session, op.consume_fork().request_id(), op.consume_fork(),
                   result->mutable_consume_fork());
    case v1::Operation::kAdoptForkSource:
      return Apply(session, op.adopt_fork_source().request_id(),
                   op.adopt_fork_source(), result->mutable_adopt_fork_source());
    case v1::Operation::kRelease:
      return Apply(session, op.release().request_id(), op.release(),
                   result->mutable_release());
    case v1::Operation::kUnindex:
      return Apply(session, op.unindex(), result->mutable_unindex());
    case v1::Operation::kClearIndex:
      return Apply(session, op.clear_index(), result->mutable_clear_index());
    case v1::Operation::kCopy:
      return Apply(session, op.copy().request_id(), op.copy(),
                   result->mutable_copy());
    case v1::Operation::kSnapshot:
      return Apply(session, op.snapshot().request_id(), op.snapshot(),
                   result->mutable_snapshot());
    case v1::Operation::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("operation has no kind set");
}

template <typename Op, typename Result>
absl::Status StateCache::ApplyPacked(Session& session,
                                     PackedOperationReader& reader, Op& op,
                                     Result& result,
                                     PackedResultWriter& writer) {
  absl::Status status;
  if constexpr (std::is_void_v<decltype(reader.Read(&op))>) {
    reader.Read(&op);
    status = Apply(session, op, &result);
  } else {  // a kind that names a request: its id, viewed in the column
    const std::string_view id = reader.Read(&op);
    status =
        Apply(session, absl::string_view(id.data(), id.size()), op, &result);
  }
  if (status.ok()) {
    writer.Write(result);
  } else {
    writer.Refused(status);
  }
  result.Clear();
  return status;
}

absl::Status StateCache::RunPackedOperation(Session& session,
                                            v1::Operation::KindCase kind,
                                            PackedOperationReader& reader,
                                            PackedResultWriter& writer) {
  PackedScratch& s = *packed_scratch_;
  switch (kind) {
    case v1::Operation::kBeginPass:
      return ApplyPacked(session, reader, s.begin_pass, s.begin_pass_result,
                         writer);
    case v1::Operation::kAdmit:
      return ApplyPacked(session, reader, s.admit, s.admit_result, writer);
    case v1::Operation::kResumableHit:
      return ApplyPacked(session, reader, s.resumable_hit,
                         s.resumable_hit_result, writer);
    case v1::Operation::kLookup:
      return ApplyPacked(session, reader, s.lookup, s.lookup_result, writer);
    case v1::Operation::kReserve:
      return ApplyPacked(session, reader, s.reserve, s.reserve_result, writer);
    case v1::Operation::kPublish:
      return ApplyPacked(session, reader, s.publish, s.publish_result, writer);
    case v1::Operation::kCancel:
      return ApplyPacked(session, reader, s.cancel, s.cancel_result, writer);
    case v1::Operation::kCheckpoint:
      return ApplyPacked(session, reader, s.checkpoint, s.checkpoint_result,
                         writer);
    case v1::Operation::kConsumeFork:
      return ApplyPacked(session, reader, s.consume_fork, s.consume_fork_result,
                         writer);
    case v1::Operation::kAdoptForkSource:
      return ApplyPacked(session, reader, s.adopt_fork_source,
                         s.adopt_fork_source_result, writer);
    case v1::Operation::kRelease:
      return ApplyPacked(session, reader, s.release, s.release_result, writer);
    case v1::Operation::kUnindex:
      return ApplyPacked(session, reader, s.unindex, s.unindex_result, writer);
    case v1::Operation::kClearIndex:
      return ApplyPacked(session, reader, s.clear_index, s.clear_index_result,
                         writer);
    case v1::Operation::kCopy:
      return ApplyPacked(session, reader, s.copy, s.copy_result, writer);
    case v1::Operation::kSnapshot:
      return ApplyPacked(session, reader, s.snapshot, s.snapshot_result,
                         writer);
    case v1::Operation::KIND_NOT_SET:
      break;
  }
  // ValidatePackedOperations let no such kind through.
  return absl::InternalError("packed operation of no known kind");
}

absl::Status StateCache::Apply(Session&, const v1::ResumableHit& q,
                               v1::ResumableHitResult* result) {
  if (q.num_tokens() < 0) {
    return absl::InvalidArgumentError("num_tokens must be >= 0");
  }
  Sequence seq;
  seq.num_tokens = q.num_tokens();
  ASSIGN_OR_RETURN(
      int64_t blocks,
      pool_.ResumableHit(
          seq, q.kv_hit_blocks(),
          absl::MakeConstSpan(q.block_hashes().data(), q.block_hashes_size()),
          q.assume_checkpointed()));
  result->set_blocks(static_cast<int32_t>(blocks));
  return absl::OkStatus();
}

absl::Status StateCache::Apply(Session&, const v1::Lookup& op,
                               v1::LookupResult* result) {
  ASSIGN_OR_RETURN(int64_t slot, pool_.Lookup(op.hash()));
  result->set_slot(slot);
  return absl::OkStatus();
}

absl::Status StateCache::Apply(Session& session, absl::string_view request_id,
                               const v1::ConsumeFork& op,
                               v1::ConsumeForkResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(session, request_id));
  result->set_fork_src(request->fork_src);
  if (request->fork_src >= 0) {
    session.RemoveReader(request->fork_src, request);
    request->fork_src = -1;
  }
  return absl::OkStatus();
}

absl::Status StateCache::Apply(Session&, const v1::Unindex& op,
                               v1::UnindexResult* result) {
  RETURN_IF_ERROR(CheckHashes(op.hashes(), "hashes"));
  const int64_t before = pool_.Fates().orphaned;
  for (int64_t h : op.hashes()) RETURN_IF_ERROR(pool_.Unindex(h));
  result->set_orphaned(static_cast<int32_t>(pool_.Fates().orphaned - before));
  return absl::OkStatus();
}

absl::Status StateCache::Apply(Session&, const v1::ClearIndex&,
                               v1::ClearIndexResult*) {
  pool_.ClearIndex();
  return absl::OkStatus();
}

absl::Status StateCache::Apply(Session& session, const v1::BeginPass&,
                               v1::BeginPassResult* result) {
  for (const PendingMove& move : session.moves) {
    v1::SlotMove* out = result->add_moves();
    out->set_request_id(move.request_id);
    out->set_index(move.index);
    out->set_from_slot(move.from_slot);
    out->set_to_slot(move.to_slot);
  }
  session.moves.clear();
  // The session's pin clock, in slot order like the reference's
  // release_pins: deferred pins survive one more pass, the rest go back.
  // Deferrals end in any order (each touches only its own slot); releases
  // refile slots, so they go in slot order, and only they are sorted.
  int32_t released = 0;
  sorted_pins_.clear();
  for (auto& [slot, pin] : session.pins) {
    if (pin.deferred) {
      pin.deferred = false;
      (void)pool_.EndDeferral(slot);
    } else {
      sorted_pins_.emplace_back(slot, &pin);
    }
  }
  SortBySlot(sorted_pins_, sort_scratch_,
             [](const auto& p) { return p.first; });
  for (const auto& [slot, pin] : sorted_pins_) {
    (void)pool_.ReleasePin(slot, pin->count);
    released += pin->count;
    // Its readers forget it: the slot may be handed to someone else now.
    for (Request* reader : pin->readers) reader->fork_src = -1;
    session.pins.erase(slot);
  }
  sorted_pins_.clear();
  result->set_pins_released(released);
  return absl::OkStatus();
}

absl::Status StateCache::Apply(Session& session, absl::string_view request_id,
                               const v1::Admit& op, v1::AdmitResult* result) {
  RETURN_IF_ERROR(CheckRequestId(request_id));
  if (session.requests.contains(request_id)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "request '", request_id, "' is already admitted in this session"));
  }
  if (op.width() < 1 || op.width() > pool_.num_slots()) {
    return absl::InvalidArgumentError(
        absl::StrCat("width must be in [1, ", pool_.num_slots(),
                     "] (the pool's size), got ", op.width()));
  }
  if (op.num_tokens() < 0 || op.anchor_pos() < 0) {
    return absl::InvalidArgumentError("num_tokens and anchor_pos must be >= 0");
  }
  if (op.kv_hit_blocks() < 0 || op.kv_hit_blocks() > op.block_hashes_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_hit_blocks ", op.kv_hit_blocks(), " outside [0, ",
                     op.block_hashes_size(), "] (the block hashes given)"));
  }
  RETURN_IF_ERROR(CheckHashes(op.block_hashes(), "block_hashes"));
  if (draining_) {
    return absl::UnavailableError("the daemon is draining: not admitting");
  }
  if (pool_.NumFree() < op.width()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("admit needs ", op.width(), " free slots, ",
                     pool_.NumFree(), " are free; admit it later"));
  }

  auto request = std::make_unique<Request>();
  request->id = std::string(request_id);
  request->seqno = next_request_seqno_++;
  request->num_tokens = op.num_tokens();
  request->anchor_pos = op.anchor_pos();
  const Sequence seq = SequenceOf(*request);
  const absl::Span<const int64_t> hashes(op.block_hashes().data(),
                                         op.block_hashes_size());
  // Every call below is checked above or cannot fail on what was checked.
  int64_t hit = *pool_.ResumableHit(seq, op.kv_hit_blocks(), hashes, false);
  int64_t src = -1;
  bool src_pinned = false;
  if (hit > 0) {
    src = *pool_.Lookup(hashes[hit - 1]);
    const bool in_range = src >= 0 && src < pool_.num_slots();
    src_pinned = in_range && *pool_.IsPinned(src);
    // A checkpoint whose slot is live (adopted by a request that still runs
    // in it) cannot be read: treat the hit as a miss.
    if (!in_range || (!src_pinned && !*pool_.IsFree(src))) {
      hit = 0;
      src = -1;
    }
  }
  ResumeOutcome outcome = ResumeOutcome::kMiss;
  if (hit > 0) {
    (void)pool_.Promote(src);
    if (!src_pinned) (void)pool_.Claim(src);
    if (pool_.NumFree() >= op.width()) {
      request->slots = *pool_.PopMany(op.width());
      (void)pool_.Pin(src, /*reader_is_next_batch=*/false);
      SessionPin& pin = session.pins[src];
      ++pin.count;
      pin.readers.push_back(request.get());
      request->fork_src = src;
      outcome = ResumeOutcome::kFork;
    } else {
      // Too few slots to fork: continue in the checkpoint's own slot. Only
      // reachable when it was claimed (a pinned source costs no free slot).
      // The forward will overwrite it, so it stops being a checkpoint (as
      // ATOM's BlockManager does).
      (void)pool_.Invalidate(src);
      request->slots.resize(op.width());
      request->slots[0] = src;
      (void)pool_.PopMany(op.width() - 1,
                          absl::MakeSpan(request->slots).subspan(1));
      outcome = ResumeOutcome::kAdopt;
    }
  } else {
    request->slots = *pool_.PopMany(op.width());
  }
  if (op.kv_hit_blocks() > 0) {
    counters_.resume_blocks_wanted += op.kv_hit_blocks();
    counters_.resume_blocks_resumed += hit;
    switch (outcome) {
      case ResumeOutcome::kFork:
        ++counters_.resumes_fork;
        break;
      case ResumeOutcome::kAdopt:
        ++counters_.resumes_adopt;
        break;
      case ResumeOutcome::kMiss:
        ++counters_.resumes_miss;
        break;
    }
    for (StateCacheObserver* o : observers_) {
      o->OnResume(outcome, op.kv_hit_blocks(), hit);
    }
  }
  for (int32_t i = 0; i < static_cast<int32_t>(request->slots.size()); ++i) {
    SetOwner(request->slots[i], &session, request.get(), i);
  }
  result->mutable_slots()->Add(request->slots.begin(), request->slots.end());
  result->set_fork_src(request->fork_src);
  result->set_blocks_resumed(static_cast<int32_t>(hit));
  result->set_adopted(outcome == ResumeOutcome::kAdopt);
  session.requests.emplace(request->id, std::move(request));
  return absl::OkStatus();
}

absl::Status StateCache::Apply(Session& session, absl::string_view request_id,
                               const v1::Reserve& op,
                               v1::ReserveResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(session, request_id));
  std::vector<std::pair<int64_t, int64_t>> positions;
  positions.reserve(op.positions_size());
  for (const v1::MidstepPosition& p : op.positions()) {
    if (p.hash() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "position ", p.position(), " has negative hash ", p.hash()));
    }
    positions.emplace_back(p.position(), p.hash());
  }
  // Earlier unpublished reservations are superseded.
  if (!request->reservations.empty()) {
    for (const Reservation& r : request->reservations) ClearOwner(r.slot);
    (void)pool_.CancelMidstep(request->reservations);
    request->reservations.clear();
  }
  ASSIGN_OR_RETURN(request->reservations,
                   pool_.ReserveMidstep(SequenceOf(*request), positions));
  for (const Reservation& r : request->reservations) {
    SetOwner(r.slot, &session, request, -1);
    v1::Reservation* out = result->add_reservations();
    out->set_slot(r.slot);
    out->set_position(r.position);
    out->set_hash(r.hash);
  }
  return absl::OkStatus();
}

absl::Status StateCache::Apply(Session& session, absl::string_view request_id,
                               const v1::Publish& op,
                               v1::PublishResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(session, request_id));
  std::optional<Sequence> seq;
  if (!op.keep_all()) seq = SequenceOf(*request);
  RETURN_IF_ERROR(pool_.PublishMidstep(request->reservations, seq));
  for (const Reservation& r : request->reservations) ClearOwner(r.slot);
  result->set_published(static_cast<int32_t>(request->reservations.size()));
  request->reservations.clear();
  return absl::OkStatus();
}

absl::Status StateCache::Apply(Session& session, absl::string_view request_id,
                               const v1::Cancel& op, v1::CancelResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(session, request_id));
  RETURN_IF_ERROR(pool_.CancelMidstep(request->reservations));
  for (const Reservation& r : request->reservations) ClearOwner(r.slot);
  result->set_cancelled(static_cast<int32_t>(request->reservations.size()));
  request->reservations.clear();
  return absl::OkStatus();
}

absl::Status StateCache::Apply(Session& session, absl::string_view request_id,
                               const v1::Checkpoint& op,
                               v1::CheckpointResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(session, request_id));
  if (op.anchor_pos() < 0) {
    return absl::InvalidArgumentError("anchor_pos must be >= 0");
  }
  Sequence seq = SequenceOf(*request);
  if (op.anchor_pos() != 0) seq.midstep_anchor_pos = op.anchor_pos();
  ASSIGN_OR_RETURN(CheckpointResult forked,
                   pool_.Checkpoint(seq, op.boundary_blocks(), op.hash()));
  result->set_state_slot(forked.state_slot);
  result->set_fork_src(forked.state_fork_src);
  result->set_kept(forked.state_fork_src >= 0);
  if (forked.state_fork_src < 0) return absl::OkStatus();
  const int64_t old = forked.state_fork_src;
  request->slots[0] = forked.state_slot;
  SetOwner(forked.state_slot, &session, request, 0);
  ClearOwner(old);
  // The request now reads `old` next; an earlier source stays on the clock.
  if (request->fork_src >= 0) session.RemoveReader(request->fork_src, request);
  SessionPin& pin = session.pins[old];
  ++pin.count;
  pin.deferred = true;
  pin.readers.push_back(request);
  request->fork_src = old;
  return absl::OkStatus();
}

absl::Status StateCache::Apply(Session& session, absl::string_view request_id,
                               const v1::AdoptForkSource& op,
                               v1::AdoptForkSourceResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(session, request_id));
  const int64_t src = request->fork_src;
  if (src < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "request '", request->id, "' has no fork source to adopt"));
  }
  auto pin = session.pins.find(src);
  const int64_t pool_pins = *pool_.PinCount(src);
  if (pin == session.pins.end() || pin->second.count != 1 || pool_pins != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "fork source ", src, " of request '", request->id, "' has ", pool_pins,
        " readers; it can be taken over only by its only reader"));
  }
  // ATOM's cancel_state_fork: the fresh slot goes back, the source stops
  // being a checkpoint (the request writes it from now on), the pin goes.
  const int64_t fresh = request->slots[0];
  (void)pool_.Release(fresh);
  (void)pool_.Invalidate(src);
  (void)pool_.Unpin(src);
  session.pins.erase(pin);
  ClearOwner(fresh);
  request->slots[0] = src;
  request->fork_src = -1;
  SetOwner(src, &session, request, 0);
  result->set_state_slot(src);
  return absl::OkStatus();
}

absl::Status StateCache::Apply(Session& session, absl::string_view request_id,
                               const v1::Release& op,
                               v1::ReleaseResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(session, request_id));
  result->set_slots_released(static_cast<int32_t>(
      request->slots.size() + request->reservations.size()));
  ReleaseRequest(session, *request);
  session.requests.erase(request_id);
  return absl::OkStatus();
}

void StateCache::ReleaseRequest(Session& session, Request& request) {
  // As the reference's caller deallocates: reservations back vacant, the
  // slot set back to the pool, then drop the request as a reader.
  if (!request.reservations.empty()) {
    for (const Reservation& r : request.reservations) ClearOwner(r.slot);
    (void)pool_.CancelMidstep(request.reservations);
    request.reservations.clear();
  }
  for (int64_t slot : request.slots) ClearOwner(slot);
  (void)pool_.ReleaseMany(request.slots);
  request.slots.clear();
  if (request.fork_src >= 0) {
    const int64_t src = request.fork_src;
    auto pin = session.pins.find(src);
    if (pin != session.pins.end()) {
      (void)pool_.DropReader(src);
      pin->second.RemoveReader(&request);
      if (--pin->second.count == 0) session.pins.erase(pin);
    }
    request.fork_src = -1;
  }
}

// ------------------------------------------------------------------ copies

absl::StatusOr<uint64_t> StateCache::RunCopy(
    absl::Span<const std::pair<int64_t, int64_t>> pairs, CopyReason reason) {
  ASSIGN_OR_RETURN(CopyResult done, device_->Copy(pairs));
  for (StateCacheObserver* o : observers_) {
    o->OnCopy(reason, static_cast<int64_t>(done.bytes),
              absl::ToDoubleSeconds(done.elapsed));
  }
  return done.bytes;
}

absl::Status StateCache::Apply(Session& session, absl::string_view request_id,
                               const v1::Copy& op, v1::CopyResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(session, request_id));
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        "copy: this daemon runs without state memory");
  }
  const int32_t n = static_cast<int32_t>(request->slots.size());
  if (op.from_index() < 0 || op.from_index() >= n || op.to_index() < 0 ||
      op.to_index() >= n || op.from_index() == op.to_index()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "copy: indices ", op.from_index(), " -> ", op.to_index(),
        " must be two different indices of the request's ", n, " slots"));
  }
  const std::pair<int64_t, int64_t> pair{request->slots[op.from_index()],
                                         request->slots[op.to_index()]};
  ASSIGN_OR_RETURN(uint64_t bytes, RunCopy({&pair, 1}, CopyReason::kCopy));
  result->set_bytes(bytes);
  return absl::OkStatus();
}

absl::Status StateCache::Apply(Session& session, absl::string_view request_id,
                               const v1::Snapshot& op,
                               v1::SnapshotResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(session, request_id));
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        "snapshot: this daemon runs without state memory");
  }
  if (op.hash() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot: hash ", op.hash(), " is negative"));
  }
  if (!pool_.transfer().readable_midstep()) {
    return absl::FailedPreconditionError(
        "snapshot: built on the midstep primitives, which this daemon's "
        "transfer (readable_midstep=false) does not allow");
  }
  // The core's own primitives: reserve a destination (pop), copy the
  // committed slot into it, publish it under the hash (index + LRU rules).
  const Sequence seq = SequenceOf(*request);
  const std::pair<int64_t, int64_t> position{op.position(), op.hash()};
  ASSIGN_OR_RETURN(std::vector<Reservation> reserved,
                   pool_.ReserveMidstep(seq, {&position, 1}));
  if (reserved.empty()) {  // nothing free: counted as dropped by the pool
    result->set_slot(-1);
    result->set_kept(false);
    return absl::OkStatus();
  }
  const std::pair<int64_t, int64_t> pair{request->slots[0], reserved[0].slot};
  absl::StatusOr<uint64_t> copied = RunCopy({&pair, 1}, CopyReason::kSnapshot);
  if (!copied.ok()) {
    (void)pool_.CancelMidstep(reserved);  // nothing filed over unwritten bytes
    return copied.status();
  }
  RETURN_IF_ERROR(pool_.PublishMidstep(reserved, seq));
  result->set_slot(reserved[0].slot);
  result->set_kept(true);
  return absl::OkStatus();
}

void StateCache::FillMemory(v1::StateMemory* memory) const {
  const RegionExport region = device_->Export();
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

void StateCache::Resize(const v1::ResizeRequest& request, ResizeDone done) {
  v1::ResizeResponse response;
  absl::Status status;
  std::function<void()> finished;
  {
    absl::MutexLock lock(&mu_);
    const int64_t target = request.target_slots();
    const int64_t from = pool_.num_slots();
    response.set_num_slots(from);
    if (target < 1 || target > options_.max_slots) {
      status = absl::InvalidArgumentError(
          absl::StrCat("target_slots must be in [1, ", options_.max_slots,
                       "], got ", target));
    } else if (resize_) {
      status = absl::AbortedError(absl::StrCat(
          "a resize to ", resize_->target, " slots is already in progress"));
    } else if (target == from) {
      // Nothing to do.
    } else if (target > from) {
      // Grow: the memory first, so a pool slot never lacks its bytes; if the
      // memory cannot follow, the pool stays as it was.
      if (device_ != nullptr) status = device_->Resize(target);
      if (status.ok()) {
        (void)pool_.Extend(target - from);
        if (static_cast<int64_t>(owners_.size()) < target) {
          owners_.resize(target);
        }
        response.set_num_slots(pool_.num_slots());
        for (StateCacheObserver* o : observers_) {
          o->OnResize(from, target);
          if (device_ != nullptr) {
            o->OnStateBytes(static_cast<int64_t>(device_->CommittedBytes()));
          }
        }
      }
    } else {
      resize_ = std::make_unique<PendingResize>();
      resize_->target = target;
      resize_->from = from;
      const int64_t deadline_ms =
          request.deadline_ms() > 0 ? request.deadline_ms() : 10000;
      resize_->deadline = clock_->Now() + absl::Milliseconds(deadline_ms);
      resize_->done = std::move(done);
      resize_->evicted_before = pool_.Fates().evicted;
      if (AdvanceResize()) finished = FinishResize(absl::OkStatus());
      if (!finished) return;  // completes from a later Step, Tick or detach
    }
  }
  if (finished) {
    finished();
  } else {
    done(status, response);
  }
}

bool StateCache::AdvanceResize() {
  PendingResize& r = *resize_;
  const int64_t from = pool_.num_slots();
  // Relocations are copied in batches; a pair whose source or destination a
  // pending pair already touches (a slot moved twice) flushes the batch
  // first, so each batch is order-independent.
  std::vector<std::pair<int64_t, int64_t>> batch;
  absl::flat_hash_set<int64_t> touched;
  auto flush = [&] {
    if (batch.empty()) return;
    absl::StatusOr<uint64_t> copied = RunCopy(batch, CopyReason::kRelocation);
    if (!copied.ok()) {
      // The pool has moved on; a failed device copy is an internal error
      // that the resize result reports.
      r.copy_error = copied.status();
    }
    batch.clear();
    touched.clear();
  };
  while (pool_.num_slots() > r.target) {
    const int64_t top = pool_.num_slots() - 1;
    // A reservation's forward may be writing its slot: wait for its publish
    // or cancel rather than move bytes under it.
    const SlotOwner& owner = owners_[top];
    if (owner.request != nullptr && owner.index < 0) break;
    auto retired = pool_.RetireTop();
    if (!retired.ok() || !retired->has_value()) break;
    const SlotRetirement& ret = **retired;
    if (ret.relocated_to >= 0) {
      r.response.set_relocated(r.response.relocated() + 1);
      if (device_ != nullptr) {
        if (touched.contains(ret.retired) ||
            touched.contains(ret.relocated_to)) {
          flush();
        }
        batch.emplace_back(ret.retired, ret.relocated_to);
        touched.insert(ret.retired);
        touched.insert(ret.relocated_to);
      }
      if (!ret.held_checkpoint && owner.request != nullptr) {
        SlotOwner moved = owner;
        moved.request->slots[moved.index] = ret.relocated_to;
        moved.session->moves.push_back(PendingMove{
            moved.request->id, moved.index, ret.retired, ret.relocated_to});
        ClearOwner(ret.retired);
        SetOwner(ret.relocated_to, moved.session, moved.request, moved.index);
      }
    }
  }
  flush();
  if (device_ != nullptr && pool_.num_slots() != from) {
    // The tail's content has moved down: give its memory back.
    if (absl::Status st = device_->Resize(pool_.num_slots()); !st.ok()) {
      r.copy_error = st;
    }
    for (StateCacheObserver* o : observers_) {
      o->OnStateBytes(static_cast<int64_t>(device_->CommittedBytes()));
    }
  }
  return pool_.num_slots() == r.target;
}

std::function<void()> StateCache::FinishResize(absl::Status status) {
  std::unique_ptr<PendingResize> r = std::move(resize_);
  if (status.ok() && !r->copy_error.ok()) {
    status = absl::InternalError(
        absl::StrCat("resize reached its target but the state memory failed: ",
                     r->copy_error.ToString()));
  }
  r->response.set_num_slots(pool_.num_slots());
  if (pool_.num_slots() != r->from) {
    for (StateCacheObserver* o : observers_) {
      o->OnResize(r->from, pool_.num_slots());
    }
  }
  r->response.set_evicted(pool_.Fates().evicted - r->evicted_before);
  return [r = std::shared_ptr<PendingResize>(std::move(r)),
          status = std::move(status)] { r->done(status, r->response); };
}

// ------------------------------------------------------------------ upkeep

std::vector<std::function<void()>> StateCache::TickLocked() {
  std::vector<std::function<void()>> done;
  const absl::Time now = clock_->Now();
  std::vector<std::string> lapsed;
  for (const auto& [id, session] : sessions_) {
    if (now - session->last_seen > options_.lease_ttl) lapsed.push_back(id);
  }
  for (const std::string& id : lapsed) {
    ++counters_.lease_expiries;
    EndSession(id, SessionEnd::kExpired);
  }
  if (resize_) {
    if (AdvanceResize()) {
      done.push_back(FinishResize(absl::OkStatus()));
    } else if (now >= resize_->deadline) {
      const int64_t target = resize_->target;
      done.push_back(FinishResize(absl::DeadlineExceededError(absl::StrCat(
          "resize reached ", pool_.num_slots(), " slots of target ", target,
          " before its deadline; the top slot is pinned or live with nowhere "
          "to go (slots given up so far stay given up)"))));
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
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [id, session] : sessions_) {
    next = std::min(next, session->last_seen + options_.lease_ttl);
  }
  if (resize_) next = std::min(next, resize_->deadline);
  return next;
}

void StateCache::SetDraining(bool draining) {
  absl::MutexLock lock(&mu_);
  draining_ = draining;
}

void StateCache::Drain(const v1::DrainRequest& request,
                       v1::DrainResponse* response) {
  absl::MutexLock lock(&mu_);
  draining_ = !request.resume();
  int64_t requests = 0;
  for (const auto& [id, session] : sessions_) {
    requests += static_cast<int64_t>(session->requests.size());
  }
  response->set_draining(draining_);
  response->set_requests(requests);
}

// ------------------------------------------------------------------ stats

void StateCache::GetStats(v1::GetStatsResponse* response) {
  absl::MutexLock lock(&mu_);
  response->set_epoch(epoch_);
  response->set_uptime_seconds(
      absl::ToDoubleSeconds(clock_->Now() - start_time_));
  const CheckpointFates fates = pool_.Fates();
  response->set_checkpoints_kept(fates.kept);
  response->set_checkpoints_dropped(fates.dropped);
  response->set_checkpoints_evicted(fates.evicted);
  response->set_checkpoints_orphaned(fates.orphaned);
  const Occupancy occ = pool_.GetOccupancy();
  response->set_slots_total(occ.total);
  response->set_slots_used(occ.used);
  response->set_slots_held(occ.held);
  response->set_slots_vacant(occ.vacant);
  response->set_sessions(static_cast<int32_t>(sessions_.size()));
  int64_t requests = 0;
  for (const auto& [id, session] : sessions_) {
    requests += static_cast<int64_t>(session->requests.size());
  }
  response->set_requests(requests);
  FillTransfer(pool_.transfer(), response->mutable_transfer());
  *response->mutable_identity() = options_.identity;
  response->set_indexed_hashes(pool_.NumIndexed());
  response->set_resumes_fork(counters_.resumes_fork);
  response->set_resumes_adopt(counters_.resumes_adopt);
  response->set_resumes_miss(counters_.resumes_miss);
  response->set_lease_expiries(counters_.lease_expiries);
  response->set_sessions_evicted(counters_.sessions_evicted);
  response->set_resume_blocks_wanted(counters_.resume_blocks_wanted);
  response->set_resume_blocks_resumed(counters_.resume_blocks_resumed);
  response->set_draining(draining_);
  response->set_max_slots(options_.max_slots);
  if (device_ != nullptr) {
    response->set_state_bytes(device_->CommittedBytes());
    response->set_backend(std::string(device_->backend()));
    response->set_layout_name(device_->layout().name());
    response->set_bytes_per_slot(device_->layout().bytes_per_slot());
    response->set_max_slots(
        std::min<int64_t>(options_.max_slots, device_->max_slots()));
  } else {
    response->set_backend("none");
  }
}

void StateCache::ListSessions(v1::ListSessionsResponse* response) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  std::vector<const Session*> sorted;
  for (const auto& [id, session] : sessions_) sorted.push_back(session.get());
  std::sort(sorted.begin(), sorted.end(),
            [](const Session* a, const Session* b) {
              return a->attached_at != b->attached_at
                         ? a->attached_at < b->attached_at
                         : a->id < b->id;
            });
  for (const Session* session : sorted) {
    v1::SessionInfo* info = response->add_sessions();
    info->set_session_id(session->id);
    info->set_client_name(session->client_name);
    info->set_requests(static_cast<int64_t>(session->requests.size()));
    int64_t slots = 0;
    for (const auto& [rid, request] : session->requests) {
      slots += static_cast<int64_t>(request->slots.size() +
                                    request->reservations.size());
    }
    info->set_slots(slots);
    int64_t pins = 0;
    for (const auto& [slot, pin] : session->pins) pins += pin.count;
    info->set_pins(pins);
    info->set_attached_seconds(
        absl::ToDoubleSeconds(now - session->attached_at));
    info->set_idle_seconds(absl::ToDoubleSeconds(now - session->last_seen));
    info->set_lease_remaining_ms(std::max<int64_t>(
        0, absl::ToInt64Milliseconds(session->last_seen + options_.lease_ttl -
                                     now)));
  }
}

PoolSnapshot StateCache::DumpPool() const {
  absl::MutexLock lock(&mu_);
  return pool_.Dump();
}

namespace {

// "[(a,b) (c,d)]" for a dump's pairs.
std::string Pairs(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  return absl::StrCat(
      "[",
      absl::StrJoin(pairs, " ",
                    [](std::string* out, const std::pair<int64_t, int64_t>& p) {
                      absl::StrAppend(out, "(", p.first, ",", p.second, ")");
                    }),
      "]");
}

std::string List(const std::vector<int64_t>& values) {
  return absl::StrCat("[", absl::StrJoin(values, " "), "]");
}

}  // namespace

std::string StateCache::DebugDump() const {
  absl::MutexLock lock(&mu_);
  const PoolSnapshot pool = pool_.Dump();
  std::string out = absl::StrCat(
      "pool num_slots=", pool.num_slots, " free=", List(pool.free),
      " checkpointed=", List(pool.checkpointed),
      " speculative=", List(pool.speculative),
      " hash_to_slot=", Pairs(pool.hash_to_slot),
      " slot_hash=", List(pool.slot_hash), " pinned=", Pairs(pool.pinned),
      " deferred=", List(pool.deferred),
      " relocations=", Pairs(pool.relocations), " fates=", pool.fates.kept, "/",
      pool.fates.dropped, "/", pool.fates.evicted, "/", pool.fates.orphaned,
      "\n");
  // Hash maps iterate in no fixed order: sort by id (and slot).
  std::vector<const Session*> sessions;
  for (const auto& [id, session] : sessions_) sessions.push_back(session.get());
  std::sort(sessions.begin(), sessions.end(),
            [](const Session* a, const Session* b) { return a->id < b->id; });
  for (const Session* session : sessions) {
    absl::StrAppend(&out, "session ", session->id, "\n");
    std::vector<const Request*> requests;
    for (const auto& [id, request] : session->requests) {
      requests.push_back(request.get());
    }
    std::sort(requests.begin(), requests.end(),
              [](const Request* a, const Request* b) { return a->id < b->id; });
    for (const Request* r : requests) {
      absl::StrAppend(&out, "  request ", r->id, " seqno=", r->seqno,
                      " slots=", List(r->slots), " fork_src=", r->fork_src,
                      " tokens=", r->num_tokens, " anchor=", r->anchor_pos,
                      " reservations=[");
      for (const Reservation& v : r->reservations) {
        absl::StrAppend(&out, "(", v.slot, ",", v.position, ",", v.hash, ")");
      }
      absl::StrAppend(&out, "]\n");
    }
    std::vector<int64_t> pinned;
    for (const auto& [slot, pin] : session->pins) pinned.push_back(slot);
    std::sort(pinned.begin(), pinned.end());
    for (int64_t slot : pinned) {
      const SessionPin& pin = session->pins.at(slot);
      std::vector<std::string> readers;
      for (const Request* reader : pin.readers) readers.push_back(reader->id);
      std::sort(readers.begin(), readers.end());
      absl::StrAppend(&out, "  pin ", slot, " count=", pin.count,
                      " deferred=", pin.deferred, " readers=[",
                      absl::StrJoin(readers, " "), "]\n");
    }
    for (const PendingMove& m : session->moves) {
      absl::StrAppend(&out, "  move ", m.request_id, "[", m.index, "] ",
                      m.from_slot, "->", m.to_slot, "\n");
    }
  }
  return out;
}

absl::Status StateCache::CheckInvariants() const {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(pool_.CheckInvariants());
  // Every session pin is a pool pin, and the pool holds no pin nobody owns.
  absl::flat_hash_map<int64_t, int64_t> pins;
  int64_t owned = 0;  // slots and reservations requests hold
  for (const auto& [id, session] : sessions_) {
    for (const auto& [slot, pin] : session->pins) {
      if (pin.count <= 0) {
        return absl::InternalError(absl::StrCat("session pin of slot ", slot,
                                                " has count ", pin.count));
      }
      pins[slot] += pin.count;
      if (pin.readers.size() > static_cast<size_t>(pin.count)) {
        return absl::InternalError(
            absl::StrCat("slot ", slot, " has ", pin.readers.size(),
                         " readers but ", pin.count, " pins in session ", id));
      }
      for (const Request* reader : pin.readers) {
        auto req = session->requests.find(reader->id);
        if (req == session->requests.end() || req->second.get() != reader ||
            reader->fork_src != slot) {
          return absl::InternalError(absl::StrCat(
              "reader '", reader->id, "' of slot ", slot, " does not read it"));
        }
      }
    }
    for (const auto& [rid, request] : session->requests) {
      for (size_t i = 0; i < request->slots.size(); ++i) {
        const int64_t slot = request->slots[i];
        if (slot < 0 || slot >= pool_.num_slots() || *pool_.IsFree(slot)) {
          return absl::InternalError(absl::StrCat("request '", rid,
                                                  "' holds slot ", slot,
                                                  " the pool says is free "
                                                  "or out of range"));
        }
        const SlotOwner& owner = owners_[slot];
        if (owner.request != request.get() ||
            owner.index != static_cast<int32_t>(i)) {
          return absl::InternalError(
              absl::StrCat("owner table disagrees for slot ", slot));
        }
        ++owned;
      }
      for (const Reservation& r : request->reservations) {
        if (r.slot < 0 || r.slot >= static_cast<int64_t>(owners_.size()) ||
            owners_[r.slot].request != request.get() ||
            owners_[r.slot].index != -1) {
          return absl::InternalError(
              absl::StrCat("owner table disagrees for reserved slot ", r.slot));
        }
        ++owned;
      }
    }
  }
  // ...and it names nobody else: a stale entry would re-point the wrong
  // request when a shrink relocates that slot.
  int64_t owner_entries = 0;
  for (const SlotOwner& owner : owners_)
    owner_entries += owner.request != nullptr;
  if (owner_entries != owned) {
    return absl::InternalError(absl::StrCat("owner table names ", owner_entries,
                                            " slots, requests hold ", owned));
  }
  const PoolSnapshot snap = pool_.Dump();
  if (static_cast<int64_t>(snap.pinned.size()) !=
      static_cast<int64_t>(pins.size())) {
    return absl::InternalError("pool pins and session pins disagree");
  }
  for (const auto& [slot, count] : snap.pinned) {
    auto it = pins.find(slot);
    if (it == pins.end() || it->second != count) {
      return absl::InternalError(absl::StrCat(
          "slot ", slot, " has ", count, " pool pins but sessions hold ",
          it == pins.end() ? 0 : it->second));
    }
  }
  return absl::OkStatus();
}

}  // namespace statecache

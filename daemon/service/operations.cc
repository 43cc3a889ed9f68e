#include "daemon/service/operations.h"

#include <array>
#include <limits>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/service/operation_timing.h"

namespace statecache {

int64_t HashListLength(const v1::Operation& operation) {
  switch (operation.kind_case()) {
    case v1::Operation::kAdmit:
      return operation.admit().block_hashes_size();
    case v1::Operation::kResumableHit:
      return operation.resumable_hit().block_hashes_size();
    case v1::Operation::kReserve:
      return operation.reserve().positions_size();
    case v1::Operation::kUnindex:
      return operation.unindex().hashes_size();
    default:
      return 0;
  }
}
namespace {

constexpr size_t kMaxIdBytes = 256;

absl::Status CheckRequestId(absl::string_view id) {
  if (id.empty()) return absl::InvalidArgumentError("request_id is empty");
  if (id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request_id is ", id.size(), " bytes; at most ", kMaxIdBytes));
  }
  return absl::OkStatus();
}

absl::Span<const int64_t> Hashes(
    const google::protobuf::RepeatedField<int64_t>& hashes) {
  return absl::MakeConstSpan(hashes.data(), hashes.size());
}

// Refuses what would take the session past its slot quota: what its
// requests hold (slots and reservations) and the fork sources its pin clock
// holds, since a pin keeps a slot from every other session as surely as a
// hold does (a session checkpointing without begin_pass would otherwise pin
// the whole pool past any quota).
bool WithinQuota(const OperationContext& c, int64_t more) {
  const int64_t quota = c.max_slots_per_session;
  const int64_t kept =
      c.session.held_slots + static_cast<int64_t>(c.session.pins.size());
  return quota <= 0 || kept + more <= quota;
}

absl::Status CheckQuota(const OperationContext& c, int64_t more,
                        const char* what) {
  if (WithinQuota(c, more)) return absl::OkStatus();
  const int64_t held = c.session.held_slots;
  const auto pinned = static_cast<int64_t>(c.session.pins.size());
  return absl::ResourceExhaustedError(absl::StrCat(
      what, " needs ", more, " more slots; this session holds ", held,
      " slots and ", pinned, " pinned fork sources of its quota of ",
      c.max_slots_per_session,
      " (--max_slots_per_session): release requests, or begin_pass to "
      "return the pins of forks already read"));
}

void CountResume(OperationContext& c, const Admission& admitted,
                 int64_t wanted) {
  ServiceCounters& n = c.counters;
  n.set_resume_blocks_wanted(n.resume_blocks_wanted() + wanted);
  n.set_resume_blocks_resumed(n.resume_blocks_resumed() +
                              admitted.blocks_resumed);
  switch (admitted.outcome) {
    case ResumeOutcome::kFork:
      n.set_resumes_fork(n.resumes_fork() + 1);
      break;
    case ResumeOutcome::kAdopt:
      n.set_resumes_adopt(n.resumes_adopt() + 1);
      break;
    case ResumeOutcome::kTier:
      n.set_resumes_tier(n.resumes_tier() + 1);
      break;
    case ResumeOutcome::kMiss:
    case ResumeOutcome::kCold:
      n.set_resumes_miss(n.resumes_miss() + 1);
      break;
  }
  for (ResumeObserver* o : c.resume_observers) {
    o->OnResume(admitted.outcome, wanted, admitted.blocks_resumed);
  }
}

// ------------------------------------------------------------------ handlers
//
// One per kind, all of one shape: (context, request id, operation, result).
// Kinds that name no request get an empty id.

absl::Status BeginPass(OperationContext& c, absl::string_view,
                       const v1::BeginPass&, v1::BeginPassResult* result) {
  // The pins first: the slots they free are where a move can go.
  ASSIGN_OR_RETURN(int32_t released, TickPinClock(c.memory, c.session, c.pins));
  result->set_pins_released(released);
  // Whether the shrink is over is the Step's to find out, after the pass.
  if (c.shrink != nullptr) {
    c.shrink->Advance(c.memory, c.resize_observers, &c.session);
  }
  for (const PendingMove& move : c.session.moves) {
    v1::SlotMove* out = result->add_moves();
    out->set_request_id(move.request_id);
    out->set_index(move.index);
    out->set_from_slot(move.from_slot);
    out->set_to_slot(move.to_slot);
  }
  c.session.moves.clear();
  return absl::OkStatus();
}

// Drops `request`'s current continuation checkpoint, if any (counted
// superseded when the device still had it), and makes (hash, slot) its
// continuation (-1, -1: none). Returns whether one was dropped.
absl::StatusOr<bool> ReplaceContinuation(OperationContext& c, Request& request,
                                         int64_t hash, int64_t slot) {
  bool dropped = false;
  if (request.continuation_hash >= 0 && request.continuation_hash != hash) {
    ASSIGN_OR_RETURN(dropped, c.memory.Supersede(request.continuation_hash,
                                                 request.continuation_slot));
    if (dropped) {
      c.counters.set_checkpoints_superseded(
          c.counters.checkpoints_superseded() + 1);
    }
  }
  request.continuation_hash = hash;
  request.continuation_slot = slot;
  return dropped;
}

absl::Status Admit(OperationContext& c, absl::string_view id,
                   const v1::Admit& op, v1::AdmitResult* result) {
  RETURN_IF_ERROR(CheckRequestId(id));
  Session& session = c.session;
  if (session.requests.contains(id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("request '", id, "' is already admitted in this session"));
  }
  if (c.draining) {
    return absl::UnavailableError("the daemon is draining: not admitting");
  }
  if (c.max_slots_per_session > 0 && op.width() >= 1 &&
      op.width() <= c.memory.num_slots()) {
    RETURN_IF_ERROR(CheckQuota(c, op.width(), "admit"));
    // A resume may pin its checkpoint as the fork source, one slot more;
    // asked only when that slot is what the quota lacks.
    if (op.kv_hit_blocks() > 0 && !WithinQuota(c, op.width() + 1)) {
      absl::StatusOr<SlotMemory::Resumable> resumable = c.memory.ResumableHit(
          op.num_tokens(), op.kv_hit_blocks(), Hashes(op.block_hashes()),
          /*assume_checkpointed=*/false);
      if (resumable.ok() && resumable->blocks > 0) {
        RETURN_IF_ERROR(
            CheckQuota(c, op.width() + 1, "admit (resuming: its fork source)"));
      }
    }
  }
  auto request = std::make_unique<Request>();
  const AdmitSpec spec{.width = op.width(),
                       .num_tokens = op.num_tokens(),
                       .anchor_pos = op.anchor_pos(),
                       .kv_hit_blocks = op.kv_hit_blocks(),
                       .block_hashes = Hashes(op.block_hashes())};
  ASSIGN_OR_RETURN(Admission admitted, c.memory.Admit(*request, spec));
  request->id = std::string(id);
  request->seqno = c.next_request_seqno++;
  request->session = &session;
  if (request->fork_src >= 0) {
    AddReader(session, request->fork_src, request.get(), /*deferred=*/false);
  }
  if (op.kv_hit_blocks() > 0) CountResume(c, admitted, op.kv_hit_blocks());
  result->mutable_slots()->Add(request->slots.begin(), request->slots.end());
  result->set_fork_src(request->fork_src);
  result->set_blocks_resumed(static_cast<int32_t>(admitted.blocks_resumed));
  result->set_adopted(admitted.outcome == ResumeOutcome::kAdopt ||
                      admitted.outcome == ResumeOutcome::kTier);
  result->set_from_tier(admitted.outcome == ResumeOutcome::kTier);
  if (session.advised && c.branch_points != nullptr) {
    request->advice =
        AdvisePlacement(*c.branch_points, c.memory, spec,
                        admitted.blocks_resumed, c.advice_ladder_blocks);
    if (request->advice.branch_blocks > 0) {
      c.counters.set_branch_points_advised(c.counters.branch_points_advised() +
                                           1);
    }
    result->set_branch_blocks(
        static_cast<int32_t>(request->advice.branch_blocks));
    result->set_continuation_blocks(
        static_cast<int32_t>(request->advice.continuation_blocks));
    result->set_ladder_blocks(
        static_cast<int32_t>(request->advice.ladder_blocks));
  }
  session.held_slots += static_cast<int64_t>(request->slots.size());
  session.NameNext(request.get());
  session.requests.emplace(request->id, std::move(request));
  return absl::OkStatus();
}

absl::Status ResumableHit(OperationContext& c, absl::string_view,
                          const v1::ResumableHit& q,
                          v1::ResumableHitResult* result) {
  ASSIGN_OR_RETURN(
      const SlotMemory::Resumable resumable,
      c.memory.ResumableHit(q.num_tokens(), q.kv_hit_blocks(),
                            Hashes(q.block_hashes()), q.assume_checkpointed()));
  result->set_blocks(static_cast<int32_t>(resumable.blocks));
  result->set_tier_blocks(static_cast<int32_t>(resumable.tier_blocks));
  return absl::OkStatus();
}

absl::Status Lookup(OperationContext& c, absl::string_view,
                    const v1::Lookup& op, v1::LookupResult* result) {
  ASSIGN_OR_RETURN(int64_t slot, c.memory.Lookup(op.hash()));
  result->set_slot(slot);
  result->set_in_tier(c.memory.InHostTier(op.hash()));
  return absl::OkStatus();
}

absl::Status Reserve(OperationContext& c, absl::string_view id,
                     const v1::Reserve& op, v1::ReserveResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(c.session, id));
  std::vector<std::pair<int64_t, int64_t>> positions;
  positions.reserve(op.positions_size());
  for (const v1::MidstepPosition& p : op.positions()) {
    positions.emplace_back(p.position(), p.hash());
  }
  const auto superseded = static_cast<int64_t>(request->reservations.size());
  RETURN_IF_ERROR(CheckQuota(
      c, static_cast<int64_t>(positions.size()) - superseded, "reserve"));
  ASSIGN_OR_RETURN(absl::Span<const Reservation> reserved,
                   c.memory.Reserve(*request, positions));
  c.session.held_slots += static_cast<int64_t>(reserved.size()) - superseded;
  for (const Reservation& r : reserved) {
    v1::Reservation* out = result->add_reservations();
    out->set_slot(r.slot);
    out->set_position(r.position);
    out->set_hash(r.hash);
  }
  return absl::OkStatus();
}

absl::Status Publish(OperationContext& c, absl::string_view id,
                     const v1::Publish& op, v1::PublishResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(c.session, id));
  // An advised request's reservations at its advised positions are known;
  // the deepest at its continuation replaces its previous continuation.
  bool keep_all = op.keep_all();
  std::optional<Reservation> continuation;
  if (c.session.advised) {
    const int64_t block_size = c.memory.pool().hash_block_size();
    bool all_advised = !request->reservations.empty();
    for (const Reservation& r : request->reservations) {
      all_advised &= IsAdvisedPosition(request->advice, block_size, r.position);
      if (IsContinuation(request->advice, block_size, r.position) &&
          (!continuation || r.position > continuation->position)) {
        continuation = r;
      }
    }
    keep_all |= all_advised;
  }
  ASSIGN_OR_RETURN(int32_t published, c.memory.Publish(*request, keep_all));
  c.session.held_slots -= published;
  result->set_published(published);
  if (continuation) {
    RETURN_IF_ERROR(
        ReplaceContinuation(c, *request, continuation->hash, continuation->slot)
            .status());
  }
  return absl::OkStatus();
}

absl::Status Cancel(OperationContext& c, absl::string_view id,
                    const v1::Cancel&, v1::CancelResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(c.session, id));
  ASSIGN_OR_RETURN(int32_t cancelled, c.memory.Cancel(*request));
  c.session.held_slots -= cancelled;
  result->set_cancelled(cancelled);
  return absl::OkStatus();
}

absl::Status Checkpoint(OperationContext& c, absl::string_view id,
                        const v1::Checkpoint& op,
                        v1::CheckpointResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(c.session, id));
  // A fork moves the request to a fresh slot and pins the one it leaves.
  if (c.memory.pool().transfer().forks()) {
    RETURN_IF_ERROR(CheckQuota(c, 1, "checkpoint"));
  }
  // An advised request's checkpoint at an advised position is known; one
  // at its continuation replaces the previous one, dropped first so that
  // its slot can take the fork (SlotMemory::Checkpoint's own checks come
  // first: a refusal changes nothing).
  int64_t anchor_pos = op.anchor_pos();
  bool continuation = false;
  const int64_t block_size = c.memory.pool().hash_block_size();
  if (c.session.advised && op.boundary_blocks() >= 0 &&
      op.boundary_blocks() <=
          std::numeric_limits<int64_t>::max() / block_size &&
      op.hash() >= 0 && anchor_pos >= 0) {
    const int64_t position = op.boundary_blocks() * block_size;
    if (anchor_pos == 0 &&
        IsAdvisedPosition(request->advice, block_size, position)) {
      anchor_pos = position;
    }
    continuation = IsContinuation(request->advice, block_size, position) &&
                   c.memory.pool().transfer().forks() &&
                   !request->slots.empty();
    if (continuation && request->continuation_hash != op.hash()) {
      // A decode boundary takes the slot its predecessor gives back, or a
      // vacant one, or none (not kept, the predecessor kept; nothing was
      // wanted, so nothing counts as dropped): spending another checkpoint
      // for it would spend one at every boundary of a reply whose
      // predecessor a shortage took, or that a reader still pins.
      if (position > request->advice.continuation_blocks * block_size &&
          !c.memory.SupersedeVacates(request->continuation_hash,
                                     request->continuation_slot) &&
          c.memory.pool().GetOccupancy().vacant == 0) {
        result->set_state_slot(request->slots[0]);
        result->set_fork_src(-1);
        result->set_kept(false);
        return absl::OkStatus();
      }
      RETURN_IF_ERROR(ReplaceContinuation(c, *request, -1, -1).status());
    }
  }
  ASSIGN_OR_RETURN(CheckpointOutcome forked,
                   c.memory.Checkpoint(*request, anchor_pos,
                                       op.boundary_blocks(), op.hash()));
  result->set_state_slot(forked.state_slot);
  result->set_fork_src(forked.fork_src);
  result->set_kept(forked.kept);
  if (!forked.kept) return absl::OkStatus();
  if (continuation) {
    request->continuation_hash = op.hash();
    request->continuation_slot = forked.fork_src;
  }
  // The request reads the checkpoint next; an earlier source stays on the
  // clock (only this request stops reading it).
  if (forked.replaced_fork_src >= 0) {
    c.session.RemoveReader(forked.replaced_fork_src, request);
  }
  AddReader(c.session, forked.fork_src, request, /*deferred=*/true);
  return absl::OkStatus();
}

absl::Status ConsumeFork(OperationContext& c, absl::string_view id,
                         const v1::ConsumeFork&,
                         v1::ConsumeForkResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(c.session, id));
  result->set_fork_src(request->fork_src);
  if (request->fork_src >= 0) {
    // The forward has read it; the pin stays on the clock until the tick.
    c.session.RemoveReader(request->fork_src, request);
    request->fork_src = -1;
  }
  return absl::OkStatus();
}

absl::Status AdoptForkSource(OperationContext& c, absl::string_view id,
                             const v1::AdoptForkSource&,
                             v1::AdoptForkSourceResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(c.session, id));
  const int64_t src = request->fork_src;
  if (src < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "request '", request->id, "' has no fork source to adopt"));
  }
  auto pin = c.session.pins.find(src);
  ASSIGN_OR_RETURN(int64_t pool_pins, c.memory.pool().PinCount(src));
  if (pin == c.session.pins.end() || pin->second.count != 1 || pool_pins != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "fork source ", src, " of request '", request->id, "' has ", pool_pins,
        " readers; it can be taken over only by its only reader"));
  }
  ASSIGN_OR_RETURN(int64_t adopted, c.memory.AdoptForkSource(*request));
  c.session.pins.erase(pin);
  result->set_state_slot(adopted);
  return absl::OkStatus();
}

absl::Status Release(OperationContext& c, absl::string_view id,
                     const v1::Release&, v1::ReleaseResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(c.session, id));
  const auto slots = static_cast<int32_t>(request->slots.size() +
                                          request->reservations.size());
  RETURN_IF_ERROR(ReleaseRequest(c.memory, c.session, *request));
  result->set_slots_released(slots);
  c.session.requests.erase(id);
  return absl::OkStatus();
}

absl::Status Unindex(OperationContext& c, absl::string_view,
                     const v1::Unindex& op, v1::UnindexResult* result) {
  ASSIGN_OR_RETURN(int32_t orphaned, c.memory.Unindex(Hashes(op.hashes())));
  result->set_orphaned(orphaned);
  return absl::OkStatus();
}

absl::Status ClearIndex(OperationContext& c, absl::string_view,
                        const v1::ClearIndex&, v1::ClearIndexResult*) {
  c.memory.ClearIndex();
  // The prefixes placement advice remembers go with the checkpoints, so a
  // cleared daemon advises as a fresh one does.
  if (c.branch_points != nullptr) c.branch_points->Clear();
  return absl::OkStatus();
}

absl::Status Copy(OperationContext& c, absl::string_view id, const v1::Copy& op,
                  v1::CopyResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(c.session, id));
  ASSIGN_OR_RETURN(uint64_t bytes,
                   c.memory.Copy(*request, op.from_index(), op.to_index()));
  result->set_bytes(bytes);
  return absl::OkStatus();
}

absl::Status Snapshot(OperationContext& c, absl::string_view id,
                      const v1::Snapshot& op, v1::SnapshotResult* result) {
  ASSIGN_OR_RETURN(Request * request, FindRequest(c.session, id));
  ASSIGN_OR_RETURN(SnapshotOutcome snap,
                   c.memory.Snapshot(*request, op.position(), op.hash()));
  result->set_slot(snap.slot);
  result->set_kept(snap.kept);
  return absl::OkStatus();
}

// ------------------------------------------------------------------ table

// One operation kind: its oneof case, its message and result, where the
// list form keeps them, and its handler.
template <v1::Operation::KindCase kKind, typename OpT, typename ResultT,
          const OpT& (v1::Operation::*kGet)() const,
          ResultT* (v1::OperationResult::*kMutable)(),
          absl::Status (*kHandler)(OperationContext&, absl::string_view,
                                   const OpT&, ResultT*)>
struct Kind {
  static constexpr v1::Operation::KindCase kCase = kKind;
  using Op = OpT;
  using Result = ResultT;
  // The message and result a packed operation of this kind is read into.
  struct Scratch {
    Op op;
    Result result;
  };

  static absl::Status RunList(OperationContext& c, const v1::Operation& op,
                              v1::OperationResult* result) {
    const Op& kind_op = (op.*kGet)();
    if constexpr (requires { kind_op.request_id(); }) {
      return kHandler(c, kind_op.request_id(), kind_op, (result->*kMutable)());
    } else {
      return kHandler(c, {}, kind_op, (result->*kMutable)());
    }
  }

  static absl::Status RunPacked(OperationContext& c,
                                PackedOperationReader& reader,
                                PackedResultWriter& writer, Scratch& s) {
    absl::Status status;
    if constexpr (std::is_void_v<decltype(reader.Read(&s.op))>) {
      reader.Read(&s.op);
      status = kHandler(c, {}, s.op, &s.result);
    } else {  // a kind that names a request: its id, viewed in the column
      const std::string_view id = reader.Read(&s.op);
      status =
          kHandler(c, absl::string_view(id.data(), id.size()), s.op, &s.result);
    }
    if (status.ok()) {
      writer.Write(s.result);
    } else {
      writer.Refused(status);
    }
    s.result.Clear();
    return status;
  }
};

using O = v1::Operation;
using R = v1::OperationResult;

// Every operation kind, once. The tables below are built from this list.
using AllKinds = std::tuple<
    Kind<O::kBeginPass, v1::BeginPass, v1::BeginPassResult, &O::begin_pass,
         &R::mutable_begin_pass, &BeginPass>,
    Kind<O::kAdmit, v1::Admit, v1::AdmitResult, &O::admit, &R::mutable_admit,
         &Admit>,
    Kind<O::kResumableHit, v1::ResumableHit, v1::ResumableHitResult,
         &O::resumable_hit, &R::mutable_resumable_hit, &ResumableHit>,
    Kind<O::kLookup, v1::Lookup, v1::LookupResult, &O::lookup,
         &R::mutable_lookup, &Lookup>,
    Kind<O::kReserve, v1::Reserve, v1::ReserveResult, &O::reserve,
         &R::mutable_reserve, &Reserve>,
    Kind<O::kPublish, v1::Publish, v1::PublishResult, &O::publish,
         &R::mutable_publish, &Publish>,
    Kind<O::kCancel, v1::Cancel, v1::CancelResult, &O::cancel,
         &R::mutable_cancel, &Cancel>,
    Kind<O::kCheckpoint, v1::Checkpoint, v1::CheckpointResult, &O::checkpoint,
         &R::mutable_checkpoint, &Checkpoint>,
    Kind<O::kConsumeFork, v1::ConsumeFork, v1::ConsumeForkResult,
         &O::consume_fork, &R::mutable_consume_fork, &ConsumeFork>,
    Kind<O::kAdoptForkSource, v1::AdoptForkSource, v1::AdoptForkSourceResult,
         &O::adopt_fork_source, &R::mutable_adopt_fork_source,
         &AdoptForkSource>,
    Kind<O::kRelease, v1::Release, v1::ReleaseResult, &O::release,
         &R::mutable_release, &Release>,
    Kind<O::kUnindex, v1::Unindex, v1::UnindexResult, &O::unindex,
         &R::mutable_unindex, &Unindex>,
    Kind<O::kClearIndex, v1::ClearIndex, v1::ClearIndexResult, &O::clear_index,
         &R::mutable_clear_index, &ClearIndex>,
    Kind<O::kCopy, v1::Copy, v1::CopyResult, &O::copy, &R::mutable_copy, &Copy>,
    Kind<O::kSnapshot, v1::Snapshot, v1::SnapshotResult, &O::snapshot,
         &R::mutable_snapshot, &Snapshot>>;

// Operation kinds are 1..N with none missing: the counts observers get are
// indexed by kind.
static_assert(std::tuple_size_v<AllKinds> + 1 == kOperationKinds);

template <typename Tuple>
struct ScratchOf;
template <typename... Kinds>
struct ScratchOf<std::tuple<Kinds...>> {
  using type = std::tuple<typename Kinds::Scratch...>;
};

}  // namespace

class OperationScratch {
 public:
  typename ScratchOf<AllKinds>::type messages;
};

void OperationScratchDeleter::operator()(OperationScratch* scratch) const {
  delete scratch;
}

OperationScratchPtr NewOperationScratch() {
  return OperationScratchPtr(new OperationScratch);
}

namespace {

using ListRunner = absl::Status (*)(OperationContext&, const v1::Operation&,
                                    v1::OperationResult*);
using PackedRunner = absl::Status (*)(OperationContext&, PackedOperationReader&,
                                      PackedResultWriter&, OperationScratch&);

struct Entry {
  ListRunner list = nullptr;
  PackedRunner packed = nullptr;
};

template <typename K>
absl::Status RunPackedKind(OperationContext& c, PackedOperationReader& reader,
                           PackedResultWriter& writer, OperationScratch& s) {
  return K::RunPacked(c, reader, writer,
                      std::get<typename K::Scratch>(s.messages));
}

// Indexed by the oneof's field number (its KindCase).
constexpr size_t kTableSize = 32;

template <typename... Kinds>
constexpr std::array<Entry, kTableSize> BuildTable(std::tuple<Kinds...>*) {
  std::array<Entry, kTableSize> table{};
  ((table[Kinds::kCase] = Entry{&Kinds::RunList, &RunPackedKind<Kinds>}), ...);
  return table;
}

constexpr std::array<Entry, kTableSize> kTable =
    BuildTable(static_cast<AllKinds*>(nullptr));

const Entry* EntryOf(int kind) {
  if (kind <= 0 || kind >= static_cast<int>(kTableSize)) return nullptr;
  const Entry& entry = kTable[kind];
  return entry.list == nullptr ? nullptr : &entry;
}

}  // namespace

absl::Status RunOperation(OperationContext& context, const v1::Operation& op,
                          v1::OperationResult* result) {
  const Entry* entry = EntryOf(op.kind_case());
  if (entry == nullptr) {
    return absl::InvalidArgumentError("operation has no kind set");
  }
  return entry->list(context, op, result);
}

absl::Status RunPackedOperation(OperationContext& context,
                                v1::Operation::KindCase kind,
                                PackedOperationReader& reader,
                                PackedResultWriter& writer,
                                OperationScratch& scratch) {
  const Entry* entry = EntryOf(kind);
  if (entry == nullptr) {
    // ValidatePackedOperations lets no such kind through.
    return absl::InternalError("packed operation of no known kind");
  }
  return entry->packed(context, reader, writer, scratch);
}

}  // namespace statecache

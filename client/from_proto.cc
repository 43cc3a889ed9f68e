#include "client/from_proto.h"

#include <google/protobuf/arena.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/packed_codec.h"
#include "proto/status_mapping.h"

namespace statecache {

namespace {

// The converters from each kind's result message, for the packed path: the
// same as FromProto(OperationResult)'s cases, on the kind's message itself.
BeginPassResult Convert(const v1::BeginPassResult& r) {
  BeginPassResult out;
  out.moves.reserve(r.moves_size());
  for (const v1::SlotMove& m : r.moves()) {
    out.moves.push_back(SlotMove{.request_id = m.request_id(),
                                 .index = m.index(),
                                 .from_slot = m.from_slot(),
                                 .to_slot = m.to_slot()});
  }
  out.pins_released = r.pins_released();
  return out;
}
AdmitResult Convert(const v1::AdmitResult& a) {
  return AdmitResult{
      .slots = std::vector<int64_t>(a.slots().begin(), a.slots().end()),
      .fork_src = a.fork_src(),
      .blocks_resumed = a.blocks_resumed(),
      .adopted = a.adopted(),
      .from_tier = a.from_tier(),
      .branch_blocks = a.branch_blocks(),
      .continuation_blocks = a.continuation_blocks(),
      .ladder_blocks = a.ladder_blocks()};
}
ResumableHitResult Convert(const v1::ResumableHitResult& r) {
  return ResumableHitResult{.blocks = r.blocks(),
                            .tier_blocks = r.tier_blocks()};
}
LookupResult Convert(const v1::LookupResult& r) {
  return LookupResult{.slot = r.slot(), .in_tier = r.in_tier()};
}
ReserveResult Convert(const v1::ReserveResult& r) {
  ReserveResult out;
  out.reservations.reserve(r.reservations_size());
  for (const v1::Reservation& s : r.reservations()) {
    out.reservations.push_back(MidstepReservation{
        .slot = s.slot(), .position = s.position(), .hash = s.hash()});
  }
  return out;
}
PublishResult Convert(const v1::PublishResult& r) {
  return PublishResult{.published = r.published()};
}
CancelResult Convert(const v1::CancelResult& r) {
  return CancelResult{.cancelled = r.cancelled()};
}
ForkCheckpointResult Convert(const v1::CheckpointResult& r) {
  return ForkCheckpointResult{
      .state_slot = r.state_slot(), .fork_src = r.fork_src(), .kept = r.kept()};
}
ConsumeForkResult Convert(const v1::ConsumeForkResult& r) {
  return ConsumeForkResult{.fork_src = r.fork_src()};
}
AdoptForkSourceResult Convert(const v1::AdoptForkSourceResult& r) {
  return AdoptForkSourceResult{.state_slot = r.state_slot()};
}
ReleaseResult Convert(const v1::ReleaseResult& r) {
  return ReleaseResult{.slots_released = r.slots_released()};
}
UnindexResult Convert(const v1::UnindexResult& r) {
  return UnindexResult{.orphaned = r.orphaned()};
}
ClearIndexResult Convert(const v1::ClearIndexResult&) { return {}; }
CopyOpResult Convert(const v1::CopyResult& r) {
  return CopyOpResult{.bytes = r.bytes()};
}
SnapshotResult Convert(const v1::SnapshotResult& r) {
  return SnapshotResult{.slot = r.slot(), .kept = r.kept()};
}

// One reusable message per kind: reading a pass's results allocates
// nothing per operation but the results themselves.
struct ResultMessages {
  v1::BeginPassResult begin_pass;
  v1::AdmitResult admit;
  v1::ResumableHitResult resumable_hit;
  v1::LookupResult lookup;
  v1::ReserveResult reserve;
  v1::PublishResult publish;
  v1::CancelResult cancel;
  v1::CheckpointResult checkpoint;
  v1::ConsumeForkResult consume_fork;
  v1::AdoptForkSourceResult adopt_fork_source;
  v1::ReleaseResult release;
  v1::UnindexResult unindex;
  v1::ClearIndexResult clear_index;
  v1::CopyResult copy;
  v1::SnapshotResult snapshot;
};

template <typename Message>
bool ReadInto(PackedResultReader& reader, Message& message,
              std::vector<absl::StatusOr<OperationResult>>& out) {
  if (!reader.Read(&message)) return false;
  out.emplace_back(Convert(message));
  return true;
}

// The next successful result of `kind` into `out`; false when the reader
// stopped (or the kind is unknown).
bool ReadResult(uint32_t kind, PackedResultReader& reader, ResultMessages& m,
                std::vector<absl::StatusOr<OperationResult>>& out) {
  using Op = v1::Operation;
  switch (kind) {
    case Op::kBeginPass:
      return ReadInto(reader, m.begin_pass, out);
    case Op::kAdmit:
      return ReadInto(reader, m.admit, out);
    case Op::kResumableHit:
      return ReadInto(reader, m.resumable_hit, out);
    case Op::kLookup:
      return ReadInto(reader, m.lookup, out);
    case Op::kReserve:
      return ReadInto(reader, m.reserve, out);
    case Op::kPublish:
      return ReadInto(reader, m.publish, out);
    case Op::kCancel:
      return ReadInto(reader, m.cancel, out);
    case Op::kCheckpoint:
      return ReadInto(reader, m.checkpoint, out);
    case Op::kConsumeFork:
      return ReadInto(reader, m.consume_fork, out);
    case Op::kAdoptForkSource:
      return ReadInto(reader, m.adopt_fork_source, out);
    case Op::kRelease:
      return ReadInto(reader, m.release, out);
    case Op::kUnindex:
      return ReadInto(reader, m.unindex, out);
    case Op::kClearIndex:
      return ReadInto(reader, m.clear_index, out);
    case Op::kCopy:
      return ReadInto(reader, m.copy, out);
    case Op::kSnapshot:
      return ReadInto(reader, m.snapshot, out);
    default:
      return false;
  }
}

}  // namespace

absl::StatusOr<OperationResult> FromProto(const v1::OperationResult& r) {
  if (r.code() != 0) return FromWireCode(r.code(), r.message());
  switch (r.result_case()) {
    case v1::OperationResult::kBeginPass:
      return Convert(r.begin_pass());
    case v1::OperationResult::kAdmit:
      return Convert(r.admit());
    case v1::OperationResult::kResumableHit:
      return Convert(r.resumable_hit());
    case v1::OperationResult::kLookup:
      return Convert(r.lookup());
    case v1::OperationResult::kReserve:
      return Convert(r.reserve());
    case v1::OperationResult::kPublish:
      return Convert(r.publish());
    case v1::OperationResult::kCancel:
      return Convert(r.cancel());
    case v1::OperationResult::kCheckpoint:
      return Convert(r.checkpoint());
    case v1::OperationResult::kConsumeFork:
      return Convert(r.consume_fork());
    case v1::OperationResult::kAdoptForkSource:
      return Convert(r.adopt_fork_source());
    case v1::OperationResult::kRelease:
      return Convert(r.release());
    case v1::OperationResult::kUnindex:
      return Convert(r.unindex());
    case v1::OperationResult::kClearIndex:
      return Convert(r.clear_index());
    case v1::OperationResult::kCopy:
      return Convert(r.copy());
    case v1::OperationResult::kSnapshot:
      return Convert(r.snapshot());
    case v1::OperationResult::RESULT_NOT_SET:
      break;
  }
  return absl::InternalError("an OK result of no kind");
}

absl::StatusOr<StepResults> FromProto(
    const v1::StepResponse& response,
    const google::protobuf::RepeatedField<uint32_t>& kinds) {
  const v1::PackedResults& packed = response.packed_results();
  if (packed.codes_size() != kinds.size()) {
    return absl::InternalError(
        absl::StrCat("the daemon returned ", packed.codes_size(),
                     " packed results for ", kinds.size(), " operations"));
  }
  StepResults results;
  results.epoch = response.epoch();
  results.results.reserve(kinds.size());
  PackedResultReader reader(packed);
  ResultMessages messages;
  for (uint32_t kind : kinds) {
    absl::Status refusal = reader.Next();
    if (!reader.ok()) break;
    if (!refusal.ok()) {
      results.results.emplace_back(std::move(refusal));
      continue;
    }
    if (!ReadResult(kind, reader, messages, results.results)) break;
  }
  if (absl::Status status = reader.Finish(); !status.ok()) {
    return absl::InternalError(absl::StrCat("the daemon's ", status.message()));
  }
  if (results.results.size() != static_cast<size_t>(kinds.size())) {
    return absl::InternalError("the daemon's results stop short");
  }
  return results;
}

}  // namespace statecache

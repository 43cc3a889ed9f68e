#include "client/from_proto.h"

#include <google/protobuf/arena.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/packed_codec.h"
#include "proto/status_mapping.h"

namespace statecache {

absl::StatusOr<OperationResult> FromProto(const v1::OperationResult& r) {
  if (r.code() != 0) return FromWireCode(r.code(), r.message());
  switch (r.result_case()) {
    case v1::OperationResult::kBeginPass: {
      BeginPassResult out;
      out.moves.reserve(r.begin_pass().moves_size());
      for (const v1::SlotMove& m : r.begin_pass().moves()) {
        out.moves.push_back(SlotMove{.request_id = m.request_id(),
                                     .index = m.index(),
                                     .from_slot = m.from_slot(),
                                     .to_slot = m.to_slot()});
      }
      out.pins_released = r.begin_pass().pins_released();
      return out;
    }
    case v1::OperationResult::kAdmit: {
      const v1::AdmitResult& a = r.admit();
      return AdmitResult{
          .slots = std::vector<int64_t>(a.slots().begin(), a.slots().end()),
          .fork_src = a.fork_src(),
          .blocks_resumed = a.blocks_resumed(),
          .adopted = a.adopted(),
          .from_tier = a.from_tier(),
          .branch_blocks = a.branch_blocks(),
          .continuation_blocks = a.continuation_blocks()};
    }
    case v1::OperationResult::kResumableHit:
      return ResumableHitResult{.blocks = r.resumable_hit().blocks(),
                                .tier_blocks = r.resumable_hit().tier_blocks()};
    case v1::OperationResult::kLookup:
      return LookupResult{.slot = r.lookup().slot(),
                          .in_tier = r.lookup().in_tier()};
    case v1::OperationResult::kReserve: {
      ReserveResult out;
      out.reservations.reserve(r.reserve().reservations_size());
      for (const v1::Reservation& s : r.reserve().reservations()) {
        out.reservations.push_back(MidstepReservation{
            .slot = s.slot(), .position = s.position(), .hash = s.hash()});
      }
      return out;
    }
    case v1::OperationResult::kPublish:
      return PublishResult{.published = r.publish().published()};
    case v1::OperationResult::kCancel:
      return CancelResult{.cancelled = r.cancel().cancelled()};
    case v1::OperationResult::kCheckpoint:
      return ForkCheckpointResult{.state_slot = r.checkpoint().state_slot(),
                                  .fork_src = r.checkpoint().fork_src(),
                                  .kept = r.checkpoint().kept()};
    case v1::OperationResult::kConsumeFork:
      return ConsumeForkResult{.fork_src = r.consume_fork().fork_src()};
    case v1::OperationResult::kAdoptForkSource:
      return AdoptForkSourceResult{.state_slot =
                                       r.adopt_fork_source().state_slot()};
    case v1::OperationResult::kRelease:
      return ReleaseResult{.slots_released = r.release().slots_released()};
    case v1::OperationResult::kUnindex:
      return UnindexResult{.orphaned = r.unindex().orphaned()};
    case v1::OperationResult::kClearIndex:
      return ClearIndexResult{};
    case v1::OperationResult::kCopy:
      return CopyOpResult{.bytes = r.copy().bytes()};
    case v1::OperationResult::kSnapshot:
      return SnapshotResult{.slot = r.snapshot().slot(),
                            .kept = r.snapshot().kept()};
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
  // One list-form result, reused: on the response's arena where it has one
  // (each kind's message is then an arena allocation, not a heap one).
  v1::OperationResult local;
  v1::OperationResult* result =
      response.GetArena() == nullptr
          ? &local
          : google::protobuf::Arena::CreateMessage<v1::OperationResult>(
                response.GetArena());
  for (uint32_t kind : kinds) {
    if (!reader.Read(kind, result)) break;
    results.results.push_back(FromProto(*result));
  }
  if (absl::Status status = reader.Finish(); !status.ok()) {
    return absl::InternalError(absl::StrCat("the daemon's ", status.message()));
  }
  return results;
}

}  // namespace statecache

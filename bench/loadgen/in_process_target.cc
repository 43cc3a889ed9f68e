#include "bench/loadgen/in_process_target.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/from_proto.h"
#include "daemon/core/state_transfer.h"
#include "proto/packed_form.h"

namespace statecache::loadgen {

void ToProto(const PassOp& op, v1::Operation* out) {
  switch (op.kind) {
    case OpKind::kBeginPass:
      out->mutable_begin_pass();
      return;
    case OpKind::kAdmit: {
      v1::Admit* a = out->mutable_admit();
      a->set_request_id(op.request_id);
      a->set_width(op.width);
      a->set_num_tokens(op.num_tokens);
      a->set_anchor_pos(op.anchor_pos);
      a->mutable_block_hashes()->Add(op.block_hashes.begin(),
                                     op.block_hashes.end());
      a->set_kv_hit_blocks(op.kv_hit_blocks);
      return;
    }
    case OpKind::kResumableHit: {
      v1::ResumableHit* q = out->mutable_resumable_hit();
      q->set_num_tokens(op.num_tokens);
      q->mutable_block_hashes()->Add(op.block_hashes.begin(),
                                     op.block_hashes.end());
      q->set_kv_hit_blocks(op.kv_hit_blocks);
      return;
    }
    case OpKind::kReserve: {
      v1::Reserve* r = out->mutable_reserve();
      r->set_request_id(op.request_id);
      for (const MidstepPosition& p : op.positions) {
        v1::MidstepPosition* q = r->add_positions();
        q->set_position(p.position);
        q->set_hash(p.hash);
      }
      return;
    }
    case OpKind::kPublish: {
      v1::Publish* p = out->mutable_publish();
      p->set_request_id(op.request_id);
      p->set_keep_all(op.keep_all);
      return;
    }
    case OpKind::kCheckpoint: {
      v1::Checkpoint* c = out->mutable_checkpoint();
      c->set_request_id(op.request_id);
      c->set_boundary_blocks(op.boundary_blocks);
      c->set_hash(op.hash);
      c->set_anchor_pos(op.anchor_pos);
      return;
    }
    case OpKind::kConsumeFork:
      out->mutable_consume_fork()->set_request_id(op.request_id);
      return;
    case OpKind::kRelease:
      out->mutable_release()->set_request_id(op.request_id);
      return;
    case OpKind::kUnindex:
      out->mutable_unindex()->mutable_hashes()->Add(op.hashes.begin(),
                                                    op.hashes.end());
      return;
    case OpKind::kClearIndex:
      out->mutable_clear_index();
      return;
  }
}

absl::StatusOr<std::unique_ptr<InProcessTarget>> InProcessTarget::Create(
    const ModelIdentity& identity, int64_t num_slots,
    const TransferConfig& transfer, int32_t max_operations_per_step,
    bool metrics, bool advise_placement, const std::string& eviction) {
  absl::StatusOr<TransferKind> kind = ParseTransferKind(transfer.kind);
  if (!kind.ok()) return kind.status();
  absl::StatusOr<StateTransfer> state_transfer = StateTransfer::Create(
      *kind, transfer.fork_tokens, transfer.readable_midstep);
  if (!state_transfer.ok()) return state_transfer.status();
  StateCacheOptions options;
  ToProto(identity, &options.identity);
  options.num_slots = num_slots;
  options.transfer = *state_transfer;
  options.lease_ttl = absl::Hours(1);
  options.max_operations_per_step = max_operations_per_step;
  absl::StatusOr<Eviction> parsed = ParseEviction(eviction);
  if (!parsed.ok()) return parsed.status();
  options.eviction = *parsed;
  absl::StatusOr<std::unique_ptr<StateCache>> cache =
      StateCache::Create(std::move(options));
  if (!cache.ok()) return cache.status();
  std::unique_ptr<InProcessTarget> target(new InProcessTarget());
  target->cache_ = std::move(*cache);
  if (metrics) {
    target->metrics_ = std::make_unique<Metrics>(
        target->cache_.get(), Metrics::Options{.version = "loadgen"});
    target->cache_->AddObserver(target->metrics_.get());
  }
  v1::AttachRequest attach;
  ToProto(identity, attach.mutable_identity());
  attach.set_client_name("statecache-loadgen (in-process)");
  attach.set_advise_placement(advise_placement);
  v1::AttachResponse attached;
  if (absl::Status st = target->cache_->Attach(attach, &attached); !st.ok()) {
    return st;
  }
  target->session_id_ = attached.session_id();
  return target;
}

// The cache goes before the metrics that observe it.
InProcessTarget::~InProcessTarget() { cache_.reset(); }

absl::StatusOr<StepResults> InProcessTarget::Run(const Pass& pass,
                                                 double* seconds) {
  v1::StepRequest list;
  for (const PassOp& op : pass.ops) ToProto(op, list.add_operations());
  v1::StepRequest request;
  request.set_session_id(session_id_);
  if (absl::Status st =
          PackOperations(list.operations(), request.mutable_packed());
      !st.ok()) {
    return st;
  }
  v1::StepResponse response;
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status status = cache_->Step(request, &response);
  *seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  if (!status.ok()) return status;
  return FromProto(response, request.packed().kinds());
}

absl::StatusOr<DaemonStats> InProcessTarget::Stats() {
  v1::GetStatsResponse r;
  cache_->GetStats(&r);
  return FromProto(r);
}

}  // namespace statecache::loadgen

#include "bench/loadgen/daemon_target.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"

namespace statecache::loadgen {

void AddToBuilder(const PassOp& op, StepBuilder& b) {
  switch (op.kind) {
    case OpKind::kBeginPass:
      b.BeginPass();
      return;
    case OpKind::kAdmit:
      b.Admit(op.request_id, op.width, op.num_tokens, op.anchor_pos,
              op.block_hashes, op.kv_hit_blocks);
      return;
    case OpKind::kResumableHit:
      b.ResumableHit(op.num_tokens, op.block_hashes, op.kv_hit_blocks);
      return;
    case OpKind::kReserve:
      b.Reserve(op.request_id, op.positions);
      return;
    case OpKind::kPublish:
      b.Publish(op.request_id, op.keep_all);
      return;
    case OpKind::kCheckpoint:
      b.Checkpoint(op.request_id, op.boundary_blocks, op.hash, op.anchor_pos);
      return;
    case OpKind::kConsumeFork:
      b.ConsumeFork(op.request_id);
      return;
    case OpKind::kRelease:
      b.Release(op.request_id);
      return;
    case OpKind::kUnindex:
      b.Unindex(op.hashes);
      return;
    case OpKind::kClearIndex:
      b.ClearIndex();
      return;
  }
}

absl::StatusOr<std::unique_ptr<DaemonTarget>> DaemonTarget::Create(
    const std::string& address, const ModelIdentity& identity, bool streamed,
    bool advise_placement) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(address);
  if (!client.ok()) return client.status();
  std::unique_ptr<DaemonTarget> target(
      new DaemonTarget(std::move(*client), streamed));
  absl::StatusOr<DaemonStats> before = target->client_->GetStats();
  if (!before.ok()) return before.status();
  target->before_ = *before;
  absl::StatusOr<SessionInfo> session = target->client_->Attach(
      identity, "statecache-loadgen", {.advise_placement = advise_placement});
  if (!session.ok()) return session.status();
  target->session_ = *session;
  return target;
}

absl::Status DaemonTarget::Detach() {
  absl::StatusOr<int32_t> released = client_->Detach();
  return released.ok() ? absl::OkStatus() : released.status();
}

absl::StatusOr<StepResults> DaemonTarget::Run(const Pass& pass,
                                              double* seconds) {
  builder_.Clear();
  for (const PassOp& op : pass.ops) AddToBuilder(op, builder_);
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<StepResults> results =
      streamed_ ? client_->StepStreamed(builder_) : client_->Step(builder_);
  *seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  return results;
}

absl::StatusOr<DaemonStats> DaemonTarget::Stats() {
  return client_->GetStats();
}

}  // namespace statecache::loadgen

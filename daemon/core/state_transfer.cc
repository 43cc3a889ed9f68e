#include "daemon/core/state_transfer.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace statecache {

std::string_view TransferKindName(TransferKind kind) {
  switch (kind) {
    case TransferKind::kNone:
      return "none";
    case TransferKind::kFork:
      return "fork";
    case TransferKind::kReplay:
      return "replay";
    case TransferKind::kCopy:
      return "copy";
  }
  return "unknown";
}

absl::StatusOr<TransferKind> ParseTransferKind(std::string_view name) {
  for (TransferKind k : {TransferKind::kNone, TransferKind::kFork,
                         TransferKind::kReplay, TransferKind::kCopy}) {
    if (name == TransferKindName(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown state transfer kind '", std::string(name),
                   "' (expected none, fork, replay or copy)"));
}

absl::StatusOr<StateTransfer> StateTransfer::Create(TransferKind kind,
                                                    int64_t fork_tokens,
                                                    bool readable_midstep) {
  if (fork_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("fork_tokens must be >= 0, got ", fork_tokens));
  }
  if (kind == TransferKind::kFork && fork_tokens <= 0) {
    return absl::InvalidArgumentError(
        "a fork binds its successor forward: fork_tokens must be > 0");
  }
  if (kind == TransferKind::kNone && (fork_tokens != 0 || readable_midstep)) {
    return absl::InvalidArgumentError(
        "transfer kind none carries no fork_tokens or readable_midstep");
  }
  return StateTransfer(kind, fork_tokens, readable_midstep);
}

double StateTransfer::successor_room() const {
  if (kind_ == TransferKind::kNone) {
    return std::numeric_limits<double>::infinity();
  }
  return static_cast<double>(fork_tokens_);
}

std::string StateTransfer::DebugString() const {
  return absl::StrCat(
      std::string(TransferKindName(kind_)), "(fork_tokens=", fork_tokens_,
      ", readable_midstep=", readable_midstep_ ? "true" : "false", ")");
}

}  // namespace statecache

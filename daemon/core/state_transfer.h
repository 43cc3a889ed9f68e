// StateTransfer: how a backend carries recurrent state across a checkpoint.
//
// The pool reads three things from it: the kind, the committed tokens a fork
// destination needs, and whether a checkpoint may sit inside a forward.
//
//   none    nothing is checkpointed; a resumed hit shrinks to 0.
//   fork(n) checkpointing hands the owner's slot to the index and gives the
//           owner a fresh one; the forward that follows reads the old slot and
//           writes the new one, and needs n > 0 committed tokens to leave the
//           new one self-contained.
//   replay  hits never shrink: the forward rebuilds state from the block
//           below the resume point.
//   copy    page-copy checkpoints; refused by SlotPool (as by the reference).
//
// Immutable value type; thread-compatible.
#ifndef STATECACHE_DAEMON_CORE_STATE_TRANSFER_H_
#define STATECACHE_DAEMON_CORE_STATE_TRANSFER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace statecache {

enum class TransferKind { kNone, kFork, kReplay, kCopy };

// "none", "fork", "replay", "copy".
std::string_view TransferKindName(TransferKind kind);
// Inverse of TransferKindName.
// Errors: INVALID_ARGUMENT naming an unknown kind.
absl::StatusOr<TransferKind> ParseTransferKind(std::string_view name);

class StateTransfer {
 public:
  // Validates like the reference's StateTransfer (which, unlike this,
  // accepts a negative fork_tokens for replay and copy).
  // Errors: INVALID_ARGUMENT naming the violated rule: fork_tokens < 0;
  //   kind == kFork with fork_tokens == 0; kind == kNone with fork_tokens
  //   != 0 or readable_midstep.
  static absl::StatusOr<StateTransfer> Create(TransferKind kind,
                                              int64_t fork_tokens,
                                              bool readable_midstep);

  static StateTransfer None() {
    return StateTransfer(TransferKind::kNone, 0, false);
  }

  TransferKind kind() const { return kind_; }
  int64_t fork_tokens() const { return fork_tokens_; }
  bool readable_midstep() const { return readable_midstep_; }

  bool forks() const { return kind_ == TransferKind::kFork; }
  bool copies() const { return kind_ == TransferKind::kCopy; }
  bool replays() const { return kind_ == TransferKind::kReplay; }
  // Committed tokens a successor forward needs; infinite for kNone.
  double successor_room() const;

  std::string DebugString() const;

 private:
  StateTransfer(TransferKind kind, int64_t fork_tokens, bool readable_midstep)
      : kind_(kind),
        fork_tokens_(fork_tokens),
        readable_midstep_(readable_midstep) {}

  TransferKind kind_;
  int64_t fork_tokens_;
  bool readable_midstep_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_STATE_TRANSFER_H_

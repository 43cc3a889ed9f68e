// Placement advice: where an admitted request's checkpoints go, for a
// scheduler that follows the daemon rather than a rule of its own
// (AttachRequest.advise_placement in statecache.proto has the contract).
//
// Two kinds of position, each argued from bench/loadgen's shapes:
//   * the branch point: the end of the longest prefix this prompt shares
//     with another recent prompt that went on differently (BranchPoints).
//     Prompt ends never fall there when many requests share a document or
//     system prompt and each adds its own question, so an engine's
//     prompt-end rule resumes none of them;
//   * the continuation: the prompt's end, then each block boundary decoding
//     reaches, each replacing the last. The next turn of a conversation
//     holds this prompt and its reply, which the KV cache keeps; a
//     checkpoint at the prompt's end stops short of the reply, one at the
//     deepest decoded boundary does not, in the same single slot.
//
// Thread-compatible.
#ifndef STATECACHE_DAEMON_CORE_PLACEMENT_ADVICE_H_
#define STATECACHE_DAEMON_CORE_PLACEMENT_ADVICE_H_

#include <cstdint>

#include "daemon/core/branch_points.h"
#include "daemon/core/slot_memory.h"

namespace statecache {

struct PlacementAdvice {
  int64_t branch_blocks = 0;        // 0: none
  int64_t continuation_blocks = 0;  // 0: none
  friend bool operator==(const PlacementAdvice&,
                         const PlacementAdvice&) = default;
};

// Records the admitted prompt in `table` and advises it: a branch point
// past `blocks_resumed` and before the prompt's end (its anchor, or its
// last block when the anchor is 0) that `memory` holds no checkpoint of
// yet; the continuation at the anchor when that is a block boundary > 0.
// REQUIRES: `spec` is an admission `memory` accepted (its hashes
//   non-negative), `blocks_resumed` what it resumed.
PlacementAdvice AdvisePlacement(BranchPoints& table, const SlotMemory& memory,
                                const AdmitSpec& spec, int64_t blocks_resumed);

// Whether a checkpoint of a request at `position` (tokens) is at one of the
// positions `advice` gave it (so it is filed as known), and whether it is
// its continuation (so it replaces the request's previous one).
bool IsAdvisedPosition(const PlacementAdvice& advice, int64_t block_size,
                       int64_t position);
bool IsContinuation(const PlacementAdvice& advice, int64_t block_size,
                    int64_t position);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_PLACEMENT_ADVICE_H_

// Sequence: the fields of a scheduler's sequence that the pool reads.
//
// The reference pool is handed the scheduler's own `seq` objects; the port
// takes this small value instead, and returns what it would have written
// (see SlotPool::Checkpoint) rather than mutating the caller's object.
#ifndef STATECACHE_DAEMON_CORE_SEQUENCE_H_
#define STATECACHE_DAEMON_CORE_SEQUENCE_H_

#include <cstdint>

namespace statecache {

struct Sequence {
  // The committed slot (element 0 of the request's set), or -1.
  int64_t state_slot = -1;
  // Tokens in the sequence so far (prompt plus output).
  int64_t num_tokens = 0;
  // Whether the model has per-request recurrent state at all.
  bool has_per_req_cache = true;
  // The one position this request knows is a resume point (its prompt's own
  // end), if a midstep anchor was recorded; 0 = none.
  int64_t midstep_anchor_pos = 0;
  // Same, recorded at the end of a checkpointing chunk; 0 = none. Read only
  // when midstep_anchor_pos is 0, as the reference does.
  int64_t checkpoint_end_pos = 0;
  friend bool operator==(const Sequence&, const Sequence&) = default;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_SEQUENCE_H_

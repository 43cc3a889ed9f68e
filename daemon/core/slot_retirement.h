// SlotRetirement: what SlotPool::RetireTop did, and what the caller owes.
//
// relocated_to == -1: the top slot was empty, or was itself the thing worth
// spending, so no bytes move. Otherwise the caller copies retired ->
// relocated_to before the next forward and then re-points the owning request
// (held_checkpoint false) or does nothing more (held_checkpoint true: the pool
// already re-filed the index).
#ifndef STATECACHE_DAEMON_CORE_SLOT_RETIREMENT_H_
#define STATECACHE_DAEMON_CORE_SLOT_RETIREMENT_H_

#include <cstdint>

namespace statecache {

struct SlotRetirement {
  int64_t retired = -1;
  int64_t relocated_to = -1;
  bool held_checkpoint = false;
  friend bool operator==(const SlotRetirement&,
                         const SlotRetirement&) = default;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_SLOT_RETIREMENT_H_

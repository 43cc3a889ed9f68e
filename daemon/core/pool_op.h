// PoolOp: the kinds of call a SlotPool is told of (daemon/core/pool_call.h),
// one per op of the trace format (docs/trace_format.md), in its table's
// order. Apart so that slot_pool.h can name them without the rest.
#ifndef STATECACHE_DAEMON_CORE_POOL_OP_H_
#define STATECACHE_DAEMON_CORE_POOL_OP_H_

#include <cstdint>

namespace statecache {

enum class PoolOp : uint8_t {
  kHasFree,
  kNumFree,
  kIsFree,
  kHoldsCheckpoint,
  kPop,
  kPopMany,
  kClaim,
  kMarkSpeculative,
  kPromote,
  kRelease,
  kReleaseMany,
  kExtend,
  kRetireTop,
  kApplies,
  kLookup,
  kResumableHit,
  kReserveMidstep,
  kPublishMidstep,
  kCancelMidstep,
  kCheckpoint,
  kCheckpointFates,
  kOccupancy,
  kRecordRelocation,
  kTakeRelocations,
  kUnindex,
  kClearIndex,
  kInvalidate,
  kPin,
  kIsPinned,
  kPinCount,
  kUnpin,
  kDropReader,
  kReleasePins,
  kDump,
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_POOL_OP_H_

// Resizing the pool: a grow happens at once; a shrink is a state machine
// that retires the top slots as they come free, possibly over several
// passes, until it reaches its target or its deadline.
//
// Thread safety: thread-compatible; StateCache drives it under its mutex and
// runs the finished resize's callback after unlocking.
#ifndef STATECACHE_DAEMON_SERVICE_RESIZE_H_
#define STATECACHE_DAEMON_SERVICE_RESIZE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/core/slot_memory.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {

struct Session;

using ResizeDone = std::function<void(absl::Status, const v1::ResizeResponse&)>;

// Told of resizes and of the state memory's size. Called under the core's
// mutex: must be cheap.
class ResizeObserver {
 public:
  virtual ~ResizeObserver() = default;
  virtual void OnResize(int64_t from_slots, int64_t to_slots) {}
  // The state memory now holds `bytes` (after start and every resize).
  virtual void OnStateBytes(int64_t bytes) {}
};

// Grows the pool to `target` now, telling the observers.
// Errors: SlotMemory::Grow's (nothing changed): INVALID_ARGUMENT target
//   outside (memory.num_slots(), kMaxSlots]; the device's when the state
//   memory cannot grow.
absl::Status GrowPool(SlotMemory& memory, int64_t target,
                      absl::Span<ResizeObserver* const> observers);

// A shrink in progress.
class PendingShrink {
 public:
  PendingShrink(const SlotMemory& memory, int64_t target, absl::Time deadline,
                ResizeDone done);

  int64_t target() const { return target_; }
  absl::Time deadline() const { return deadline_; }

  // Retires what it can now. A live slot moves only inside its own
  // session's begin_pass (`passing`, or null outside one): that session's
  // forwards are all finished then and its next one is not yet issued, so
  // nothing writes the slot while its bytes move, and the move is reported
  // in that begin_pass's result (appended to passing->moves), before the
  // forward that must use it. A top slot held by any other session (or
  // fenced: its engine may be hung mid-write) waits. Returns true when the
  // resize is over: the target reached, or the state memory failed (it is
  // not retried; Finish reports the failure).
  bool Advance(SlotMemory& memory, absl::Span<ResizeObserver* const> observers,
               Session* passing = nullptr);

  // Ends the resize with `status` (a memory failure on the way turns OK into
  // INTERNAL, its message saying where the resize stopped and why); returns
  // the callback to run without the mutex held.
  std::function<void()> Finish(absl::Status status, const SlotMemory& memory,
                               absl::Span<ResizeObserver* const> observers);

 private:
  const int64_t from_;
  const int64_t target_;
  const absl::Time deadline_;
  const int64_t evicted_before_;
  ResizeDone done_;
  v1::ResizeResponse response_;
  absl::Status failure_;  // the first memory failure, reported at the end
  std::vector<Relocation> moved_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_RESIZE_H_

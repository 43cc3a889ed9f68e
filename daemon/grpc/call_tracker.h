// CallTracker: counts the calls whose work is under way, so a shutdown can
// wait for them and for nothing else.
//
// gRPC's Server::Shutdown(deadline) waits until every connection is gone, not
// only every call: one idle scheduler connection (they stay connected) held
// each restart for the whole --shutdown_grace. The daemon instead waits on
// this tracker for the calls that matter (a Step being served on a stream, a
// Resize in progress) up to the grace, then gives gRPC a short deadline:
// idle streams and connections are cut, nothing mid-flight is.
//
// Thread-safe.
#ifndef STATECACHE_DAEMON_GRPC_CALL_TRACKER_H_
#define STATECACHE_DAEMON_GRPC_CALL_TRACKER_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace statecache {

class CallTracker {
 public:
  // A call's work starts / ends. Every Begin is matched by one End.
  void Begin() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  void End() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }

  int64_t in_flight() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return in_flight_;
  }

  // Blocks until no call is under way or `deadline` passes; returns how many
  // still are (0: all done).
  int64_t WaitIdle(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto idle = [this]()
                    ABSL_SHARED_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
    mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
    return in_flight_;
  }

 private:
  mutable absl::Mutex mu_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_GRPC_CALL_TRACKER_H_

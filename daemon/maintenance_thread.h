// MaintenanceThread: the daemon's background housekeeping.
//
#ifndef STATECACHE_DAEMON_MAINTENANCE_THREAD_H_
#define STATECACHE_DAEMON_MAINTENANCE_THREAD_H_

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/grpc/session_event_log.h"
#include "daemon/service/state_cache.h"
#include "daemon/service/state_keeper.h"

namespace statecache {

// Runs StateCache::Tick whenever the core has something due (a lease lapsing,
// a resize to retry or expire), and saves the state directory's index every
// `save_interval` (with a keeper), sleeping in between; Stop wakes it at
// once.
//
// Thread safety: Stop may be called from any thread.
class MaintenanceThread {
 public:
  // None is owned; `keeper` may be null. REQUIRES: all outlive this.
  MaintenanceThread(StateCache* cache, SessionEventLog* events,
                    StateKeeper* keeper, absl::Duration save_interval)
      : cache_(cache),
        events_(events),
        keeper_(keeper),
        save_interval_(save_interval),
        thread_([this] { Run(); }) {}
  ~MaintenanceThread() { Stop(); }

  MaintenanceThread(const MaintenanceThread&) = delete;
  MaintenanceThread& operator=(const MaintenanceThread&) = delete;

  // Wakes the thread and joins it. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  StateCache* const cache_;
  SessionEventLog* const events_;
  StateKeeper* const keeper_;
  const absl::Duration save_interval_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_MAINTENANCE_THREAD_H_

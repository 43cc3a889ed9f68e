// SessionEventLog: one INFO line per session attach, detach, eviction and
// lease expiry.
//
// StateCache's observer hook says that a session ended and how, but not which
// one, and it runs with the core's mutex held, where nothing slow (a write to
// stderr) may happen. So the gRPC adapter reports what it sees (attach,
// detach and evict results, with ids) and the observer hook only counts
// expiries; the maintenance thread then calls LogExpiries, which names the
// expired sessions by comparing the sessions it was told about with
// StateCache::ListSessions. (If a detach and an expiry race, the detached
// session may be logged as expired; at most as many sessions are logged
// expired as actually expired.)
//
// Thread safety: thread-safe.
#ifndef STATECACHE_DAEMON_SERVICE_SESSION_EVENT_LOG_H_
#define STATECACHE_DAEMON_SERVICE_SESSION_EVENT_LOG_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "daemon/service/state_cache.h"

namespace statecache {

class SessionEventLog : public StateCacheObserver {
 public:
  SessionEventLog() = default;
  SessionEventLog(const SessionEventLog&) = delete;
  SessionEventLog& operator=(const SessionEventLog&) = delete;

  // A session was opened by `peer` (a gRPC peer string).
  void Attached(const std::string& session_id, const std::string& client_name,
                std::string_view peer) ABSL_LOCKS_EXCLUDED(mu_);
  // A session the adapter ended; `how` is "detached" or "evicted".
  void Ended(const std::string& session_id, std::string_view how,
             int32_t requests_released) ABSL_LOCKS_EXCLUDED(mu_);

  // StateCacheObserver. Called with the core's mutex held: only counts.
  void OnSessionEnded(SessionEnd how) override;

  // Logs the sessions whose lease lapsed since the last call. Cheap when none
  // did. REQUIRES: not called with the core's mutex held (calls ListSessions).
  void LogExpiries(StateCache& cache) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  // Session id -> client name, for every session believed attached.
  absl::flat_hash_map<std::string, std::string> client_names_
      ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> unlogged_expiries_{0};
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_SESSION_EVENT_LOG_H_

// SessionEventLog: one INFO line per session attach, detach, eviction and
// lease expiry.
//
// The gRPC adapter reports what it sees (attach with the peer, detach and
// evict results). Lease expiries happen inside StateCache, whose observer hook
// runs with the core's mutex held, where nothing slow (a write to stderr) may
// happen: the hook only queues them, and the maintenance thread writes them
// out with LogExpiries.
//
// Thread safety: thread-safe.
#ifndef STATECACHE_DAEMON_GRPC_SESSION_EVENT_LOG_H_
#define STATECACHE_DAEMON_GRPC_SESSION_EVENT_LOG_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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

  // A session was opened by `peer` (its description). Lines name sessions
  // by `handle`: a session id is its holder's secret and stays out of logs.
  void Attached(const std::string& session_id, const std::string& handle,
                const std::string& client_name, std::string_view peer)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A session the adapter ended; `how` is "detached" or "evicted".
  void Ended(const std::string& session_id, std::string_view how,
             int32_t requests_released) ABSL_LOCKS_EXCLUDED(mu_);

  // StateCacheObserver. Called with the core's mutex held: only queues.
  void OnSessionEnded(const std::string& session_id,
                      const std::string& client_name, SessionEnd how,
                      int32_t requests_released) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // Logs the sessions whose lease lapsed since the last call. Cheap when none
  // did.
  void LogExpiries() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  struct Attachment {
    std::string handle;
    std::string client_name;
  };
  // The handle and name a session id's lines show (empty if unknown), and
  // forgets it.
  Attachment Forget(const std::string& session_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Session id -> what its lines show, for every session believed attached.
  absl::flat_hash_map<std::string, Attachment> attached_ ABSL_GUARDED_BY(mu_);
  struct Expiry {
    std::string handle;
    std::string client_name;
    int32_t requests_released;
  };
  std::vector<Expiry> expiries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_GRPC_SESSION_EVENT_LOG_H_

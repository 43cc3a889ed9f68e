#include "daemon/service/session_event_log.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "daemon/service/log.h"

namespace statecache {

void SessionEventLog::Attached(const std::string& session_id,
                               const std::string& client_name,
                               std::string_view peer) {
  {
    absl::MutexLock lock(&mu_);
    client_names_[session_id] = client_name;
  }
  LOG_INFO("session %s attached: client=\"%s\" peer=%s", session_id,
           absl::CHexEscape(client_name), peer);
}

void SessionEventLog::Ended(const std::string& session_id, std::string_view how,
                            int32_t requests_released) {
  std::string client_name;
  {
    absl::MutexLock lock(&mu_);
    auto it = client_names_.find(session_id);
    if (it != client_names_.end()) {
      client_name = std::move(it->second);
      client_names_.erase(it);
    }
  }
  LOG_INFO("session %s %s: client=\"%s\" requests_released=%d", session_id,
           how, absl::CHexEscape(client_name), requests_released);
}

void SessionEventLog::OnSessionEnded(SessionEnd how) {
  if (how == SessionEnd::kExpired) {
    unlogged_expiries_.fetch_add(1, std::memory_order_relaxed);
  }
}

void SessionEventLog::LogExpiries(StateCache& cache) {
  int64_t expiries = unlogged_expiries_.exchange(0, std::memory_order_relaxed);
  if (expiries == 0) return;
  v1::ListSessionsResponse live;
  cache.ListSessions(&live);
  absl::flat_hash_set<std::string> live_ids;
  for (const v1::SessionInfo& info : live.sessions()) {
    live_ids.insert(info.session_id());
  }
  std::vector<std::pair<std::string, std::string>> expired;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = client_names_.begin(); it != client_names_.end();) {
      if (static_cast<int64_t>(expired.size()) < expiries &&
          !live_ids.contains(it->first)) {
        expired.emplace_back(it->first, std::move(it->second));
        client_names_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (const auto& [session_id, client_name] : expired) {
    LOG_INFO("session %s expired (lease lapsed): client=\"%s\"", session_id,
             absl::CHexEscape(client_name));
  }
  // Sessions attached through another path than the adapter (none today).
  if (static_cast<int64_t>(expired.size()) < expiries) {
    LOG_INFO("%d session(s) expired (lease lapsed)",
             expiries - static_cast<int64_t>(expired.size()));
  }
}

}  // namespace statecache

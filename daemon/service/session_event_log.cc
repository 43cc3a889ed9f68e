#include "daemon/service/session_event_log.h"

#include <utility>
#include <vector>

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
  LOG_INFO("session %s %s: client=\"%s\" requests_released=%d", session_id, how,
           absl::CHexEscape(client_name), requests_released);
}

void SessionEventLog::OnSessionEnded(const std::string& session_id,
                                     const std::string& client_name,
                                     SessionEnd how,
                                     int32_t requests_released) {
  if (how == SessionEnd::kDetached) return;  // the adapter logs detaches
  absl::MutexLock lock(&mu_);
  client_names_.erase(session_id);
  // The adapter logs an eviction, as the operator named the session.
  if (how == SessionEnd::kEvicted) return;
  expiries_.push_back(Expiry{session_id, client_name, requests_released});
}

void SessionEventLog::LogExpiries() {
  std::vector<Expiry> expired;
  {
    absl::MutexLock lock(&mu_);
    expired.swap(expiries_);
  }
  for (const Expiry& e : expired) {
    LOG_INFO(
        "session %s expired (lease lapsed): client=\"%s\" "
        "requests_released=%d",
        e.session_id, absl::CHexEscape(e.client_name), e.requests_released);
  }
}

}  // namespace statecache

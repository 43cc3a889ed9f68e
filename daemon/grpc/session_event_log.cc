#include "daemon/grpc/session_event_log.h"

#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "daemon/service/log.h"

namespace statecache {

void SessionEventLog::Attached(const std::string& session_id,
                               const std::string& handle,
                               const std::string& client_name,
                               std::string_view peer) {
  {
    absl::MutexLock lock(&mu_);
    attached_[session_id] = Attachment{handle, client_name};
  }
  LOG_INFO("session %s attached: client=\"%s\" peer=%s", handle,
           absl::CHexEscape(client_name), peer);
}

SessionEventLog::Attachment SessionEventLog::Forget(
    const std::string& session_id) {
  Attachment attachment{"(unknown)", ""};
  auto it = attached_.find(session_id);
  if (it != attached_.end()) {
    attachment = std::move(it->second);
    attached_.erase(it);
  }
  return attachment;
}

void SessionEventLog::Ended(const std::string& session_id, std::string_view how,
                            int32_t requests_released) {
  Attachment attachment;
  {
    absl::MutexLock lock(&mu_);
    attachment = Forget(session_id);
  }
  LOG_INFO("session %s %s: client=\"%s\" requests_released=%d",
           attachment.handle, how, absl::CHexEscape(attachment.client_name),
           requests_released);
}

void SessionEventLog::OnSessionEnded(const std::string& session_id,
                                     const std::string& client_name,
                                     SessionEnd how,
                                     int32_t requests_released) {
  if (how == SessionEnd::kDetached) return;  // the adapter logs detaches
  absl::MutexLock lock(&mu_);
  Attachment attachment = Forget(session_id);
  // The adapter logs an eviction, as the operator named the session.
  if (how == SessionEnd::kEvicted) return;
  expiries_.push_back(
      Expiry{std::move(attachment.handle), client_name, requests_released});
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
        e.handle, absl::CHexEscape(e.client_name), e.requests_released);
  }
}

}  // namespace statecache

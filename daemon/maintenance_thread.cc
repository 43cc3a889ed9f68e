#include "daemon/maintenance_thread.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "daemon/service/log.h"

namespace statecache {
namespace {

// The longest the thread sleeps: bounds how late it notices a deadline that
// appeared while it slept (a new resize with a short deadline).
constexpr absl::Duration kMaxMaintenanceSleep = absl::Milliseconds(100);
// The shortest: if the core keeps reporting a deadline in the past, the
// thread must not spin.
constexpr absl::Duration kMinMaintenanceSleep = absl::Milliseconds(1);

}  // namespace

void MaintenanceThread::Run() {
  absl::Time next_save = absl::Now() + save_interval_;
  for (;;) {
    cache_->Tick();
    events_->LogExpiries();
    absl::Time now = absl::Now();
    if (keeper_ != nullptr && now >= next_save) {
      if (absl::Status st = keeper_->Save(); !st.ok()) {
        LOG_WARNING("state dir: saving the index failed: %s", st.ToString());
      }
      now = absl::Now();
      next_save = now + save_interval_;
    }
    absl::Time wake =
        std::clamp(cache_->NextDeadline(), now + kMinMaintenanceSleep,
                   now + kMaxMaintenanceSleep);
    if (keeper_ != nullptr) wake = std::min(wake, next_save);
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithDeadline(absl::Condition(&stopping_), wake)) return;
  }
}

}  // namespace statecache

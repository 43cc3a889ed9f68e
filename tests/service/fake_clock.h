// A Clock tests advance by hand, so leases and deadlines need no sleeping.
#ifndef STATECACHE_TESTS_SERVICE_FAKE_CLOCK_H_
#define STATECACHE_TESTS_SERVICE_FAKE_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/service/state_cache.h"

namespace statecache {

// Thread-safe: the daemon's threads read it while a test advances it.
class FakeClock : public Clock {
 public:
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
};

}  // namespace statecache

#endif  // STATECACHE_TESTS_SERVICE_FAKE_CLOCK_H_

// SlotPool::Observed, for the pool's own .cc files: a call made with the
// observer unset (so the calls it makes on itself are not told), then told.
#ifndef STATECACHE_DAEMON_CORE_SLOT_POOL_OBSERVED_H_
#define STATECACHE_DAEMON_CORE_SLOT_POOL_OBSERVED_H_

#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/core/pool_call.h"
#include "daemon/core/slot_pool.h"

namespace statecache {
namespace slot_pool_internal {

inline const absl::Status& StatusOf(const absl::Status& status) {
  return status;
}
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}
template <typename T>
absl::Status StatusOf(const T&) {
  return absl::OkStatus();
}

inline PoolValue ValueOf(const absl::Status&) { return PoolValue(); }
template <typename T>
PoolValue ValueOf(const absl::StatusOr<T>& result) {
  return result.ok() ? PoolValue(*result) : PoolValue();
}
inline PoolValue ValueOf(const PoolSnapshot& snapshot) {
  return PoolValue(std::make_shared<const PoolSnapshot>(snapshot));
}
template <typename T>
PoolValue ValueOf(const T& value) {
  return PoolValue(value);
}

}  // namespace slot_pool_internal

template <typename Run>
auto SlotPool::Observed(const PoolCall& call, Run run) const
    -> decltype(run()) {
  PoolCallObserver* const observer = std::exchange(observer_, nullptr);
  auto result = run();
  observer_ = observer;
  observer->OnCall(call, slot_pool_internal::StatusOf(result),
                   slot_pool_internal::ValueOf(result));
  return result;
}

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_SLOT_POOL_OBSERVED_H_

// The randomized tests' StateCache: small, with real (host) state memory so
// copy and snapshot run.
#ifndef STATECACHE_TESTS_SERVICE_CACHE_WITH_MEMORY_H_
#define STATECACHE_TESTS_SERVICE_CACHE_WITH_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "daemon/device/host_device.h"
#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {

// A StateCache of `num_slots` slots (growable to `max_slots`) with host state
// memory (so copy and snapshot run), fork transfer, a 10 s lease on `clock`
// and at most `max_ops` operations per step, each session's requests
// holding at most `max_slots_per_session` slots (0: no quota). `prefix`
// names its shared memory.
inline std::unique_ptr<StateCache> NewCacheWithMemory(
    const v1::Identity& identity, Clock* clock, const std::string& prefix,
    int64_t num_slots, int64_t max_slots, int max_ops,
    int64_t max_slots_per_session = 0) {
  HostDeviceOptions device_options;
  device_options.layout = *StateLayout::Create(
      prefix, {{"conv", {3, 8}, DType::kBF16}, {"ssm", {2, 4}, DType::kF32}},
      2);
  device_options.num_slots = num_slots;
  device_options.max_slots = max_slots;
  device_options.epoch = NewEpoch(absl::Now());
  device_options.prefix = prefix;
  absl::StatusOr<std::unique_ptr<HostDevice>> device =
      HostDevice::Create(device_options);
  EXPECT_TRUE(device.ok()) << device.status();
  if (!device.ok()) return nullptr;
  StateCacheOptions options;
  options.identity = identity;
  options.num_slots = num_slots;
  options.max_slots = max_slots;
  options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
  options.lease_ttl = absl::Seconds(10);
  options.max_operations_per_step = max_ops;
  options.max_slots_per_session = max_slots_per_session;
  options.epoch = 9;
  options.clock = clock;
  options.device = std::move(*device);
  return *StateCache::Create(std::move(options));
}

}  // namespace statecache

#endif  // STATECACHE_TESTS_SERVICE_CACHE_WITH_MEMORY_H_

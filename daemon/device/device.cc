#include "daemon/device/device.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/device/host_device.h"

#if defined(STATECACHE_DEVICE_GPU_FLAVOUR)
#include "daemon/device/gpu_device.h"
#endif

namespace statecache {

std::vector<std::string_view> AvailableDeviceBackends() {
  std::vector<std::string_view> backends = {"host"};
#if defined(STATECACHE_DEVICE_GPU_FLAVOUR)
  backends.push_back(STATECACHE_DEVICE_GPU_FLAVOUR);
#endif
  return backends;
}

absl::StatusOr<std::unique_ptr<Device>> CreateDevice(
    const DeviceOptions& options) {
  if (options.backend == "host") {
    HostDeviceOptions host;
    host.layout = options.layout;
    host.num_slots = options.num_slots;
    host.max_slots = options.max_slots;
    host.epoch = options.epoch;
    host.prefix = options.shm_prefix;
    host.retain = options.retain_region;
    host.mode = options.shm_mode;
    host.group = options.shm_group;
    host.keeper = options.shm_keeper;
    host.copier.num_threads = options.copy_threads;
    if (options.copy_threads < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "copy_threads: must be >= 1, got ", options.copy_threads));
    }
    auto device = HostDevice::Create(std::move(host));
    if (!device.ok()) return device.status();
    return std::unique_ptr<Device>(std::move(*device));
  }
  if (options.backend == "gpu" || options.backend == "hip" ||
      options.backend == "cuda") {
#if defined(STATECACHE_DEVICE_GPU_FLAVOUR)
    if (options.backend == "gpu" ||
        options.backend == STATECACHE_DEVICE_GPU_FLAVOUR) {
      GpuDeviceOptions gpu;
      gpu.layout = options.layout;
      gpu.num_slots = options.num_slots;
      gpu.max_slots = options.max_slots;
      gpu.device = options.device;
      auto device = GpuDevice::Create(std::move(gpu));
      if (!device.ok()) return device.status();
      return std::unique_ptr<Device>(std::move(*device));
    }
#endif
    const std::vector<std::string_view> available = AvailableDeviceBackends();
    const std::vector<std::string> backends(available.begin(), available.end());
    return absl::UnavailableError(absl::StrCat(
        "device backend \"", options.backend,
        "\" is not built in (this build has: ", absl::StrJoin(backends, ", "),
        ")"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device backend \"", options.backend,
                   "\" (known: host, gpu, hip, cuda)"));
}

}  // namespace statecache

#include "daemon/device/gpu_device.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/status_macros.h"
#include "daemon/device/copy_plan.h"
#include "kernels/gpu_copier.h"
#include "kernels/gpu_runtime.h"

namespace statecache {

namespace {

// Pinned host memory mapped into the device's address space: `host` for the
// CPU, `device` for the kernel (often the same address, not always).
class PinnedStaging : public HostStaging {
 public:
  PinnedStaging(char* host, char* device, uint64_t size)
      : host_(host), device_(device), size_(size) {}
  ~PinnedStaging() override { (void)hipHostFree(host_); }
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  char* data() const override { return host_; }
  uint64_t size() const override { return size_; }
  char* device_data() const { return device_; }

 private:
  char* const host_;
  char* const device_;
  const uint64_t size_;
};

// The device-side address of `staging`. Errors: INVALID_ARGUMENT when it is
// not memory a GpuDevice allocated (the kernel could not reach it).
absl::StatusOr<char*> DeviceAddress(const HostStaging& staging) {
  const auto* pinned = dynamic_cast<const PinnedStaging*>(&staging);
  if (pinned == nullptr) {
    return absl::InvalidArgumentError(
        "staging memory not allocated by this GPU device");
  }
  return pinned->device_data();
}

}  // namespace

struct GpuDevice::Runtime {
  hipStream_t stream = nullptr;
  hipIpcMemHandle_t handle;
  std::unique_ptr<GpuCopier> copier;
};

GpuDevice::GpuDevice(GpuDeviceOptions options)
    : options_(std::move(options)), runtime_(std::make_unique<Runtime>()) {}

int GpuDevice::DeviceCount() {
  int count = 0;
  if (hipGetDeviceCount(&count) != hipSuccess) {
    (void)hipGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<GpuDevice>> GpuDevice::Create(
    GpuDeviceOptions options) {
  if (options.layout.num_tensors() == 0) {
    return absl::InvalidArgumentError("gpu device: empty layout");
  }
  if (options.num_slots < 0 || options.max_slots < 0 ||
      options.num_slots > kMaxLayoutSlots ||
      options.max_slots > kMaxLayoutSlots ||
      (options.max_slots != 0 && options.num_slots > options.max_slots)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu device: need 0 <= num_slots (", options.num_slots,
        ") <= max_slots (", options.max_slots, ") <= ", kMaxLayoutSlots));
  }
  const int count = DeviceCount();
  if (options.device < 0 || options.device >= count) {
    return absl::UnavailableError(
        absl::StrCat(STATECACHE_GPU_BACKEND_NAME, " device ", options.device,
                     " not present (", count, " visible)"));
  }
  std::unique_ptr<GpuDevice> device(new GpuDevice(std::move(options)));
  const GpuDeviceOptions& o = device->options_;
  device->capacity_ = o.max_slots != 0 ? o.max_slots : o.num_slots;
  device->num_slots_ = o.num_slots;
  if (hipError_t err = hipSetDevice(o.device); err != hipSuccess) {
    return GpuError("hipSetDevice", err);
  }
  const uint64_t bytes = o.layout.RegionBytes(device->capacity_);
  if (bytes > 0) {
    if (hipError_t err = hipMalloc(&device->base_, bytes); err != hipSuccess) {
      device->base_ = nullptr;
      return absl::ResourceExhaustedError(
          absl::StrCat("hipMalloc(", bytes, " bytes for ", device->capacity_,
                       " slots): ", hipGetErrorString(err)));
    }
    if (hipError_t err = hipMemset(device->base_, 0, bytes);
        err != hipSuccess) {
      return GpuError("hipMemset(region)", err);
    }
    if (hipError_t err =
            hipIpcGetMemHandle(&device->runtime_->handle, device->base_);
        err != hipSuccess) {
      return GpuError("hipIpcGetMemHandle", err);
    }
  }
  if (hipError_t err = hipStreamCreateWithFlags(&device->runtime_->stream,
                                                hipStreamNonBlocking);
      err != hipSuccess) {
    return GpuError("hipStreamCreateWithFlags", err);
  }
  ASSIGN_OR_RETURN(device->runtime_->copier, GpuCopier::Create());
  return device;
}

GpuDevice::~GpuDevice() {
  (void)hipSetDevice(options_.device);
  runtime_->copier.reset();
  if (runtime_->stream != nullptr) (void)hipStreamDestroy(runtime_->stream);
  if (base_ != nullptr) (void)hipFree(base_);
}

std::string_view GpuDevice::backend() const {
  return STATECACHE_GPU_BACKEND_NAME;
}

absl::Status GpuDevice::Resize(int64_t new_num_slots) {
  if (new_num_slots < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resize: negative slot count ", new_num_slots));
  }
  if (new_num_slots > capacity_) {
    return absl::OutOfRangeError(absl::StrCat(
        "resize: ", new_num_slots, " slots exceed the ", capacity_,
        " reserved at start (GPU regions cannot grow: raise --max_slots)"));
  }
  num_slots_ = new_num_slots;
  return absl::OkStatus();
}

RegionExport GpuDevice::Export() const {
  RegionExport out;
  out.backend = std::string(backend());
  if (base_ != nullptr) {
    out.handle.assign(reinterpret_cast<const char*>(&runtime_->handle),
                      sizeof(runtime_->handle));
  }
  out.device_ordinal = options_.device;
  out.num_slots = num_slots_;
  out.capacity_slots = capacity_;
  out.region_bytes = options_.layout.RegionBytes(capacity_);
  out.layout = options_.layout;
  out.layout_fingerprint = options_.layout.FingerprintHex();
  out.placements = options_.layout.Placements(capacity_);
  return out;
}

absl::Status GpuDevice::RunTable(const CopyTable& table, const void* src_base,
                                 void* dst_base) {
  absl::MutexLock lock(&copy_mu_);
  if (hipError_t err = hipSetDevice(options_.device); err != hipSuccess) {
    return GpuError("hipSetDevice", err);
  }
  return runtime_->copier->Run(table.descriptors, src_base, dst_base,
                               runtime_->stream);
}

absl::StatusOr<CopyResult> GpuDevice::Copy(absl::Span<const SlotPair> pairs) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(CopyTable table, BuildCopyTable(options_.layout, capacity_,
                                                   num_slots_, pairs));
  RETURN_IF_ERROR(RunTable(table, base_, base_));
  return CopyResult::Of(table, start);
}

absl::StatusOr<std::unique_ptr<HostStaging>> GpuDevice::AllocateStaging(
    uint64_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("staging memory of 0 bytes");
  }
  // The pinned allocation belongs to the calling thread's current device.
  if (hipError_t err = hipSetDevice(options_.device); err != hipSuccess) {
    return GpuError("hipSetDevice", err);
  }
  void* host = nullptr;
  if (hipError_t err = hipHostMalloc(&host, bytes, hipHostMallocMapped);
      err != hipSuccess) {
    // The failure is also the last error: clear it, or the next launch's
    // check (hipGetLastError) would report it.
    (void)hipGetLastError();
    const std::string message =
        absl::StrCat("hipHostMalloc(", bytes,
                     " bytes of staging memory): ", hipGetErrorString(err));
    if (err == hipErrorOutOfMemory) {
      return absl::ResourceExhaustedError(message);
    }
    return absl::InternalError(message);
  }
  void* device = nullptr;
  if (hipError_t err = hipHostGetDevicePointer(&device, host, 0);
      err != hipSuccess) {
    (void)hipHostFree(host);
    return GpuError("hipHostGetDevicePointer(staging memory)", err);
  }
  return std::make_unique<PinnedStaging>(static_cast<char*>(host),
                                         static_cast<char*>(device), bytes);
}

absl::StatusOr<CopyResult> GpuDevice::CopyImages(
    const HostStaging& staging, absl::Span<const SlotImage> images,
    bool to_region) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(char* staging_base, DeviceAddress(staging));
  ASSIGN_OR_RETURN(CopyTable table,
                   BuildImageCopyTable(options_.layout, capacity_, num_slots_,
                                       staging.size(), images, to_region));
  RETURN_IF_ERROR(to_region ? RunTable(table, staging_base, base_)
                            : RunTable(table, base_, staging_base));
  return CopyResult::Of(table, start);
}

absl::StatusOr<CopyResult> GpuDevice::ReadSlots(
    HostStaging& staging, absl::Span<const SlotImage> images) {
  return CopyImages(staging, images, /*to_region=*/false);
}

absl::StatusOr<CopyResult> GpuDevice::WriteSlots(
    const HostStaging& staging, absl::Span<const SlotImage> images) {
  return CopyImages(staging, images, /*to_region=*/true);
}

uint64_t GpuDevice::CommittedBytes() const {
  return options_.layout.RegionBytes(capacity_);
}

}  // namespace statecache

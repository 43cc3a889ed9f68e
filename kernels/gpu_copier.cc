#include "kernels/gpu_copier.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/copy_kernel.h"
#include "kernels/copy_table.h"

namespace statecache {
namespace {

// Resident blocks per compute unit the grid is sized for: 8 blocks of 256
// threads fill an SM / CU (2048 threads), more only adds grid-stride rounds.
constexpr int kBlocksPerUnit = 8;

}  // namespace

absl::Status GpuError(const char* what, hipError_t err) {
  return absl::InternalError(absl::StrCat(what, ": ", hipGetErrorString(err)));
}

absl::StatusOr<std::unique_ptr<GpuCopier>> GpuCopier::Create() {
  int device = 0;
  if (hipError_t err = hipGetDevice(&device); err != hipSuccess) {
    return GpuError("hipGetDevice", err);
  }
  int units = 0;
  if (hipError_t err = hipDeviceGetAttribute(
          &units, hipDeviceAttributeMultiprocessorCount, device);
      err != hipSuccess) {
    return GpuError("hipDeviceGetAttribute(multiprocessor count)", err);
  }
  std::unique_ptr<GpuCopier> copier(new GpuCopier());
  copier->max_blocks_ = std::max(1, units * kBlocksPerUnit);
  return copier;
}

GpuCopier::~GpuCopier() {
  if (staging_ != nullptr) (void)hipHostFree(staging_);
  if (device_table_ != nullptr) (void)hipFree(device_table_);
}

absl::Status GpuCopier::Reserve(size_t descriptors) {
  if (descriptors <= capacity_) return absl::OkStatus();
  const size_t capacity = std::max(descriptors, capacity_ * 2);
  if (staging_ != nullptr) (void)hipHostFree(staging_);
  if (device_table_ != nullptr) (void)hipFree(device_table_);
  staging_ = nullptr;
  device_table_ = nullptr;
  capacity_ = 0;
  const size_t bytes = capacity * sizeof(CopyDescriptor);
  if (hipError_t err = hipHostMalloc(reinterpret_cast<void**>(&staging_), bytes,
                                     hipHostMallocDefault);
      err != hipSuccess) {
    staging_ = nullptr;
    return GpuError("hipHostMalloc(copy table)", err);
  }
  if (hipError_t err =
          hipMalloc(reinterpret_cast<void**>(&device_table_), bytes);
      err != hipSuccess) {
    device_table_ = nullptr;
    return GpuError("hipMalloc(copy table)", err);
  }
  capacity_ = capacity;
  return absl::OkStatus();
}

absl::Status GpuCopier::Upload(absl::Span<const CopyDescriptor> table,
                               hipStream_t stream) {
  const std::vector<CopyDescriptor> chunks =
      SplitCopyTable(table, kDeviceCopyChunkBytes);
  prepared_ = 0;
  if (chunks.empty()) return absl::OkStatus();
  if (absl::Status s = Reserve(chunks.size()); !s.ok()) return s;
  std::memcpy(staging_, chunks.data(), chunks.size() * sizeof(CopyDescriptor));
  if (hipError_t err = hipMemcpyAsync(device_table_, staging_,
                                      chunks.size() * sizeof(CopyDescriptor),
                                      hipMemcpyHostToDevice, stream);
      err != hipSuccess) {
    return GpuError("hipMemcpyAsync(copy table)", err);
  }
  prepared_ = static_cast<int64_t>(chunks.size());
  return absl::OkStatus();
}

absl::Status GpuCopier::Prepare(absl::Span<const CopyDescriptor> table,
                                hipStream_t stream) {
  if (absl::Status s = Upload(table, stream); !s.ok()) return s;
  if (hipError_t err = hipStreamSynchronize(stream); err != hipSuccess) {
    return GpuError("hipStreamSynchronize(copy table upload)", err);
  }
  return absl::OkStatus();
}

absl::Status GpuCopier::Launch(const void* src_base, void* dst_base,
                               hipStream_t stream) {
  if (hipError_t err = LaunchCopyTable(device_table_, prepared_, src_base,
                                       dst_base, max_blocks_, stream);
      err != hipSuccess) {
    return GpuError("copy kernel launch", err);
  }
  return absl::OkStatus();
}

absl::Status GpuCopier::Run(absl::Span<const CopyDescriptor> table,
                            const void* src_base, void* dst_base,
                            hipStream_t stream) {
  // Upload and kernel are ordered on the stream: one wait for both. The
  // staging buffer is free again once it returns.
  if (absl::Status s = Upload(table, stream); !s.ok()) return s;
  if (absl::Status s = Launch(src_base, dst_base, stream); !s.ok()) return s;
  if (hipError_t err = hipStreamSynchronize(stream); err != hipSuccess) {
    return GpuError("hipStreamSynchronize(copy)", err);
  }
  return absl::OkStatus();
}

}  // namespace statecache

// GpuDevice: the GPU backend ("hip", or "cuda" for the NVIDIA build of the
// same sources). The region is one hipMalloc on the daemon's device,
// exported with hipIpcGetMemHandle on the allocation's base (the placements'
// offsets travel separately, in the export).
//
// Capacity: without the virtual-memory API the allocation cannot grow or
// give memory back in place, so the daemon reserves max_slots at Create
// (laid out for that capacity, in either arrangement) and Resize moves the
// slot count inside it. CommittedBytes() is the whole reservation; GetStats
// and docs/operators.md say so.
//
// Copies run as one kernel launch (GpuCopier) on the device's own non-
// blocking stream, synchronised before Copy returns. Staging memory is
// pinned host memory mapped for the device (hipHostMalloc with
// hipHostMallocMapped), so ReadSlots and WriteSlots are the same one launch,
// the kernel reading or writing host memory through the mapping; a staging
// object another backend made is refused (INVALID_ARGUMENT).
//
// This header has no GPU runtime types, so the backend-neutral factory
// (device.cc) includes it; only builds with STATECACHE_WITH_HIP or
// STATECACHE_WITH_CUDA compile gpu_device.cc.
//
// Thread-safety: as Device. Every call sets the device on the calling
// thread first (the daemon's RPC threads vary).
#ifndef STATECACHE_DAEMON_DEVICE_GPU_DEVICE_H_
#define STATECACHE_DAEMON_DEVICE_GPU_DEVICE_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/device/device.h"

namespace statecache {

struct GpuDeviceOptions {
  StateLayout layout;
  int64_t num_slots = 0;
  int64_t max_slots = 0;  // the reservation; 0 = num_slots
  int device = 0;         // --device N
};

class GpuDevice : public Device {
 public:
  // Allocates and zeroes RegionBytes(max_slots) on `device`, takes its IPC
  // handle, creates the stream.
  // Errors: UNAVAILABLE when no such device exists (or no GPU runtime
  // driver); INVALID_ARGUMENT for bad sizes; RESOURCE_EXHAUSTED when the
  // allocation fails; INTERNAL otherwise.
  static absl::StatusOr<std::unique_ptr<GpuDevice>> Create(
      GpuDeviceOptions options);
  ~GpuDevice() override;

  // Number of devices the runtime sees (0 when there is no driver).
  static int DeviceCount();

  std::string_view backend() const override;  // "hip" or "cuda"
  const StateLayout& layout() const override { return options_.layout; }
  int64_t num_slots() const override { return num_slots_; }
  int64_t max_slots() const override { return capacity_; }
  absl::Status Resize(int64_t new_num_slots) override;
  RegionExport Export() const override;
  absl::StatusOr<CopyResult> Copy(absl::Span<const SlotPair> pairs) override;
  absl::StatusOr<std::unique_ptr<HostStaging>> AllocateStaging(
      uint64_t bytes) override;
  absl::StatusOr<CopyResult> ReadSlots(
      HostStaging& staging, absl::Span<const SlotImage> images) override;
  absl::StatusOr<CopyResult> WriteSlots(
      const HostStaging& staging, absl::Span<const SlotImage> images) override;
  uint64_t CommittedBytes() const override;

  // The daemon's device pointer to the region (tests, benchmarks).
  void* base() const { return base_; }

 private:
  struct Runtime;  // stream, copier, IPC handle: runtime types
  explicit GpuDevice(GpuDeviceOptions options);
  // Runs `table` on the copier under copy_mu_, synchronised.
  // ReadSlots (to_region false) and WriteSlots (true).
  absl::StatusOr<CopyResult> CopyImages(const HostStaging& staging,
                                        absl::Span<const SlotImage> images,
                                        bool to_region);
  absl::Status RunTable(const CopyTable& table, const void* src_base,
                        void* dst_base);

  const GpuDeviceOptions options_;
  int64_t capacity_ = 0;
  int64_t num_slots_ = 0;
  void* base_ = nullptr;
  absl::Mutex copy_mu_;
  std::unique_ptr<Runtime> runtime_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_DEVICE_GPU_DEVICE_H_

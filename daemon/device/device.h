// Device: the state region the daemon owns (one per daemon), and the copies
// it runs inside it. The service owns one Device and drives it after each
// pool decision:
//
//   Create    at start: a region for num_slots slots of the layout
//             (CreateDevice below picks the backend).
//   Export    for every Attach: the handle, size and placements a model
//             runner opens (RegionExport).
//   Copy      relocations, explicit copies, copy-mode snapshots: one batch
//             of (src, dst) slot pairs, one batched copy, finished when Copy
//             returns (GPU: run on the device's own stream, synchronised).
//   Resize    after the pool grew (extend) or before it shrank (after the
//             relocations out of the tail ran): the region follows the slot
//             count; the host backend returns the tail's memory.
//   CommittedBytes  for GetStats and the metrics.
//   AllocateStaging, ReadSlots, WriteSlots  the host tier: host memory for
//             slot images (pinned on the GPU backends), whole slots copied
//             out into images and back onto slots, one batched copy each,
//             finished when the call returns (as Copy).
//
// Backends: HostDevice (POSIX shared memory, daemon/device/host_device.h)
// and GpuDevice (hipMalloc + IPC handle, built with STATECACHE_WITH_HIP or
// STATECACHE_WITH_CUDA, daemon/device/gpu_device.h).
//
// Thread-safety: thread-compatible. Resize needs exclusive access (the
// daemon calls it under its pool mutex, between copies). Copy, Export and
// the accessors may run concurrently with each other; Copy, ReadSlots and
// WriteSlots calls are serialised internally (one batched copy at a time).
// AllocateStaging may run concurrently with any of them. A HostStaging is
// thread-compatible: the caller keeps anyone from reading or writing the
// images a ReadSlots or WriteSlots is copying.
#ifndef STATECACHE_DAEMON_DEVICE_DEVICE_H_
#define STATECACHE_DAEMON_DEVICE_DEVICE_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/device/copy_plan.h"
#include "vocabulary/layout.h"
#include "vocabulary/region_export.h"

namespace statecache {

// What one Copy did, for the metrics (copy bytes and time).
struct CopyResult {
  uint64_t bytes = 0;       // bytes moved, padding included
  int64_t descriptors = 0;  // ranges after coalescing
  absl::Duration elapsed;   // building the table through completion

  // What a backend reports for `table`, copied since `start`.
  static CopyResult Of(const CopyTable& table, absl::Time start) {
    return CopyResult{table.total_bytes,
                      static_cast<int64_t>(table.descriptors.size()),
                      absl::Now() - start};
  }
};

// Host memory the host tier keeps slot images in: `size()` bytes at `data()`.
// Pinned (page-locked and mapped for the device) on the GPU backends, so one
// launch of the copy kernel reaches it; ordinary memory on the host backend.
// data() is aligned to at least 64 bytes. Destroying it frees the memory;
// it may outlive the Device that allocated it (but is of no use then).
class HostStaging {
 public:
  virtual ~HostStaging() = default;
  virtual char* data() const = 0;
  virtual uint64_t size() const = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  // "host", "hip" or "cuda"; the same string Export() carries.
  virtual std::string_view backend() const = 0;
  virtual const StateLayout& layout() const = 0;
  // Slots in the region now: valid slot indices are [0, num_slots()).
  virtual int64_t num_slots() const = 0;
  // The most slots Resize accepts: the reserved capacity (GPU backends and
  // layer-major regions are laid out once for it), or kMaxLayoutSlots for a
  // slot-major host region, which grows without a bound of its own.
  virtual int64_t max_slots() const = 0;

  // Makes the region hold `new_num_slots` slots. Slots below
  // min(old, new) keep their bytes; slots that appear hold unspecified bytes
  // (zeros on the host backend, except within a page shared with a live
  // slot). Shrinking drops the content of the tail: relocate first.
  // Errors: INVALID_ARGUMENT if new_num_slots < 0; OUT_OF_RANGE above
  // max_slots(); RESOURCE_EXHAUSTED / INTERNAL when the memory cannot be
  // grown (the region is then unchanged).
  virtual absl::Status Resize(int64_t new_num_slots) = 0;

  // The region as a client opens it now (see RegionExport).
  virtual RegionExport Export() const = 0;

  // Copies, for every (src, dst) pair, all of slot src onto slot dst: every
  // tensor of every layer, in one batched copy (the host twin or one kernel
  // launch). Returns when the bytes are in place.
  // Errors: INVALID_ARGUMENT from BuildCopyTable (slot out of range,
  // src == dst, a slot written twice or both read and written) with nothing
  // copied; INTERNAL for a device failure.
  virtual absl::StatusOr<CopyResult> Copy(absl::Span<const SlotPair> pairs) = 0;

  // Memory for slot images (see SlotImage, daemon/device/copy_plan.h), its
  // bytes unspecified.
  // REQUIRES: bytes > 0 (0 is refused with INVALID_ARGUMENT).
  // Errors: RESOURCE_EXHAUSTED / INTERNAL when it cannot be had.
  virtual absl::StatusOr<std::unique_ptr<HostStaging>> AllocateStaging(
      uint64_t bytes) = 0;

  // Copies each image's slot into the image (region -> staging), all in one
  // batched copy (the host copier, or one kernel launch on the daemon's
  // stream, synchronised); returns when the bytes are in place. A slot may
  // be read into several images.
  // REQUIRES: `staging` came from this device's AllocateStaging.
  // Errors: INVALID_ARGUMENT from BuildImageCopyTable (nothing copied),
  //   naming the entry: a slot outside [0, num_slots()), an image not inside
  //   the staging memory, two images that overlap; INTERNAL for a device
  //   failure.
  virtual absl::StatusOr<CopyResult> ReadSlots(
      HostStaging& staging, absl::Span<const SlotImage> images) = 0;
  // The reverse (staging -> region): each image onto its slot, one batched
  // copy; returns when the bytes are in place.
  // REQUIRES: as ReadSlots.
  // Errors: as ReadSlots, and a slot named twice.
  virtual absl::StatusOr<CopyResult> WriteSlots(
      const HostStaging& staging, absl::Span<const SlotImage> images) = 0;

  // Memory the region holds now, in bytes: allocated pages of the shared-
  // memory object (host), or the whole reservation (GPU without the
  // virtual-memory API).
  virtual uint64_t CommittedBytes() const = 0;

  // Whether ChecksumSlots can hash slots where they lie (a slot-major host
  // region); otherwise a caller reads them out with ReadSlots and hashes
  // the images.
  virtual bool CanChecksumInPlace() const { return false; }
  // out[k] = Checksum (daemon/common/checksum.h) of slot slots[k]'s image
  // (SlotImage's layout), read where it lies: no copy.
  // REQUIRES: CanChecksumInPlace(); out.size() == slots.size().
  // Errors: INVALID_ARGUMENT a slot outside [0, num_slots()) (nothing
  //   hashed); UNIMPLEMENTED when !CanChecksumInPlace().
  // (Inline: the interface stays header-only, a library of its own for
  // no backend.)
  virtual absl::Status ChecksumSlots(absl::Span<const int64_t> slots,
                                     absl::Span<uint64_t> out) {
    return absl::UnimplementedError(
        "this state memory cannot be checksummed in place");
  }
};

// How the daemon asks for its region (flags --device_backend, --device,
// --max_slots, --shm_mode, --shm_group, --copy_threads map onto it).
struct DeviceOptions {
  // "host", "hip", "cuda", or "gpu" (whichever GPU flavour this build has).
  std::string backend = "host";
  StateLayout layout;
  int64_t num_slots = 0;
  // Capacity to reserve. 0 means: unbounded for a slot-major host region,
  // num_slots otherwise (a region that cannot grow). GPU backends (no
  // virtual-memory API) and layer-major regions are laid out for it once.
  int64_t max_slots = 0;
  uint64_t epoch = 0;  // the daemon's epoch: part of the host shm name
  // Host backend.
  std::string shm_prefix = "statecache";
  mode_t shm_mode = 0600;
  gid_t shm_group = static_cast<gid_t>(-1);  // -1: the daemon's own
  // Keep the region after the daemon (HostDeviceOptions::retain), named for
  // this daemon's successor by `shm_keeper` (ShmKeeperKey).
  bool retain_region = false;
  uint64_t shm_keeper = 0;
  int copy_threads = 4;
  // GPU backends.
  int device = 0;
};

// Creates the backend `options.backend` names.
// Errors: INVALID_ARGUMENT for an unknown backend or bad sizes; UNAVAILABLE
// for a GPU backend this build lacks or a missing device; otherwise the
// backend's own.
absl::StatusOr<std::unique_ptr<Device>> CreateDevice(
    const DeviceOptions& options);

// The backends this build can create, e.g. {"host", "cuda"}.
std::vector<std::string_view> AvailableDeviceBackends();

}  // namespace statecache

#endif  // STATECACHE_DAEMON_DEVICE_DEVICE_H_

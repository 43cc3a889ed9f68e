// HostDevice: the host backend. The state region is a POSIX shared-memory
// object that the daemon maps and clients map (HostRegion) by name.
//
//   Name: FormatShmName(prefix, epoch, this process) (shm_name.h), created
//     exclusively with `mode` (0600 by default; fchmod'ed so the umask does
//     not narrow it). Unlinked when the HostDevice is destroyed; after a
//     crash, the next daemon's CleanupStale() removes it. A retained region
//     (options.retain) is named FormatRetainedShmName and outlives the
//     HostDevice and the process: the daemon that restores from it removes
//     it (daemon/device/retained_region.h).
//   Memory: the pages of the slots in use are allocated when they join the
//     region (fallocate at Create and Grow), so running out of /dev/shm is
//     an error from Create or Resize, never a SIGBUS at first touch in the
//     daemon or a model runner. CommittedBytes() is the object's allocated
//     blocks.
//   Slot-major regions grow by extending the object (ftruncate) and the
//     daemon's mapping (mremap), and shrink by punching the freed tail out
//     (fallocate PUNCH_HOLE | KEEP_SIZE): the memory returns to the system
//     while the object keeps its size, so a client still mapping the old
//     size reads zeros instead of faulting. The object's size is the high-
//     water mark; Export().region_bytes is what holds slots now.
//   Layer-major regions are laid out once for max_slots (the object has
//     that size from the start, sparse); shrinking punches the freed tail of
//     every (layer, tensor) block, page-granular; growing up to max_slots
//     needs nothing (holes fill on touch).
//   Copies run on a HostCopier (memcpy over `copy_threads` threads), slot
//   to slot (Copy) and between slots and staging memory (ReadSlots,
//   WriteSlots), one table at a time. Staging memory is private anonymous
//   memory (mmap), page-aligned, returned to the system when freed.
//
// Thread-safety: as Device.
#ifndef STATECACHE_DAEMON_DEVICE_HOST_DEVICE_H_
#define STATECACHE_DAEMON_DEVICE_HOST_DEVICE_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/device/device.h"
#include "kernels/host_copy.h"

namespace statecache {

struct HostDeviceOptions {
  StateLayout layout;
  int64_t num_slots = 0;
  // Slot-major: 0 = no bound; otherwise Resize refuses more. Layer-major:
  // the capacity the region is laid out for (0 = num_slots).
  int64_t max_slots = 0;
  uint64_t epoch = 0;
  std::string prefix = "statecache";  // see ValidShmPrefix
  mode_t mode = 0600;
  // The object's group, so that engines in it can map the state (the
  // socket directory's, by default); -1 leaves the daemon's own.
  gid_t group = static_cast<gid_t>(-1);
  // Name the object for a warm restart (FormatRetainedShmName), so that
  // once KeepOnExit was called it outlives the HostDevice (a crash keeps it
  // either way) and the daemon's successor reads its checkpoints out of it.
  bool retain = false;
  // With `retain`: whose successor it waits for (ShmKeeperKey).
  uint64_t keeper = 0;
  HostCopierOptions copier;
};

class HostDevice : public Device {
 public:
  // Creates, sizes and maps the object.
  // Errors: INVALID_ARGUMENT (empty layout, num_slots < 0, num_slots >
  // max_slots, bad prefix, region over 2^62 bytes); ALREADY_EXISTS if the
  // name is taken; INTERNAL / RESOURCE_EXHAUSTED from the system calls.
  static absl::StatusOr<std::unique_ptr<HostDevice>> Create(
      HostDeviceOptions options);
  ~HostDevice() override;  // unmaps, closes and unlinks

  // Removes /dev/shm/<prefix>-* objects of dead daemons (CleanupStaleShm).
  // The daemon calls it at start, before Create.
  static absl::StatusOr<std::vector<std::string>> CleanupStale(
      std::string_view prefix = "statecache");

  std::string_view backend() const override { return "host"; }
  const StateLayout& layout() const override { return options_.layout; }
  int64_t num_slots() const override { return num_slots_; }
  int64_t max_slots() const override { return max_slots_; }
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
  bool CanChecksumInPlace() const override;
  absl::Status ChecksumSlots(absl::Span<const int64_t> slots,
                             absl::Span<uint64_t> out) override;

  // The object's name (with the leading '/').
  const std::string& shm_name() const { return name_; }
  // Whether the destructor leaves the object (see options.retain): a
  // daemon keeps it once its state directory names it, and lets it go once
  // a shutdown saved its checkpoints elsewhere, so that neither a daemon
  // that fails to start nor one that stops cleanly leaks it.
  // REQUIRES: options.retain when keep.
  void KeepOnExit(bool keep) { unlink_on_destroy_ = !keep; }
  // The daemon's own mapping of the region (valid until the next Resize).
  char* base() const { return base_; }

 private:
  explicit HostDevice(HostDeviceOptions options);
  int64_t Capacity() const;  // the capacity placements are laid out for
  absl::Status Grow(int64_t new_num_slots);
  absl::Status Shrink(int64_t new_num_slots);
  // ReadSlots (to_region false) and WriteSlots (true).
  absl::StatusOr<CopyResult> CopyImages(const HostStaging& staging,
                                        absl::Span<const SlotImage> images,
                                        bool to_region);

  const HostDeviceOptions options_;
  int64_t max_slots_ = 0;
  std::string name_;
  int fd_ = -1;
  char* base_ = nullptr;
  uint64_t mapped_bytes_ = 0;  // length of the daemon's mapping
  uint64_t file_bytes_ = 0;    // size of the object (high-water mark)
  bool unlink_on_destroy_ = true;
  int64_t num_slots_ = 0;
  absl::Mutex copy_mu_;  // one table at a time on the copier
  std::unique_ptr<HostCopier> copier_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_DEVICE_HOST_DEVICE_H_

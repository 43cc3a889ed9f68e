#include "daemon/device/host_device.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/checksum.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/string_view_compat.h"
#include "daemon/device/shm_name.h"

namespace statecache {
namespace {

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

uint64_t RoundUp(uint64_t value, uint64_t to) {
  return (value + to - 1) / to * to;
}

absl::Status ErrnoError(std::string_view what, int err) {
  const std::string message = absl::StrCat(Av(what), ": ", strerror(err));
  if (err == ENOSPC || err == ENOMEM || err == EFBIG) {
    return absl::ResourceExhaustedError(message);
  }
  if (err == EEXIST) return absl::AlreadyExistsError(message);
  return absl::InternalError(message);
}

// Commits [offset, offset + bytes) of the object (growing its size if the
// range passes the end), so running out of shared memory is an error here
// instead of a SIGBUS at first touch, in the daemon or in a client. Out of
// space, the message says how much the shared-memory filesystem has.
absl::Status Commit(int fd, uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(bytes)) !=
      0) {
    const int err = errno;
    std::string what = absl::StrCat("fallocate(", offset, ", ", bytes, ")");
    struct statvfs fs;
    if (err == ENOSPC && fstatvfs(fd, &fs) == 0) {
      absl::StrAppend(&what, " of shared memory, which has ",
                      static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize,
                      " bytes free of ",
                      static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize);
    }
    return ErrnoError(what, err);
  }
  return absl::OkStatus();
}

// Returns the whole pages inside [begin, end) to the system; the object
// keeps its size and the range reads as zeros.
absl::Status PunchPages(int fd, uint64_t begin, uint64_t end) {
  const uint64_t page = PageSize();
  begin = RoundUp(begin, page);
  end = end / page * page;
  if (end <= begin) return absl::OkStatus();
  if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                static_cast<off_t>(begin),
                static_cast<off_t>(end - begin)) != 0) {
    return ErrnoError("fallocate(PUNCH_HOLE)", errno);
  }
  return absl::OkStatus();
}

// Private anonymous pages: page-aligned (more than the 64 bytes the
// contract promises), and unmapping returns them to the system at once.
class MappedStaging : public HostStaging {
 public:
  MappedStaging(char* data, uint64_t size) : data_(data), size_(size) {}
  ~MappedStaging() override { munmap(data_, size_); }
  MappedStaging(const MappedStaging&) = delete;
  MappedStaging& operator=(const MappedStaging&) = delete;

  char* data() const override { return data_; }
  uint64_t size() const override { return size_; }

 private:
  char* const data_;
  const uint64_t size_;
};

}  // namespace

HostDevice::HostDevice(HostDeviceOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<HostDevice>> HostDevice::Create(
    HostDeviceOptions options) {
  const StateLayout& layout = options.layout;
  if (layout.num_tensors() == 0) {
    return absl::InvalidArgumentError("host device: empty layout");
  }
  if (options.num_slots < 0 || options.max_slots < 0 ||
      options.num_slots > kMaxLayoutSlots ||
      options.max_slots > kMaxLayoutSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host device: num_slots ", options.num_slots, " / max_slots ",
        options.max_slots, " outside [0, ", kMaxLayoutSlots, "]"));
  }
  if (options.max_slots != 0 && options.num_slots > options.max_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("host device: num_slots ", options.num_slots,
                     " exceeds max_slots ", options.max_slots));
  }
  if (!ValidShmPrefix(options.prefix)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host device: bad shared-memory prefix \"", options.prefix, "\""));
  }
  std::unique_ptr<HostDevice> device(new HostDevice(std::move(options)));
  const HostDeviceOptions& o = device->options_;
  const bool slot_major = o.layout.arrangement() == Arrangement::kSlotMajor;
  device->max_slots_ = o.max_slots != 0 ? o.max_slots
                       : slot_major     ? kMaxLayoutSlots
                                        : o.num_slots;
  device->name_ = o.retain
                      ? FormatRetainedShmName(o.prefix, o.epoch,
                                              CurrentShmOwner(), o.keeper)
                      : FormatShmName(o.prefix, o.epoch, CurrentShmOwner());
  device->fd_ = shm_open(device->name_.c_str(),
                         O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, o.mode);
  if (device->fd_ < 0) {
    return ErrnoError(absl::StrCat("shm_open(", device->name_, ")"), errno);
  }
  // The destructor unlinks from here on, whatever fails below.
  if (o.group != static_cast<gid_t>(-1) &&
      fchown(device->fd_, static_cast<uid_t>(-1), o.group) != 0) {
    return ErrnoError(absl::StrCat("giving ", device->name_, " to group ",
                                   o.group, " (fchown)"),
                      errno);
  }
  if (fchmod(device->fd_, o.mode) != 0) {
    return ErrnoError("fchmod", errno);
  }
  // The owner lock: held for the daemon's life, it tells another daemon's
  // stale-object cleanup (see shm_name.h) that this object is live.
  if (flock(device->fd_, LOCK_EX | LOCK_NB) != 0) {
    return ErrnoError("flock", errno);
  }
  if (!slot_major) {
    // Laid out once for the capacity: size it whole (sparse), commit the
    // slots in use.
    device->file_bytes_ = o.layout.RegionBytes(device->max_slots_);
    if (ftruncate(device->fd_, static_cast<off_t>(device->file_bytes_)) != 0) {
      return ErrnoError("ftruncate", errno);
    }
    if (device->file_bytes_ > 0) {
      void* base = mmap(nullptr, device->file_bytes_, PROT_READ | PROT_WRITE,
                        MAP_SHARED, device->fd_, 0);
      if (base == MAP_FAILED) return ErrnoError("mmap", errno);
      device->base_ = static_cast<char*>(base);
      device->mapped_bytes_ = device->file_bytes_;
    }
  }
  RETURN_IF_ERROR(device->Grow(o.num_slots));
  device->copier_ = std::make_unique<HostCopier>(o.copier);
  return device;
}

HostDevice::~HostDevice() {
  if (base_ != nullptr) munmap(base_, mapped_bytes_);
  if (fd_ >= 0) {
    close(fd_);
    if (unlink_on_destroy_) shm_unlink(name_.c_str());
  }
}

absl::StatusOr<std::vector<std::string>> HostDevice::CleanupStale(
    std::string_view prefix) {
  return CleanupStaleShm(prefix);
}

int64_t HostDevice::Capacity() const {
  return options_.layout.arrangement() == Arrangement::kSlotMajor ? num_slots_
                                                                  : max_slots_;
}

absl::Status HostDevice::Resize(int64_t new_num_slots) {
  if (new_num_slots < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resize: negative slot count ", new_num_slots));
  }
  if (new_num_slots > max_slots_) {
    return absl::OutOfRangeError(absl::StrCat(
        "resize: ", new_num_slots, " slots exceed the region's capacity of ",
        max_slots_,
        options_.layout.arrangement() == Arrangement::kLayerMajor
            ? " (a layer-major region is laid out once for max_slots)"
            : ""));
  }
  if (new_num_slots > num_slots_) return Grow(new_num_slots);
  if (new_num_slots < num_slots_) return Shrink(new_num_slots);
  return absl::OkStatus();
}

absl::Status HostDevice::Grow(int64_t new_num_slots) {
  const StateLayout& layout = options_.layout;
  if (layout.arrangement() == Arrangement::kLayerMajor) {
    // Commit the new slots' pieces in every block; nothing moves.
    for (int64_t layer = 0; layer < layout.num_layers(); ++layer) {
      for (int tensor = 0; tensor < layout.num_tensors(); ++tensor) {
        const uint64_t begin =
            layout.PieceOffset(tensor, layer, num_slots_, max_slots_);
        const uint64_t bytes =
            static_cast<uint64_t>(new_num_slots - num_slots_) *
            layout.padded_piece_bytes(tensor);
        RETURN_IF_ERROR(Commit(fd_, begin, bytes));
      }
    }
    num_slots_ = new_num_slots;
    return absl::OkStatus();
  }
  const uint64_t old_bytes = layout.RegionBytes(num_slots_);
  const uint64_t new_bytes = layout.RegionBytes(new_num_slots);
  RETURN_IF_ERROR(Commit(fd_, old_bytes, new_bytes - old_bytes));
  file_bytes_ = std::max(file_bytes_, new_bytes);
  if (new_bytes > mapped_bytes_) {
    void* base = base_ == nullptr
                     ? mmap(nullptr, new_bytes, PROT_READ | PROT_WRITE,
                            MAP_SHARED, fd_, 0)
                     : mremap(base_, mapped_bytes_, new_bytes, MREMAP_MAYMOVE);
    if (base == MAP_FAILED) {
      // The object grew but nobody maps the new tail: harmless, the next
      // Grow reuses it.
      return ErrnoError(base_ == nullptr ? "mmap" : "mremap", errno);
    }
    base_ = static_cast<char*>(base);
    mapped_bytes_ = new_bytes;
  }
  num_slots_ = new_num_slots;
  return absl::OkStatus();
}

absl::Status HostDevice::Shrink(int64_t new_num_slots) {
  const StateLayout& layout = options_.layout;
  if (layout.arrangement() == Arrangement::kLayerMajor) {
    for (int64_t layer = 0; layer < layout.num_layers(); ++layer) {
      for (int tensor = 0; tensor < layout.num_tensors(); ++tensor) {
        const uint64_t piece = layout.padded_piece_bytes(tensor);
        const uint64_t block = layout.PieceOffset(tensor, layer, 0, max_slots_);
        RETURN_IF_ERROR(PunchPages(
            fd_, block + static_cast<uint64_t>(new_num_slots) * piece,
            block + static_cast<uint64_t>(num_slots_) * piece));
      }
    }
  } else {
    // Everything past the new end, up to the high-water mark.
    RETURN_IF_ERROR(PunchPages(fd_, layout.RegionBytes(new_num_slots),
                               RoundUp(file_bytes_, PageSize())));
  }
  num_slots_ = new_num_slots;
  return absl::OkStatus();
}

RegionExport HostDevice::Export() const {
  RegionExport out;
  out.backend = "host";
  out.handle = name_;
  out.num_slots = num_slots_;
  out.capacity_slots = Capacity();
  out.region_bytes = options_.layout.RegionBytes(out.capacity_slots);
  out.layout = options_.layout;
  out.layout_fingerprint = options_.layout.FingerprintHex();
  out.placements = options_.layout.Placements(out.capacity_slots);
  return out;
}

absl::StatusOr<CopyResult> HostDevice::Copy(absl::Span<const SlotPair> pairs) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(CopyTable table, BuildCopyTable(options_.layout, Capacity(),
                                                   num_slots_, pairs));
  {
    absl::MutexLock lock(&copy_mu_);
    copier_->Run(table.descriptors, base_, base_);
  }
  return CopyResult::Of(table, start);
}

absl::StatusOr<std::unique_ptr<HostStaging>> HostDevice::AllocateStaging(
    uint64_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("staging memory of 0 bytes");
  }
  // Populated at once: the tier's memory is the operator's to give, and a
  // demotion under load should not wait on first-touch page faults.
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (data == MAP_FAILED) {
    const int err = errno;
    // Whatever mmap says (EINVAL for a size past the address space, too),
    // the caller asked for more memory than there is.
    return absl::ResourceExhaustedError(absl::StrCat(
        "mmap(", bytes, " bytes of staging memory): ", strerror(err)));
  }
  return std::make_unique<MappedStaging>(static_cast<char*>(data), bytes);
}

absl::StatusOr<CopyResult> HostDevice::CopyImages(
    const HostStaging& staging, absl::Span<const SlotImage> images,
    bool to_region) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(CopyTable table,
                   BuildImageCopyTable(options_.layout, Capacity(), num_slots_,
                                       staging.size(), images, to_region));
  {
    absl::MutexLock lock(&copy_mu_);
    if (to_region) {
      copier_->Run(table.descriptors, staging.data(), base_);
    } else {
      copier_->Run(table.descriptors, base_, staging.data());
    }
  }
  return CopyResult::Of(table, start);
}

absl::StatusOr<CopyResult> HostDevice::ReadSlots(
    HostStaging& staging, absl::Span<const SlotImage> images) {
  return CopyImages(staging, images, /*to_region=*/false);
}

absl::StatusOr<CopyResult> HostDevice::WriteSlots(
    const HostStaging& staging, absl::Span<const SlotImage> images) {
  return CopyImages(staging, images, /*to_region=*/true);
}

bool HostDevice::CanChecksumInPlace() const {
  return options_.layout.arrangement() == Arrangement::kSlotMajor;
}

absl::Status HostDevice::ChecksumSlots(absl::Span<const int64_t> slots,
                                       absl::Span<uint64_t> out) {
  if (!CanChecksumInPlace()) return Device::ChecksumSlots(slots, out);
  for (int64_t slot : slots) {
    if (slot < 0 || slot >= num_slots_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checksum: slot ", slot, " outside [0, ", num_slots_, ")"));
    }
  }
  const uint64_t image_bytes = options_.layout.bytes_per_slot();
  for (size_t k = 0; k < slots.size(); ++k) {
    out[k] = Checksum(base_ + static_cast<uint64_t>(slots[k]) * image_bytes,
                      image_bytes);
  }
  return absl::OkStatus();
}

uint64_t HostDevice::CommittedBytes() const {
  struct stat st;
  if (fstat(fd_, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

}  // namespace statecache

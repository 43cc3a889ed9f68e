#include "daemon/device/retained_region.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/string_view_compat.h"
#include "daemon/device/copy_plan.h"
#include "daemon/device/shm_name.h"

namespace statecache {
namespace {

absl::Status OsError(std::string_view what, const std::string& handle,
                     int err) {
  const std::string message =
      absl::StrCat(Av(what), "(", handle, "): ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  return absl::InternalError(message);
}

}  // namespace

absl::StatusOr<RetainedRegion> RetainedRegion::Open(std::string_view handle,
                                                    std::string_view prefix,
                                                    uint64_t region_bytes) {
  const std::optional<RetainedShmName> name =
      ParseRetainedShmName(handle, prefix);
  if (!name.has_value() || handle.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", Av(handle), "\" is not a retained region of prefix ",
                     Av(prefix)));
  }
  RetainedRegion region;
  region.handle_ = std::string(handle);
  region.fd_ = shm_open(region.handle_.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (region.fd_ < 0) return OsError("shm_open", region.handle_, errno);
  if (flock(region.fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          region.handle_, " is held by a live daemon: not restoring from it"));
    }
    return OsError("flock", region.handle_, errno);
  }
  struct stat st;
  if (fstat(region.fd_, &st) != 0) {
    return OsError("fstat", region.handle_, errno);
  }
  // Trusted only as the region its own predecessor left: one another user
  // made (or may write) could hold anything.
  if (st.st_uid != geteuid() || (st.st_mode & S_IWOTH) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s belongs to uid %d (mode %04o), not to this daemon's user (uid "
        "%d) alone: not restoring from it, leaving it alone",
        region.handle_, st.st_uid, st.st_mode & 07777, geteuid()));
  }
  // Its name records its maker; the lock above says no daemon holds it,
  // the record that its maker is gone (or is this process).
  const ShmOwner& maker = name->name.owner;
  if (ShmOwnerAlive(maker) && !(maker == CurrentShmOwner())) {
    return absl::FailedPreconditionError(
        absl::StrCat(region.handle_, " was made by pid ", maker.pid,
                     ", which is still running: not restoring from it"));
  }
  region.size_ = static_cast<uint64_t>(st.st_size);
  if (region.size_ < region_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(region.handle_, " holds ", region.size_,
                     " bytes, fewer than the ", region_bytes, " it held"));
  }
  if (region.size_ > 0) {
    void* base =
        mmap(nullptr, region.size_, PROT_READ, MAP_SHARED, region.fd_, 0);
    if (base == MAP_FAILED) return OsError("mmap", region.handle_, errno);
    region.base_ = static_cast<const char*>(base);
  }
  return region;
}

RetainedRegion::RetainedRegion(RetainedRegion&& other) noexcept
    : handle_(std::move(other.handle_)),
      fd_(std::exchange(other.fd_, -1)),
      base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

RetainedRegion& RetainedRegion::operator=(RetainedRegion&& other) noexcept {
  if (this != &other) {
    this->~RetainedRegion();
    new (this) RetainedRegion(std::move(other));
  }
  return *this;
}

RetainedRegion::~RetainedRegion() {
  if (base_ != nullptr) munmap(const_cast<char*>(base_), size_);
  if (fd_ >= 0) close(fd_);
}

absl::Status RetainedRegion::ReadImages(const StateLayout& layout,
                                        int64_t capacity,
                                        absl::Span<const int64_t> slots,
                                        absl::Span<char> out) const {
  const uint64_t image_bytes = layout.bytes_per_slot();
  // `capacity` and `slots` come from an index. Any region holds at least
  // one whole image per slot, and a layer-major one laid out for capacity
  // slots holds capacity of them: so bounded, no piece's offset can wrap
  // (and alias another piece) before the range check below.
  const uint64_t whole = image_bytes == 0 ? 0 : size_ / image_bytes;
  if (layout.arrangement() == Arrangement::kLayerMajor &&
      (capacity < 1 || static_cast<uint64_t>(capacity) > whole)) {
    return absl::InvalidArgumentError(
        absl::StrCat(handle_, ": ", size_, " bytes cannot hold ", capacity,
                     " slots of ", image_bytes, " bytes"));
  }
  for (int64_t slot : slots) {
    if (slot < 0 || static_cast<uint64_t>(slot) >= whole) {
      return absl::InvalidArgumentError(absl::StrCat(
          handle_, ": slot ", slot, " lies outside its ", size_, " bytes"));
    }
  }
  std::vector<SlotImage> images;
  images.reserve(slots.size());
  for (int64_t slot : slots) {
    images.push_back(SlotImage{slot, images.size() * image_bytes});
  }
  ASSIGN_OR_RETURN(CopyTable table,
                   BuildImageCopyTable(layout, capacity, capacity, out.size(),
                                       images, /*to_region=*/false));
  for (const CopyDescriptor& d : table.descriptors) {
    if (d.src_offset > size_ || d.bytes > size_ - d.src_offset) {
      return absl::InvalidArgumentError(
          absl::StrCat(handle_, ": a piece at ", d.src_offset, " (", d.bytes,
                       " bytes) lies outside its ", size_, " bytes"));
    }
  }
  for (const CopyDescriptor& d : table.descriptors) {
    std::memcpy(out.data() + d.dst_offset, base_ + d.src_offset, d.bytes);
  }
  return absl::OkStatus();
}

absl::StatusOr<const char*> RetainedRegion::ImageInPlace(
    const StateLayout& layout, int64_t slot) const {
  if (layout.arrangement() != Arrangement::kSlotMajor) {
    return absl::FailedPreconditionError(
        "a layer-major slot is not one range: read it with ReadImages");
  }
  const uint64_t image_bytes = layout.bytes_per_slot();
  if (slot < 0 || static_cast<uint64_t>(slot) >= size_ / image_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        handle_, ": slot ", slot, " lies outside its ", size_, " bytes"));
  }
  return base_ + static_cast<uint64_t>(slot) * image_bytes;
}

absl::Status RetainedRegion::Remove() {
  if (shm_unlink(handle_.c_str()) != 0 && errno != ENOENT) {
    return OsError("shm_unlink", handle_, errno);
  }
  return absl::OkStatus();
}

}  // namespace statecache

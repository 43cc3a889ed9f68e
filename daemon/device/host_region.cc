#include "daemon/device/host_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace statecache {
namespace {

absl::Status OpenError(const std::string& name, int err) {
  const std::string message =
      absl::StrCat("cannot open state region ", name, ": ", strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) {
    return absl::PermissionDeniedError(message);
  }
  return absl::InternalError(message);
}

absl::Status CheckExport(const RegionExport& region) {
  if (region.backend != "host") {
    return absl::InvalidArgumentError(absl::StrCat(
        "HostRegion opens host regions, not \"", region.backend, "\""));
  }
  const size_t expected = static_cast<size_t>(region.layout.num_layers()) *
                          region.layout.num_tensors();
  if (region.placements.size() != expected || expected == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("export has ", region.placements.size(),
                     " placements, the layout ", expected));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HostRegion> HostRegion::Open(const RegionExport& region) {
  if (absl::Status s = CheckExport(region); !s.ok()) return s;
  HostRegion out;
  out.fd_ = shm_open(region.handle.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (out.fd_ < 0) return OpenError(region.handle, errno);
  if (absl::Status s = out.Remap(region); !s.ok()) return s;
  return out;
}

absl::Status HostRegion::Remap(const RegionExport& region) {
  if (absl::Status s = CheckExport(region); !s.ok()) return s;
  if (!region_.handle.empty() && region.handle != region_.handle) {
    return absl::InvalidArgumentError(
        absl::StrCat("remap: export names ", region.handle, ", this region is ",
                     region_.handle, " (Open the new one instead)"));
  }
  struct stat st;
  if (fstat(fd_, &st) != 0) return OpenError(region.handle, errno);
  if (static_cast<uint64_t>(st.st_size) < region.region_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("state region ", region.handle, " holds ", st.st_size,
                     " bytes, the export says ", region.region_bytes));
  }
  char* base = nullptr;
  if (region.region_bytes > 0) {
    void* mapped = mmap(nullptr, region.region_bytes, PROT_READ | PROT_WRITE,
                        MAP_SHARED, fd_, 0);
    if (mapped == MAP_FAILED) return OpenError(region.handle, errno);
    base = static_cast<char*>(mapped);
  }
  if (base_ != nullptr) munmap(base_, mapped_bytes_);
  base_ = base;
  mapped_bytes_ = region.region_bytes;
  region_ = region;
  return absl::OkStatus();
}

HostRegion::HostRegion(HostRegion&& other) noexcept {
  *this = std::move(other);
}

HostRegion& HostRegion::operator=(HostRegion&& other) noexcept {
  if (this != &other) {
    Unmap();
    region_ = std::move(other.region_);
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
  }
  return *this;
}

HostRegion::~HostRegion() { Unmap(); }

void HostRegion::Unmap() {
  if (base_ != nullptr) munmap(base_, mapped_bytes_);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
  mapped_bytes_ = 0;
}

}  // namespace statecache

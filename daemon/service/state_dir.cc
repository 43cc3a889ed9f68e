#include "daemon/service/state_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/string_view_compat.h"

namespace statecache {
namespace {

constexpr std::string_view kIndex = "index";
constexpr std::string_view kImagesSuffix = ".images";

absl::Status OsError(std::string_view what, const std::string& path, int err) {
  const std::string message =
      absl::StrCat(Av(what), " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status WriteAll(int fd, const char* data, uint64_t size,
                      const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return OsError("write", path, errno);
    }
    data += n;
    size -= static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<char*>(data_), size_);
}

bool ValidImagesName(std::string_view name) {
  if (name.size() <= kImagesSuffix.size() || name.size() > 64 ||
      name.substr(name.size() - kImagesSuffix.size()) != kImagesSuffix) {
    return false;
  }
  for (char c : name.substr(0, name.size() - kImagesSuffix.size())) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' &&
        c != '_') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::unique_ptr<StateDir>> StateDir::Open(std::string path) {
  if (path.empty()) {
    return absl::InvalidArgumentError("--state_dir: the path is empty");
  }
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return OsError("--state_dir: mkdir", path, errno);
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return OsError("--state_dir: stat", path, errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state_dir: ", path, " is not a directory"));
  }
  const std::string lock_path = absl::StrCat(path, "/lock");
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return OsError("--state_dir: open", lock_path, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("--state_dir: ", path, " is in use by another daemon"));
    }
    return OsError("--state_dir: flock", lock_path, err);
  }
  return std::unique_ptr<StateDir>(new StateDir(std::move(path), fd));
}

StateDir::~StateDir() { ::close(lock_fd_); }

std::string StateDir::PathOf(std::string_view name) const {
  return absl::StrCat(path_, "/", Av(name));
}

absl::StatusOr<SavedState> StateDir::ReadIndex() const {
  const std::string path = PathOf(kIndex);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OsError("open", path, errno);
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return OsError("read", path, err);
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return DecodeSavedState(bytes);
}

absl::Status StateDir::WriteIndex(const SavedState& state) {
  const std::string bytes = EncodeSavedState(state);
  return WriteAtomically(kIndex, bytes.data(), bytes.size());
}

absl::Status StateDir::RejectIndex() {
  const std::string from = PathOf(kIndex);
  const std::string to = PathOf("index.rejected");
  if (::rename(from.c_str(), to.c_str()) != 0 && errno != ENOENT) {
    return OsError("rename", from, errno);
  }
  return absl::OkStatus();
}

absl::Status StateDir::WriteImages(std::string_view name, const char* data,
                                   uint64_t size) {
  if (!ValidImagesName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad images file name \"", Av(name), "\""));
  }
  return WriteAtomically(name, data, size);
}

absl::Status StateDir::WriteAtomically(std::string_view name, const char* data,
                                       uint64_t size) {
  const std::string path = PathOf(name);
  const std::string tmp = absl::StrCat(path, ".tmp");
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return OsError("open", tmp, errno);
  absl::Status st = WriteAll(fd, data, size, tmp);
  if (st.ok() && ::fsync(fd) != 0) st = OsError("fsync", tmp, errno);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = OsError("rename", tmp, errno);
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  // The rename is durable only once the directory is.
  const int dir = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return OsError("open", path_, errno);
  const bool synced = ::fsync(dir) == 0;
  const int err = errno;
  ::close(dir);
  return synced ? absl::OkStatus() : OsError("fsync", path_, err);
}

absl::StatusOr<std::unique_ptr<MappedFile>> StateDir::MapImages(
    std::string_view name) const {
  if (!ValidImagesName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad images file name \"", Av(name), "\""));
  }
  const std::string path = PathOf(name);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OsError("open", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return OsError("fstat", path, err);
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return OsError("mmap", path, err);
    }
  }
  ::close(fd);
  return std::unique_ptr<MappedFile>(
      new MappedFile(static_cast<const char*>(data), size));
}

absl::Status StateDir::RemoveImages(std::string_view name) {
  if (!ValidImagesName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad images file name \"", Av(name), "\""));
  }
  const std::string path = PathOf(name);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return OsError("unlink", path, errno);
  }
  return absl::OkStatus();
}

}  // namespace statecache

#include "daemon/service/state_dir.h"

#include <dirent.h>
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
#include "daemon/common/trusted_path.h"

namespace statecache {
namespace {

constexpr std::string_view kLock = "lock";
constexpr std::string_view kIndex = "index";
constexpr std::string_view kRejected = "index.rejected";
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

namespace {

// Whether `name` is one of the files the daemon writes here (and so must
// be its own). Anything else in the directory is an operator's business.
bool IsOurFileName(std::string_view name) {
  if (name == kLock || name == kIndex || name == kRejected) return true;
  if (name.size() > 4 && name.substr(name.size() - 4) == ".tmp") {
    name.remove_suffix(4);
    return name == kIndex || ValidImagesName(name);
  }
  return ValidImagesName(name);
}

// Checks each of the daemon's files already in the directory (see
// IsOurFileName) without following any: a symlink planted as index.tmp
// would have the daemon write through it.
absl::Status CheckOurFiles(int dir_fd, const std::string& path) {
  const int listing_fd = ::dup(dir_fd);
  if (listing_fd < 0) return OsError("--state_dir: dup", path, errno);
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    const int err = errno;
    ::close(listing_fd);
    return OsError("--state_dir: fdopendir", path, err);
  }
  absl::Status checked = absl::OkStatus();
  while (const dirent* entry = ::readdir(listing)) {
    const std::string_view name = entry->d_name;
    if (!IsOurFileName(name)) continue;
    struct stat st;
    if (::fstatat(dir_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      checked = OsError("--state_dir: stat", absl::StrCat(path, "/", Av(name)),
                        errno);
      break;
    }
    checked =
        CheckOwnFile("--state_dir", absl::StrCat(path, "/", Av(name)), st);
    if (!checked.ok()) break;
  }
  ::closedir(listing);
  return checked;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateDir>> StateDir::Open(std::string path) {
  if (path.empty()) {
    return absl::InvalidArgumentError("--state_dir: the path is empty");
  }
  RETURN_IF_ERROR(CheckAncestorsTrusted("--state_dir", path));
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return OsError("--state_dir: mkdir", path, errno);
  }
  // Its ancestors are trusted now, so the path names what was checked.
  const int dir_fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    if (errno == ENOTDIR) {
      return absl::FailedPreconditionError(
          absl::StrCat("--state_dir: ", path, " is not a directory"));
    }
    return OsError("--state_dir: open", path, errno);
  }
  struct stat st;
  absl::Status checked = ::fstat(dir_fd, &st) == 0
                             ? CheckOwnDirectory("--state_dir", path, st)
                             : OsError("--state_dir: stat", path, errno);
  if (checked.ok()) checked = CheckOurFiles(dir_fd, path);
  if (!checked.ok()) {
    ::close(dir_fd);
    return checked;
  }
  const std::string lock_path = absl::StrCat(path, "/", Av(kLock));
  const int fd = ::openat(dir_fd, std::string(kLock).c_str(),
                          O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    ::close(dir_fd);
    return OsError("--state_dir: open", lock_path, err);
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    ::close(dir_fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("--state_dir: ", path, " is in use by another daemon"));
    }
    return OsError("--state_dir: flock", lock_path, err);
  }
  return std::unique_ptr<StateDir>(new StateDir(std::move(path), dir_fd, fd));
}

StateDir::~StateDir() {
  ::close(lock_fd_);
  ::close(dir_fd_);
}

std::string StateDir::PathOf(std::string_view name) const {
  return absl::StrCat(path_, "/", Av(name));
}

absl::StatusOr<int> StateDir::OpenForReading(std::string_view name) const {
  const std::string path = PathOf(name);
  const int fd = ::openat(dir_fd_, std::string(name).c_str(),
                          O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) {
      struct stat st {};
      st.st_mode = S_IFLNK;
      return CheckOwnFile("--state_dir", path, st);
    }
    return OsError("open", path, errno);
  }
  struct stat st;
  absl::Status checked = ::fstat(fd, &st) == 0
                             ? CheckOwnFile("--state_dir", path, st)
                             : OsError("fstat", path, errno);
  if (!checked.ok()) {
    ::close(fd);
    return checked;
  }
  return fd;
}

absl::StatusOr<SavedState> StateDir::ReadIndex() const {
  return ReadSavedState(kIndex);
}

absl::StatusOr<SavedState> StateDir::ReadRejectedIndex() const {
  return ReadSavedState(kRejected);
}

absl::StatusOr<SavedState> StateDir::ReadSavedState(
    std::string_view name) const {
  const std::string path = PathOf(name);
  ASSIGN_OR_RETURN(const int fd, OpenForReading(name));
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
  if (::renameat(dir_fd_, std::string(kIndex).c_str(), dir_fd_,
                 std::string(kRejected).c_str()) != 0 &&
      errno != ENOENT) {
    return OsError("rename", PathOf(kIndex), errno);
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
  const std::string tmp_name = absl::StrCat(Av(name), ".tmp");
  const std::string tmp = PathOf(tmp_name);
  // A temporary a crash left is ours (CheckOurFiles vouched for it): made
  // afresh, never opened as found.
  if (::unlinkat(dir_fd_, tmp_name.c_str(), 0) != 0 && errno != ENOENT) {
    return OsError("unlink", tmp, errno);
  }
  const int fd =
      ::openat(dir_fd_, tmp_name.c_str(),
               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return OsError("open", tmp, errno);
  absl::Status st = WriteAll(fd, data, size, tmp);
  if (st.ok() && ::fsync(fd) != 0) st = OsError("fsync", tmp, errno);
  ::close(fd);
  if (st.ok() && ::renameat(dir_fd_, tmp_name.c_str(), dir_fd_,
                            std::string(name).c_str()) != 0) {
    st = OsError("rename", tmp, errno);
  }
  if (!st.ok()) {
    ::unlinkat(dir_fd_, tmp_name.c_str(), 0);
    return st;
  }
  // The rename is durable only once the directory is.
  if (::fsync(dir_fd_) != 0) return OsError("fsync", path_, errno);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MappedFile>> StateDir::MapImages(
    std::string_view name) const {
  if (!ValidImagesName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad images file name \"", Av(name), "\""));
  }
  const std::string path = PathOf(name);
  ASSIGN_OR_RETURN(const int fd, OpenForReading(name));
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
  if (::unlinkat(dir_fd_, std::string(name).c_str(), 0) != 0 &&
      errno != ENOENT) {
    return OsError("unlink", PathOf(name), errno);
  }
  return absl::OkStatus();
}

}  // namespace statecache

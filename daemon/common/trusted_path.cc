#include "daemon/common/trusted_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "daemon/common/string_view_compat.h"

namespace statecache {
namespace {

// As the kernel's own limit on symlinks followed in one lookup.
constexpr int kMaxSymlinks = 40;

bool OwnedByRootOrMe(const struct stat& st) {
  return st.st_uid == 0 || st.st_uid == ::geteuid();
}

absl::Status NotOwned(std::string_view what, std::string_view kind,
                      const std::string& path, const struct stat& st) {
  return absl::PermissionDeniedError(absl::StrFormat(
      "%s: %s %s belongs to uid %d, neither root nor this daemon's user "
      "(uid %d): its owner could change it under the daemon. "
      "chown it, or choose another path",
      Av(what), Av(kind), path, st.st_uid, ::geteuid()));
}

absl::Status WritableByOthers(std::string_view what, std::string_view kind,
                              const std::string& path, const struct stat& st,
                              std::string_view unless) {
  return absl::PermissionDeniedError(absl::StrFormat(
      "%s: %s %s is writable by others (mode %04o)%s: they could replace "
      "what the daemon keeps there. chmod go-w it, or choose another path",
      Av(what), Av(kind), path, st.st_mode & 07777, Av(unless)));
}

absl::Status CheckAncestor(std::string_view what, const std::string& path,
                           const struct stat& st) {
  if (!OwnedByRootOrMe(st)) return NotOwned(what, "directory", path, st);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return WritableByOthers(what, "directory", path, st, " and not sticky");
  }
  return absl::OkStatus();
}

std::string Join(const std::string& dir, std::string_view name) {
  return dir == "/" ? absl::StrCat("/", Av(name))
                    : absl::StrCat(dir, "/", Av(name));
}

std::string Parent(const std::string& dir) {
  const std::string::size_type slash = dir.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
}

// Pushes the components of `path` so that the first is popped first.
void PushComponents(std::string_view path, std::vector<std::string>& stack) {
  std::vector<std::string> parts = absl::StrSplit(Av(path), '/');
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!it->empty() && *it != ".") stack.push_back(std::move(*it));
  }
}

}  // namespace

absl::Status CheckAncestorsTrusted(std::string_view what,
                                   const std::string& path) {
  std::vector<std::string> pending;
  PushComponents(path, pending);
  if (path.empty() || path.front() != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) {
      return absl::InternalError(
          absl::StrFormat("%s: getcwd: %s", Av(what), std::strerror(errno)));
    }
    PushComponents(cwd, pending);
  }
  std::string current = "/";
  struct stat st;
  if (::stat("/", &st) != 0) {
    return absl::InternalError(
        absl::StrFormat("%s: stat /: %s", Av(what), std::strerror(errno)));
  }
  if (absl::Status checked = CheckAncestor(what, current, st); !checked.ok()) {
    return checked;
  }
  int links = 0;
  while (!pending.empty()) {
    const std::string name = std::move(pending.back());
    pending.pop_back();
    // `current` holds no symlink, so its parent is its string's parent.
    if (name == "..") {
      current = Parent(current);
      continue;
    }
    const std::string next = Join(current, name);
    if (::lstat(next.c_str(), &st) != 0) {
      if (errno == ENOENT) return absl::OkStatus();  // the daemon makes it
      return absl::InternalError(absl::StrFormat("%s: lstat %s: %s", Av(what),
                                                 next, std::strerror(errno)));
    }
    if (S_ISLNK(st.st_mode)) {
      if (!OwnedByRootOrMe(st)) return NotOwned(what, "symlink", next, st);
      if (++links > kMaxSymlinks) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s: too many symlinks on the way to %s", Av(what), path));
      }
      char target[PATH_MAX];
      const ssize_t n = ::readlink(next.c_str(), target, sizeof(target) - 1);
      if (n < 0) {
        return absl::InternalError(absl::StrFormat(
            "%s: readlink %s: %s", Av(what), next, std::strerror(errno)));
      }
      const std::string_view link(target, static_cast<size_t>(n));
      PushComponents(link, pending);
      if (!link.empty() && link.front() == '/') current.assign(1, '/');
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s: %s is not a directory", Av(what), next));
    }
    if (absl::Status checked = CheckAncestor(what, next, st); !checked.ok()) {
      return checked;
    }
    current = next;
  }
  return absl::OkStatus();
}

absl::Status CheckOwnDirectory(std::string_view what, const std::string& path,
                               const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: %s is not a directory", Av(what), path));
  }
  if (!OwnedByRootOrMe(st)) return NotOwned(what, "directory", path, st);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return WritableByOthers(what, "directory", path, st, "");
  }
  return absl::OkStatus();
}

absl::Status CheckOwnFile(std::string_view what, const std::string& path,
                          const struct stat& st) {
  if (S_ISLNK(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s: %s is a symlink: the daemon would write or read through it. "
        "Remove it",
        Av(what), path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s: %s is not a regular file. Remove it", Av(what), path));
  }
  if (!OwnedByRootOrMe(st)) return NotOwned(what, "file", path, st);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return WritableByOthers(what, "file", path, st, "");
  }
  return absl::OkStatus();
}

}  // namespace statecache

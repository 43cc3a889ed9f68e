#include "daemon/device/shm_name.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/common/checksum.h"
#include "daemon/common/string_view_compat.h"

namespace statecache {
namespace {

// Field 22 of /proc/<pid>/stat, or 0 if unreadable. The command name (field
// 2) is in parentheses and may hold spaces, so fields are counted from the
// last ')'.
uint64_t ProcessStartTime(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  if (!in) return 0;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string stat = buffer.str();
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  // After ')' come field 3 (state) onwards: field 22 is the 20th of those.
  std::vector<absl::string_view> fields = absl::StrSplit(
      absl::string_view(stat).substr(paren + 1), ' ', absl::SkipEmpty());
  uint64_t start = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &start)) return 0;
  return start;
}

// Whether the object at `path` is still held by the daemon that made it:
// that daemon keeps an exclusive flock on it for as long as it runs (the
// kernel drops it when the process dies, however it dies). Unlike a pid, a
// lock means the same thing in every pid namespace that shares the mount
// (one container per GPU, each daemon pid 1, hostIPC). An object that is not
// this user's, or that cannot be opened, counts as held: it is not ours to
// remove.
bool HeldByItsOwner(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return true;
  struct stat st {};
  bool held = fstat(fd, &st) != 0 || st.st_uid != geteuid();
  // Taking the lock proves nobody holds it; closing the fd gives it back.
  if (!held) held = flock(fd, LOCK_EX | LOCK_NB) != 0;
  close(fd);
  return held;
}

}  // namespace

ShmOwner CurrentShmOwner() {
  const pid_t pid = getpid();
  return {pid, ProcessStartTime(pid)};
}

bool ShmOwnerAlive(const ShmOwner& owner) {
  if (owner.pid <= 0) return false;
  // EPERM: the process exists but belongs to someone else.
  if (kill(owner.pid, 0) != 0 && errno != EPERM) return false;
  if (owner.start_time == 0) return true;
  const uint64_t now = ProcessStartTime(owner.pid);
  // Unreadable /proc: trust the pid alone rather than remove a live object.
  return now == 0 || now == owner.start_time;
}

bool ValidShmPrefix(std::string_view prefix) {
  if (prefix.empty() || prefix.size() > 64) return false;
  for (char c : prefix) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string FormatShmName(std::string_view prefix, uint64_t epoch,
                          const ShmOwner& owner) {
  return absl::StrCat("/", Av(prefix), "-", epoch, "-", owner.pid, "-",
                      owner.start_time);
}

namespace {
constexpr std::string_view kRetainedSuffix = "-kept";
constexpr size_t kKeeperDigits = 16;
}  // namespace

std::string FormatRetainedShmName(std::string_view prefix, uint64_t epoch,
                                  const ShmOwner& owner, uint64_t keeper) {
  return absl::StrCat(FormatShmName(prefix, epoch, owner), "-k",
                      absl::Hex(keeper, absl::kZeroPad16), Av(kRetainedSuffix));
}

std::optional<RetainedShmName> ParseRetainedShmName(std::string_view name,
                                                    std::string_view prefix) {
  if (!ValidShmPrefix(prefix) || name.size() <= kRetainedSuffix.size() ||
      name.substr(name.size() - kRetainedSuffix.size()) != kRetainedSuffix) {
    return std::nullopt;
  }
  name.remove_suffix(kRetainedSuffix.size());
  RetainedShmName parsed;
  const size_t dash = name.rfind('-');
  if (dash != std::string_view::npos && name.size() - dash > 1 &&
      name[dash + 1] == 'k') {
    const std::string_view hex = name.substr(dash + 2);
    uint64_t keeper = 0;
    if (hex.size() != kKeeperDigits ||
        hex.find_first_not_of("0123456789abcdef") != std::string_view::npos ||
        !absl::SimpleHexAtoi(Av(hex), &keeper)) {
      return std::nullopt;
    }
    parsed.keeper = keeper;
    name = name.substr(0, dash);
  }
  std::optional<ShmName> owner = ParseShmName(name, prefix);
  if (!owner.has_value()) return std::nullopt;
  parsed.name = *owner;
  return parsed;
}

bool IsRetainedShmName(std::string_view name, std::string_view prefix) {
  return ParseRetainedShmName(name, prefix).has_value();
}

uint64_t ShmKeeperKey(std::string_view identity) {
  return Checksum(identity.data(), identity.size());
}

std::optional<ShmName> ParseShmName(std::string_view name,
                                    std::string_view prefix) {
  if (!name.empty() && name.front() == '/') name.remove_prefix(1);
  if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix ||
      name[prefix.size()] != '-') {
    return std::nullopt;
  }
  std::vector<absl::string_view> parts =
      absl::StrSplit(Av(name.substr(prefix.size() + 1)), '-');
  if (parts.size() != 3) return std::nullopt;
  for (absl::string_view part : parts) {
    if (part.empty()) return std::nullopt;
    for (char c : part) {
      if (c < '0' || c > '9') return std::nullopt;
    }
  }
  ShmName parsed;
  int64_t pid = 0;
  if (!absl::SimpleAtoi(parts[0], &parsed.epoch) ||
      !absl::SimpleAtoi(parts[1], &pid) ||
      !absl::SimpleAtoi(parts[2], &parsed.owner.start_time) || pid <= 0 ||
      pid > INT32_MAX) {
    return std::nullopt;
  }
  parsed.owner.pid = static_cast<pid_t>(pid);
  return parsed;
}

namespace {

// Unlinks each object under `shm_dir` for which `dead` says its owner is
// dead (given its name), when its owner's lock is free too: the pid may
// name a process of another pid namespace, and the lock decides.
absl::StatusOr<std::vector<std::string>> RemoveObjectsOfDeadOwners(
    std::string_view prefix, const std::string& shm_dir,
    const std::function<bool(const std::string&)>& dead) {
  if (!ValidShmPrefix(prefix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad shared-memory prefix \"", Av(prefix), "\""));
  }
  DIR* dir = opendir(shm_dir.c_str());
  if (dir == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot list ", shm_dir, ": ", strerror(errno)));
  }
  std::vector<std::string> removed;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (!dead(name) || HeldByItsOwner(shm_dir + "/" + name)) continue;
    // shm_unlink resolves names under /dev/shm; a test directory elsewhere
    // is cleaned with unlink.
    const int rc = shm_dir == "/dev/shm"
                       ? shm_unlink(("/" + name).c_str())
                       : unlink((shm_dir + "/" + name).c_str());
    if (rc == 0) removed.push_back(name);
  }
  closedir(dir);
  return removed;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> CleanupStaleShm(
    std::string_view prefix, const std::string& shm_dir) {
  return RemoveObjectsOfDeadOwners(
      prefix, shm_dir, [prefix](const std::string& name) {
        const std::optional<ShmName> parsed = ParseShmName(name, prefix);
        return parsed.has_value() && !ShmOwnerAlive(parsed->owner);
      });
}

absl::StatusOr<std::vector<std::string>> ReclaimOrphanedRetainedShm(
    std::string_view prefix, uint64_t keeper,
    const std::vector<std::string>& spare, const std::string& shm_dir) {
  return RemoveObjectsOfDeadOwners(
      prefix, shm_dir, [&](const std::string& name) {
        const std::optional<RetainedShmName> parsed =
            ParseRetainedShmName(name, prefix);
        if (!parsed.has_value() || parsed->keeper != keeper ||
            ShmOwnerAlive(parsed->name.owner)) {
          return false;
        }
        for (std::string_view kept : spare) {
          if (!kept.empty() && kept.front() == '/') kept.remove_prefix(1);
          if (kept == name) return false;
        }
        return true;
      });
}

}  // namespace statecache

// Names of the host backend's POSIX shared-memory objects, and the cleanup of
// objects whose daemon died without unlinking them.
//
// A name is "/<prefix>-<epoch>-<pid>-<start>": the daemon's epoch (so a
// restarted daemon never reuses its predecessor's object) and its owner: the
// pid and the process start time (field 22 of /proc/<pid>/stat, clock ticks
// since boot). The start time makes the owner check immune to pid reuse: an
// object is stale when no process with that pid exists, or the process with
// that pid started at another time, and its owner lock is free: the daemon
// holds an exclusive flock on its object while it runs (pids mean nothing
// across pid namespaces that share /dev/shm; the lock does).
//
// Thread-safe: pure functions, plus the directory scans of CleanupStaleShm
// and ReclaimOrphanedRetainedShm.
#ifndef STATECACHE_DAEMON_DEVICE_SHM_NAME_H_
#define STATECACHE_DAEMON_DEVICE_SHM_NAME_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace statecache {

struct ShmOwner {
  pid_t pid = 0;
  uint64_t start_time = 0;  // 0 when /proc is not readable
  friend bool operator==(const ShmOwner&, const ShmOwner&) = default;
};

struct ShmName {
  uint64_t epoch = 0;
  ShmOwner owner;
};

// The calling process as an owner.
ShmOwner CurrentShmOwner();

// True if the process `owner` names is running (same pid, same start time;
// with start_time 0, same pid).
bool ShmOwnerAlive(const ShmOwner& owner);

// A prefix is 1..64 characters of [A-Za-z0-9_.] (no '-', no '/').
bool ValidShmPrefix(std::string_view prefix);

// "/<prefix>-<epoch>-<pid>-<start>". REQUIRES: ValidShmPrefix(prefix).
std::string FormatShmName(std::string_view prefix, uint64_t epoch,
                          const ShmOwner& owner);

// The name of a region kept for a warm restart (HostDeviceOptions::retain):
// FormatShmName's with "-k<keeper>-kept" appended (`keeper` as 16 hex
// digits), which ParseShmName does not accept, so no daemon's stale-object
// cleanup removes it after its owner dies; the daemon that restores from it
// removes it. The keeper key (ShmKeeperKey) says which daemon's successor
// the region waits for: ReclaimOrphanedRetainedShm removes only the orphans
// of its own daemon, never a region another daemon on the node (another
// GPU's, mid-restart) still needs.
std::string FormatRetainedShmName(std::string_view prefix, uint64_t epoch,
                                  const ShmOwner& owner, uint64_t keeper = 0);

struct RetainedShmName {
  ShmName name;
  // Absent in the names of daemons that predate keeper keys.
  std::optional<uint64_t> keeper;
};
// Parses a name with or without the leading '/'; nullopt unless it is
// exactly FormatRetainedShmName(prefix, ...) for some epoch, owner and
// keeper, or the older form without the keeper ("...-<start>-kept").
std::optional<RetainedShmName> ParseRetainedShmName(std::string_view name,
                                                    std::string_view prefix);
// ParseRetainedShmName(name, prefix).has_value().
bool IsRetainedShmName(std::string_view name, std::string_view prefix);

// The keeper key of a daemon: a stable hash of what makes it the same
// daemon across restarts (its listen address and device, say).
uint64_t ShmKeeperKey(std::string_view identity);

// Parses a name with or without the leading '/'; nullopt unless it is
// exactly FormatShmName(prefix, ...) for some epoch and owner.
std::optional<ShmName> ParseShmName(std::string_view name,
                                    std::string_view prefix);

// Unlinks every object under `shm_dir` (the mount of POSIX shared memory)
// named for `prefix` whose owner is dead. Objects of live owners, and names
// that do not parse, are left alone. Returns the names removed (without the
// leading '/').
// Errors: INVALID_ARGUMENT for a bad prefix; INTERNAL if shm_dir cannot be
// read. An object that vanishes meanwhile is not an error.
absl::StatusOr<std::vector<std::string>> CleanupStaleShm(
    std::string_view prefix, const std::string& shm_dir = "/dev/shm");

// Unlinks every retained object under `shm_dir` of `prefix` and `keeper`
// (this daemon's own) that no daemon will restore from: its owner, by the
// name's record (pid and start time), is dead and its owner lock is free,
// the daemon's user owns it, and it is not one of `spare` (names with or
// without the leading '/': what an index still names). A SIGKILL during a
// shutdown save leaves such regions, and nothing else would ever remove
// them. Returns the names removed (without the leading '/').
// Errors: as CleanupStaleShm's.
absl::StatusOr<std::vector<std::string>> ReclaimOrphanedRetainedShm(
    std::string_view prefix, uint64_t keeper,
    const std::vector<std::string>& spare,
    const std::string& shm_dir = "/dev/shm");

}  // namespace statecache

#endif  // STATECACHE_DAEMON_DEVICE_SHM_NAME_H_

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
// Thread-safe: pure functions, plus CleanupStaleShm's directory scan.
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
// FormatShmName's with "-kept" appended, which ParseShmName does not accept,
// so no daemon's stale-object cleanup removes it after its owner dies; the
// daemon that restores from it removes it.
std::string FormatRetainedShmName(std::string_view prefix, uint64_t epoch,
                                  const ShmOwner& owner);
// True if `name` (with or without the leading '/') is exactly
// FormatRetainedShmName(prefix, ...) for some epoch and owner.
bool IsRetainedShmName(std::string_view name, std::string_view prefix);

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

}  // namespace statecache

#endif  // STATECACHE_DAEMON_DEVICE_SHM_NAME_H_

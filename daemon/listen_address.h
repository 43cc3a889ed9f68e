// Where the daemon listens: a Unix socket's path, the directory it lives in
// (which must be the daemon's own), a live daemon already there, and what a
// TCP address exposes.
//
// Thread-safe: functions of their arguments and the filesystem.
#ifndef STATECACHE_DAEMON_LISTEN_ADDRESS_H_
#define STATECACHE_DAEMON_LISTEN_ADDRESS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace statecache {

// The filesystem path of a "unix:PATH" or "unix:///PATH" address; nullopt for
// anything else (TCP, unix-abstract:).
std::optional<std::string> UnixSocketPath(absl::string_view address);

// The directory a Unix socket's path lies in ("." for a bare name).
std::string SocketDirectory(const std::string& socket_path);

// Makes `listen` ready to bind. For a Unix socket (`socket_path`, from
// UnixSocketPath): its directory created if missing, and refused if it or
// any directory above it belongs to another user (not root) or others may
// write it without the sticky bit (CheckAncestorsTrusted);
// refused if a live daemon already listens there, and a stale socket file
// removed. A TCP address that is not loopback is warned about (reachable
// from other machines).
// Errors: PERMISSION_DENIED naming the directory's owner or mode (a
// configuration error: the daemon exits 2);
// FAILED_PRECONDITION (not a directory, not a socket, a live daemon);
// INTERNAL (mkdir failed).
absl::Status PrepareListenAddress(
    const std::string& listen, const std::optional<std::string>& socket_path);

// The address as clients should dial it: for TCP with port 0, the port gRPC
// picked.
std::string EffectiveAddress(const std::string& address, int selected_port);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_LISTEN_ADDRESS_H_

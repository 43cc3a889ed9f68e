#include "daemon/listen_address.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/trusted_path.h"
#include "daemon/service/log.h"

namespace statecache {
namespace {

// Creates the socket's directory (mode 0700, parents 0755) if it is missing.
// A directory someone else controls could have our socket replaced under
// us (a pre-created /tmp/statecache-$UID, or one above it renamed and made
// anew): the socket's directory and every one above it must belong to this
// daemon's user or root, and nobody else may write them unless they are
// sticky (then nobody can remove or rename our socket).
absl::Status PrepareSocketDirectory(const std::string& socket_path) {
  const std::string dir = SocketDirectory(socket_path);
  RETURN_IF_ERROR(CheckAncestorsTrusted("--listen", dir));
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) return absl::OkStatus();
  // Parents first (mkdir -p), then the socket's own directory private.
  for (std::string::size_type pos = dir.find('/', 1); pos != std::string::npos;
       pos = dir.find('/', pos + 1)) {
    const std::string parent = dir.substr(0, pos);
    if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(
          absl::StrCat("mkdir ", parent, ": ", std::strerror(errno)));
    }
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(
        absl::StrCat("mkdir ", dir, ": ", std::strerror(errno)));
  }
  // In a sticky directory another user could have made one of these first.
  return CheckAncestorsTrusted("--listen", dir);
}

// Unlinking an existing socket file before binding would silently steal the
// address from a daemon still running there. Refuse instead; a stale socket
// (nobody accepting) is removed so the bind can take its name.
absl::Status CheckNoLiveDaemon(const std::string& socket_path) {
  struct stat st;
  if (::lstat(socket_path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(socket_path, " exists and is not a socket"));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path too long: ", socket_path));
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::OkStatus();
  bool live = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr),
                        sizeof(addr)) == 0;
  ::close(fd);
  if (live) {
    return absl::FailedPreconditionError(
        absl::StrCat("another daemon is listening on ", socket_path));
  }
  // Stale: nobody accepts on it. Bind needs the name free.
  if (::unlink(socket_path.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat(
        "removing the stale socket ", socket_path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

bool IsLoopback(absl::string_view address) {
  return absl::StartsWith(address, "127.") ||
         absl::StartsWith(address, "localhost:") ||
         absl::StartsWith(address, "[::1]:") ||
         absl::StartsWith(address, "ipv4:127.") ||
         absl::StartsWith(address, "ipv6:[::1]:");
}

}  // namespace

std::string SocketDirectory(const std::string& socket_path) {
  const std::string::size_type slash = socket_path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : socket_path.substr(0, slash);
}

// The filesystem path of a "unix:PATH" or "unix:///PATH" address; nullopt for
// anything else (TCP, unix-abstract:).
std::optional<std::string> UnixSocketPath(absl::string_view address) {
  if (!absl::ConsumePrefix(&address, "unix:")) return std::nullopt;
  if (absl::StartsWith(address, "//")) address.remove_prefix(2);
  return std::string(address);
}

// The address as clients should dial it: for TCP with port 0, the port gRPC
// picked.
std::string EffectiveAddress(const std::string& address, int selected_port) {
  if (UnixSocketPath(address) || absl::StartsWith(address, "unix-abstract:")) {
    return address;
  }
  std::string::size_type colon = address.rfind(':');
  if (colon == std::string::npos || selected_port <= 0) return address;
  return absl::StrCat(address.substr(0, colon + 1), selected_port);
}

// Makes `listen` ready to bind: a Unix socket's directory prepared and no
// live daemon on it; a TCP address warned about (plaintext, and reachable
// from other machines unless loopback).
absl::Status PrepareListenAddress(
    const std::string& listen, const std::optional<std::string>& socket_path) {
  if (socket_path) {
    RETURN_IF_ERROR(PrepareSocketDirectory(*socket_path));
    return CheckNoLiveDaemon(*socket_path);
  }
  // TCP: Serving refuses it without TLS or --insecure_tcp.
  if (!IsLoopback(listen) && !absl::StartsWith(listen, "unix-abstract:")) {
    LOG_WARNING(
        "%s is not a loopback address: the cache is reachable from "
        "other machines",
        listen);
  }
  return absl::OkStatus();
}

}  // namespace statecache

#include "daemon/connection_gate.h"

#include <fcntl.h>
#include <grpcpp/server_posix.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/listen_address.h"
#include "daemon/service/log.h"

namespace statecache {
namespace {

constexpr int kBacklog = 1024;

absl::Status Errno(absl::string_view what, const std::string& address) {
  return absl::UnavailableError(
      absl::StrCat(what, " ", address, ": ", std::strerror(errno)));
}

absl::StatusOr<ListeningSocket> ListenUnix(const std::string& address,
                                           const std::string& name,
                                           bool abstract) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // An abstract name starts with a NUL byte and is not a file.
  const size_t offset = abstract ? 1 : 0;
  if (name.empty() || name.size() + offset >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket name empty or too long: ", address));
  }
  std::memcpy(addr.sun_path + offset, name.data(), name.size());
  const socklen_t len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + offset +
                             name.size() + (abstract ? 0 : 1));
  const int fd =
      ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket for", address);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 ||
      ::listen(fd, kBacklog) != 0) {
    absl::Status st = Errno("bind/listen", address);
    ::close(fd);
    return st;
  }
  ListeningSocket socket;
  socket.fd = fd;
  socket.kind = ListeningSocket::Kind::kUnix;
  if (!abstract) {
    struct stat st;
    if (::stat(name.c_str(), &st) == 0) socket.inode = st.st_ino;
    socket.path = name;
  }
  return socket;
}

absl::StatusOr<ListeningSocket> ListenTcp(const std::string& address) {
  std::string host;
  std::string port;
  absl::string_view rest = address;
  absl::ConsumePrefix(&rest, "dns:");
  absl::ConsumePrefix(&rest, "ipv4:");
  absl::ConsumePrefix(&rest, "ipv6:");
  if (absl::StartsWith(rest, "[")) {
    const size_t close = rest.find("]:");
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot parse the address '", address, "': want [V6]:PORT"));
    }
    host = std::string(rest.substr(1, close - 1));
    port = std::string(rest.substr(close + 2));
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot parse the address '", address,
          "': want unix:PATH, unix-abstract:NAME, HOST:PORT or [V6]:PORT"));
    }
    host = std::string(rest.substr(0, colon));
    port = std::string(rest.substr(colon + 1));
  }
  int port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number) || port_number < 0 ||
      port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad port in '", address, "'"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(),
                             port.c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot resolve '", host, "' in ", address, ": ", gai_strerror(rc)));
  }
  const addrinfo& ai = *found;
  const int fd =
      ::socket(ai.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::freeaddrinfo(found);
    return Errno("socket for", address);
  }
  const int one = 1;
  // Lets a restarted daemon bind while old connections sit in TIME_WAIT;
  // SO_REUSEPORT stays off, so a second daemon cannot share the port.
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound =
      ::bind(fd, ai.ai_addr, ai.ai_addrlen) == 0 && ::listen(fd, kBacklog) == 0;
  ::freeaddrinfo(found);
  if (!bound) {
    absl::Status st = Errno("bind/listen", address);
    ::close(fd);
    return st;
  }
  sockaddr_storage local{};
  socklen_t local_len = sizeof(local);
  ListeningSocket socket;
  socket.fd = fd;
  socket.kind = ListeningSocket::Kind::kTcp;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0) {
    socket.port = ntohs(local.ss_family == AF_INET6
                            ? reinterpret_cast<sockaddr_in6*>(&local)->sin6_port
                            : reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  }
  return socket;
}

// At most one line per interval for a condition that can repeat per
// connection (a flood must not flood the log too).
class RateLimitedWarning {
 public:
  bool ShouldLog() {
    const absl::Time now = absl::Now();
    if (now - last_ < absl::Seconds(10)) return false;
    last_ = now;
    return true;
  }

 private:
  absl::Time last_ = absl::InfinitePast();
};

}  // namespace

absl::StatusOr<ListeningSocket> Listen(const std::string& address) {
  if (std::optional<std::string> path = UnixSocketPath(address)) {
    return ListenUnix(address, *path, /*abstract=*/false);
  }
  absl::string_view name = address;
  if (absl::ConsumePrefix(&name, "unix-abstract:")) {
    return ListenUnix(address, std::string(name), /*abstract=*/true);
  }
  return ListenTcp(address);
}

ConnectionGate::ConnectionGate(
    grpc::Server* server, PeerTable* peers,
    grpc::experimental::ExternalConnectionAcceptor* tls,
    std::vector<ListeningSocket> listeners, Options options)
    : server_(server),
      peers_(peers),
      tls_(tls),
      listeners_(std::move(listeners)),
      options_(options) {}

ConnectionGate::~ConnectionGate() { Stop(); }

absl::Status ConnectionGate::Start() {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(
        absl::StrCat("pipe for the accept loop: ", std::strerror(errno)));
  }
  wake_read_ = pipe_fds[0];
  wake_write_ = pipe_fds[1];
  reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (reserve_fd_ < 0) {
    return absl::InternalError(absl::StrCat(
        "the accept loop's reserve descriptor: ", std::strerror(errno)));
  }
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void ConnectionGate::Stop() {
  if (thread_.joinable()) {
    const char byte = 0;
    while (::write(wake_write_, &byte, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  for (ListeningSocket& listener : listeners_) {
    if (listener.fd >= 0) ::close(listener.fd);
    listener.fd = -1;
    struct stat st;
    if (!listener.path.empty() && ::lstat(listener.path.c_str(), &st) == 0 &&
        st.st_ino == listener.inode) {
      ::unlink(listener.path.c_str());
    }
    listener.path.clear();
  }
  for (int* fd : {&wake_read_, &wake_write_, &reserve_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void ConnectionGate::Run() {
  std::vector<pollfd> fds;
  for (const ListeningSocket& listener : listeners_) {
    fds.push_back(pollfd{.fd = listener.fd, .events = POLLIN, .revents = 0});
  }
  fds.push_back(pollfd{.fd = wake_read_, .events = POLLIN, .revents = 0});
  for (;;) {
    // Without a reserve descriptor a waiting connection cannot be shed, so
    // the listeners would stay readable: wait on the wake pipe alone a
    // while, then try to get the reserve back.
    const bool have_reserve = reserve_fd_ >= 0;
    const int n =
        ::poll(have_reserve ? fds.data() : &fds.back(),
               have_reserve ? fds.size() : 1, have_reserve ? -1 : 100);
    if (n < 0 && errno != EINTR) {
      LOG_ERROR("accept loop: poll: %s", std::strerror(errno));
      return;
    }
    if (fds.back().revents != 0) return;  // Stop
    if (!have_reserve) {
      reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      continue;
    }
    for (size_t i = 0; i < listeners_.size(); ++i) {
      if (fds[i].revents != 0) AcceptOn(listeners_[i]);
    }
  }
}

size_t ConnectionGate::SweepClosed() {
  size_t kept = 0;
  for (const Live& live : live_) {
    struct stat st;
    if (::fstat(live.fd, &st) == 0 && st.st_dev == live.dev &&
        st.st_ino == live.ino) {
      live_[kept++] = live;
    }
  }
  live_.resize(kept);
  return kept;
}

void ConnectionGate::ShedOneWithReserve(int listen_fd) {
  static RateLimitedWarning warning;
  if (reserve_fd_ < 0) return;
  ::close(reserve_fd_);
  reserve_fd_ = -1;
  const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    refused_no_descriptors_.fetch_add(1);
    if (warning.ShouldLog()) {
      LOG_WARNING(
          "out of file descriptors (RLIMIT_NOFILE): closing new connections "
          "until some are free (%d so far); lower --max_connections below "
          "the limit",
          refused_no_descriptors_.load());
    }
  }
  reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void ConnectionGate::AcceptOn(const ListeningSocket& listener) {
  static RateLimitedWarning over_cap_warning;
  for (;;) {
    const int fd =
        ::accept4(listener.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        ShedOneWithReserve(listener.fd);
        if (reserve_fd_ < 0) return;  // Run waits, then retries
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        LOG_WARNING("accept: %s", std::strerror(errno));
      }
      return;
    }
    if (SweepClosed() >= static_cast<size_t>(options_.max_connections)) {
      ::close(fd);
      refused_over_cap_.fetch_add(1);
      if (over_cap_warning.ShouldLog()) {
        LOG_WARNING(
            "%d connections open, the limit (--max_connections): closing new "
            "ones (%d so far)",
            options_.max_connections, refused_over_cap_.load());
      }
      continue;
    }
    Peer peer = Peer::Anonymous();
    if (listener.kind == ListeningSocket::Kind::kUnix) {
      ucred cred{};
      socklen_t len = sizeof(cred);
      if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        LOG_WARNING("SO_PEERCRED: %s; closing the connection",
                    std::strerror(errno));
        ::close(fd);
        continue;
      }
      peer = Peer::Local(cred.uid, cred.gid, cred.pid);
    } else {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      continue;
    }
    // A number gRPC closed and accept reused: the old entry is stale.
    std::erase_if(live_, [fd](const Live& live) { return live.fd == fd; });
    live_.push_back(Live{fd, st.st_dev, st.st_ino});
    accepted_.fetch_add(1);
    if (listener.kind == ListeningSocket::Kind::kTcp && tls_ != nullptr) {
      grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters
          params;
      params.listener_fd = listener.fd;
      params.fd = fd;
      tls_->HandleNewConnection(&params);
    } else {
      // Recorded before gRPC can read a byte of it: its first call finds it.
      peers_->Record(fd, peer);
      grpc::AddInsecureChannelFromFd(server_, fd);
    }
  }
}

}  // namespace statecache

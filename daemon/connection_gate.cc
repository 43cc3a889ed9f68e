#include "daemon/connection_gate.h"

#include <fcntl.h>
#include <grpcpp/server_posix.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
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
// RFC 9113, section 3.4: what every HTTP/2 client sends first.
constexpr absl::string_view kHttp2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
// Connections accepted at most per readiness of a listener.
constexpr int kAcceptBatch = 64;
// A connection that sent part of the preface is looked at again this soon.
constexpr std::chrono::milliseconds kPrefaceRecheck(20);
// How often the connections' abandoned streams are looked at: an abuser
// pins what it abandons in one or two of these before it is shut.
constexpr std::chrono::milliseconds kResetCheck(50);

// The name gRPC gives a TLS connection's peer ("ipv4:A:P", "ipv6:[A]:P"),
// which its channelz socket carries; empty if unknown.
std::string TcpPeerName(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return "";
  }
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host),
                    port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "";
  }
  return addr.ss_family == AF_INET6 ? absl::StrCat("ipv6:[", host, "]:", port)
                                    : absl::StrCat("ipv4:", host, ":", port);
}

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
      options_(options),
      reset_watch_(StreamResetWatch::Options{
          .max_resets_per_second = options.max_resets_per_second,
          .max_open_streams = options.max_open_streams}) {}

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
    stopping_.store(true);
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
  for (const Pending& pending : pending_) ::close(pending.fd);
  pending_.clear();
}

void ConnectionGate::Run() {
  std::vector<pollfd> fds;
  for (;;) {
    // Without a reserve descriptor a waiting connection cannot be shed, so
    // the listeners would stay readable: wait on the wake pipe and the
    // pending connections a while, then try to get the reserve back.
    const bool have_reserve = reserve_fd_ >= 0;
    fds.clear();
    fds.push_back(pollfd{.fd = wake_read_, .events = POLLIN, .revents = 0});
    const size_t first_listener = fds.size();
    if (have_reserve) {
      for (const ListeningSocket& listener : listeners_) {
        fds.push_back(
            pollfd{.fd = listener.fd, .events = POLLIN, .revents = 0});
      }
    }
    const size_t first_pending = fds.size();
    Clock::time_point now = Clock::now();
    Clock::time_point wake = Clock::time_point::max();
    for (const Pending& pending : pending_) {
      // One waiting for the rest of its preface is readable already: it is
      // looked at on its recheck time, not polled (that would spin).
      const bool polled = pending.recheck == Clock::time_point();
      fds.push_back(pollfd{
          .fd = polled ? pending.fd : -1, .events = POLLIN, .revents = 0});
      wake = std::min(wake, pending.deadline);
      if (!polled) wake = std::min(wake, pending.recheck);
    }
    if (!have_reserve) {
      wake = std::min(wake, now + std::chrono::milliseconds(100));
    }
    const bool watching = options_.max_resets_per_second > 0 && !live_.empty();
    if (watching) wake = std::min(wake, next_reset_check_);
    int timeout_ms = -1;
    if (wake != Clock::time_point::max()) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::ceil<std::chrono::milliseconds>(wake - now).count(), 0,
          60'000));
    }
    const int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) {
      LOG_ERROR("accept loop: poll: %s", std::strerror(errno));
      return;
    }
    if (stopping_.load()) return;
    if (n < 0) continue;
    now = Clock::now();
    if (watching && now >= next_reset_check_) ShutAbusers(now);
    // The pending ones first: accepting may make one of them give way.
    ServePending(fds, first_pending, now);
    if (!have_reserve) {
      reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    } else {
      for (size_t i = 0; i < listeners_.size(); ++i) {
        if (fds[first_listener + i].revents != 0) AcceptOn(listeners_[i]);
      }
    }
  }
}

bool ConnectionGate::ServesTls(const ListeningSocket& listener) const {
  return listener.kind == ListeningSocket::Kind::kTcp && tls_ != nullptr;
}

ConnectionGate::Shown ConnectionGate::Inspect(Pending& pending,
                                              Clock::time_point now) const {
  // A TLS connection starts with a handshake record (content type 22);
  // gRPC's handshake timeout bounds the rest of the handshake.
  static constexpr char kTlsHandshake[] = {0x16};
  const bool tls = ServesTls(*pending.listener);
  const absl::string_view want =
      tls ? absl::string_view(kTlsHandshake, 1) : kHttp2Preface;
  char seen[kHttp2Preface.size()];
  ssize_t n;
  do {
    n = ::recv(pending.fd, seen, want.size(), MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return errno == EAGAIN || errno == EWOULDBLOCK ? Shown::kNotYet
                                                   : Shown::kBad;
  }
  if (n == 0) return Shown::kBad;  // closed before speaking
  if (absl::string_view(seen, n) != want.substr(0, n)) return Shown::kBad;
  if (static_cast<size_t>(n) < want.size()) {
    pending.recheck = now + kPrefaceRecheck;
    return Shown::kNotYet;
  }
  return Shown::kProtocol;
}

void ConnectionGate::ServePending(const std::vector<pollfd>& fds, size_t first,
                                  Clock::time_point now) {
  static RateLimitedWarning silent_warning;
  static RateLimitedWarning bad_warning;
  // fds[first + i] is pending_[i] as it was when polled; AcceptOn has not
  // run since, so the order still holds.
  std::deque<Pending> kept;
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& pending = pending_[i];
    const bool readable = first + i < fds.size() && fds[first + i].revents != 0;
    const bool recheck_due =
        pending.recheck != Clock::time_point() && pending.recheck <= now;
    Shown shown = Shown::kNotYet;
    if (readable || recheck_due) {
      pending.recheck = Clock::time_point();
      shown = Inspect(pending, now);
    }
    if (shown == Shown::kProtocol) {
      HandOver(pending);
      continue;
    }
    if (shown == Shown::kBad) {
      ::close(pending.fd);
      closed_bad_preface_.fetch_add(1);
      if (bad_warning.ShouldLog()) {
        LOG_WARNING("closing connections that do not start with %s (%d so far)",
                    tls_ != nullptr ? "a TLS handshake" : "the HTTP/2 preface",
                    closed_bad_preface_.load());
      }
      continue;
    }
    if (pending.deadline <= now) {
      ::close(pending.fd);
      closed_silent_.fetch_add(1);
      if (silent_warning.ShouldLog()) {
        LOG_WARNING(
            "closing connections silent for the handshake timeout "
            "(--handshake_timeout_ms=%d; %d so far)",
            absl::ToInt64Milliseconds(options_.handshake_timeout),
            closed_silent_.load());
      }
      continue;
    }
    kept.push_back(std::move(pending));
  }
  pending_ = std::move(kept);
}

void ConnectionGate::HandOver(const Pending& pending) {
  const int fd = pending.fd;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return;
  }
  // A number gRPC closed and accept reused: the old entry is stale.
  SweepClosed();
  live_.push_back(Live{fd, st.st_dev, st.st_ino});
  const bool tls = ServesTls(*pending.listener);
  accepted_.fetch_add(1);
  if (options_.max_resets_per_second > 0) {
    reset_watch_.Watch(fd, tls ? TcpPeerName(fd) : absl::StrCat("fd:", fd));
  }
  if (tls) {
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters
        params;
    params.listener_fd = pending.listener->fd;
    params.fd = fd;
    tls_->HandleNewConnection(&params);
  } else {
    // Recorded before gRPC can read a byte of it: its first call finds it.
    peers_->Record(fd, pending.peer);
    grpc::AddInsecureChannelFromFd(server_, fd);
  }
}

size_t ConnectionGate::SweepClosed() {
  size_t kept = 0;
  const int shut_before = shut_open_;
  for (const Live& live : live_) {
    struct stat st;
    if (::fstat(live.fd, &st) == 0 && st.st_dev == live.dev &&
        st.st_ino == live.ino) {
      live_[kept++] = live;
      continue;
    }
    reset_watch_.Forget(live.fd);
    if (live.shut) --shut_open_;
  }
  live_.resize(kept);
  // glibc keeps what an abuser's calls freed for reuse; a burst of them
  // would stay resident for good.
  if (shut_before > 0 && shut_open_ == 0) ::malloc_trim(0);
  return kept;
}

void ConnectionGate::ShutAbusers(Clock::time_point now) {
  static RateLimitedWarning warning;
  next_reset_check_ = now + kResetCheck;
  SweepClosed();
  for (const int fd : reset_watch_.Check(absl::Now())) {
    auto live = std::find_if(live_.begin(), live_.end(),
                             [fd](const Live& l) { return l.fd == fd; });
    if (live == live_.end() || live->shut) continue;
    // gRPC owns the descriptor: shut, not closed, so the number stays
    // gRPC's until it closes the transport and with it the calls.
    ::shutdown(fd, SHUT_RDWR);
    live->shut = true;
    ++shut_open_;
    closed_rapid_reset_.fetch_add(1);
    if (warning.ShouldLog()) {
      LOG_WARNING(
          "closing a connection that abandons HTTP/2 streams faster than "
          "--max_resets_per_second=%d (rapid reset; %d so far)",
          options_.max_resets_per_second, closed_rapid_reset_.load());
    }
  }
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
  // A bounded batch, then back to Run: the pending connections (whose
  // descriptors may be what ran out) are served between batches.
  for (int batch = 0; batch < kAcceptBatch; ++batch) {
    const int fd =
        ::accept4(listener.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        ShedOneWithReserve(listener.fd);
        return;  // Run retries (after a wait if the reserve is gone)
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        LOG_WARNING("accept: %s", std::strerror(errno));
      }
      return;
    }
    if (SweepClosed() + pending_.size() >=
        static_cast<size_t>(options_.max_connections)) {
      if (!pending_.empty()) {
        // The oldest connection yet to speak makes way: a flood of silent
        // connections cannot keep out one that speaks at once.
        ::close(pending_.front().fd);
        pending_.pop_front();
        closed_silent_.fetch_add(1);
      } else {
        ::close(fd);
        refused_over_cap_.fetch_add(1);
        if (over_cap_warning.ShouldLog()) {
          LOG_WARNING(
              "%d connections open, the limit (--max_connections): closing "
              "new ones (%d so far)",
              options_.max_connections, refused_over_cap_.load());
        }
        continue;
      }
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
    Pending pending{.fd = fd,
                    .listener = &listener,
                    .peer = peer,
                    .deadline = Clock::now() + absl::ToChronoNanoseconds(
                                                   options_.handshake_timeout),
                    .recheck = Clock::time_point()};
    // A client usually writes its first bytes with its connect: look now,
    // saving a trip through poll.
    if (Inspect(pending, Clock::now()) == Shown::kProtocol) {
      HandOver(pending);
    } else {
      // Bad bytes or an early close are found by the next poll.
      pending_.push_back(std::move(pending));
    }
  }
}

}  // namespace statecache

// ConnectionGate: the daemon's own accept loop in front of gRPC.
//
// gRPC's listener cannot say who connected over a Unix socket, cannot cap
// connections, and stops accepting for good once it runs out of file
// descriptors. So the daemon binds its listening sockets itself and this
// loop accepts on them: it reads each Unix peer's credentials from the
// kernel (SO_PEERCRED) into the PeerTable the adapter resolves callers by,
// refuses connections beyond a cap (closing them at once: the client sees
// UNAVAILABLE and retries), and, when accept fails for want of descriptors,
// gives up a reserved one to accept and close the waiting connection, so
// the backlog drains and accepting resumes once descriptors are free.
// Accepted connections go to gRPC: plaintext ones as a channel from the
// descriptor (named "fd:N", which is how calls find their peer), TLS ones
// through an external-connection acceptor carrying the server credentials.
//
// A connection is handed to gRPC only once it has shown the start of its
// protocol: the whole HTTP/2 client preface (plaintext), or a TLS handshake
// record's first byte (TLS; gRPC's own handshake timeout bounds the rest).
// gRPC would otherwise keep a connection that never speaks for ever, and
// each one holds a place under the cap. Wrong bytes or an early close:
// closed at once. Still silent after the handshake timeout: closed. Until
// then it is pending and counts against the cap (it holds a descriptor);
// at the cap the oldest pending connection makes way for a new one, so
// silent connections cannot keep out a client that speaks.
//
// Once handed over, a connection that opens and abandons streams faster
// than Options::max_resets_per_second (HTTP/2 rapid reset, which Debian's
// gRPC does not stop) is shut down (StreamResetWatch finds it), and once
// gRPC has closed it the memory its calls held goes back to the system.
// (What bounds a connection's cost: docs/operators.md.)
//
// Thread safety: Start and Stop from one thread; the counters from any.
#ifndef STATECACHE_DAEMON_CONNECTION_GATE_H_
#define STATECACHE_DAEMON_CONNECTION_GATE_H_

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/service/peer.h"
#include "daemon/stream_reset_watch.h"

namespace statecache {

// A bound, listening socket.
struct ListeningSocket {
  enum class Kind { kUnix, kTcp };
  int fd = -1;
  Kind kind = Kind::kUnix;
  int port = 0;  // kTcp: the bound port
  // kUnix with a path: the socket file, removed by Stop if it is still the
  // one bound here (same inode).
  std::string path;
  ino_t inode = 0;
};

// Binds and listens on `address`: "unix:PATH" / "unix:///PATH" (the path
// must not exist; see PrepareListenAddress), "unix-abstract:NAME", or TCP
// "HOST:PORT" / "[V6]:PORT" (port 0 picks one). Errors: INVALID_ARGUMENT
// (unparsable), UNAVAILABLE (bind or listen failed, errno named).
absl::StatusOr<ListeningSocket> Listen(const std::string& address);

class ConnectionGate {
 public:
  struct Options {
    // Connections at once over every listener, pending ones included; a
    // connection beyond it is closed on arrival unless a pending one can
    // make way. REQUIRES: >= 1.
    int max_connections = 512;
    // How long a new connection may stay silent (or show only part of the
    // preface) before it is closed. REQUIRES: > 0.
    absl::Duration handshake_timeout = absl::Seconds(10);
    // Streams a second a connection may abandon before it is shut down
    // (StreamResetWatch); 0: never. And the streams it may have open.
    int64_t max_resets_per_second = 1000;
    int64_t max_open_streams = 100;
  };

  // Not owned: `server`, `peers`, and `tls` (null: TCP is plaintext), all
  // outliving Stop. REQUIRES: `server` started. Takes ownership of the
  // listening sockets.
  ConnectionGate(grpc::Server* server, PeerTable* peers,
                 grpc::experimental::ExternalConnectionAcceptor* tls,
                 std::vector<ListeningSocket> listeners, Options options);
  ~ConnectionGate();  // Stops.

  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  // Starts the accept thread. Errors: INTERNAL (no wake pipe or reserve
  // descriptor could be made).
  absl::Status Start();
  // Stops accepting and closes the listening sockets; connections already
  // handed to gRPC are gRPC's. Idempotent.
  void Stop();

  // Since Start: connections handed to gRPC, closed for the cap, and
  // closed because descriptors ran out.
  int64_t accepted() const { return accepted_.load(); }
  int64_t refused_over_cap() const { return refused_over_cap_.load(); }
  int64_t refused_no_descriptors() const {
    return refused_no_descriptors_.load();
  }
  // Since Start: connections closed before gRPC saw them, for showing
  // something other than their protocol's start (or closing first), and
  // for staying silent past the handshake timeout or making way at the cap.
  int64_t closed_bad_preface() const { return closed_bad_preface_.load(); }
  int64_t closed_silent() const { return closed_silent_.load(); }
  // Since Start: connections handed to gRPC that the gate shut down for
  // abandoning streams too fast.
  int64_t closed_rapid_reset() const { return closed_rapid_reset_.load(); }

 private:
  using Clock = std::chrono::steady_clock;
  // A connection accepted but not yet handed to gRPC: its peer is read,
  // its first bytes are awaited.
  struct Pending {
    int fd;
    const ListeningSocket* listener;
    Peer peer;
    Clock::time_point deadline;  // the handshake timeout
    // Part of the preface arrived: it stays readable, so it is looked at
    // again at this time rather than polled (Clock::time_point() = poll).
    Clock::time_point recheck;
  };
  enum class Shown { kNotYet, kProtocol, kBad };
  // A connection handed to gRPC, known by its descriptor and its socket's
  // inode: once gRPC closes it, the number is free or names something else.
  struct Live {
    int fd;
    dev_t dev;
    ino_t ino;
    bool shut = false;  // by ShutAbusers: gRPC closes it next
  };
  void Run();
  void AcceptOn(const ListeningSocket& listener);
  // Whether connections to `listener` go to the TLS acceptor.
  bool ServesTls(const ListeningSocket& listener) const;
  // What `pending` has shown so far, without consuming it (MSG_PEEK).
  Shown Inspect(Pending& pending, Clock::time_point now) const;
  // Gives a pending connection that showed its protocol to gRPC.
  void HandOver(const Pending& pending);
  // Looks at each pending connection `fds` (from `first` on, in pending_'s
  // order) found readable or due, hands over or closes what it can.
  void ServePending(const std::vector<pollfd>& fds, size_t first,
                    Clock::time_point now);
  // Forgets the connections gRPC has closed; returns how many remain.
  // Once every connection shut for abuse is gone, gives the memory their
  // calls held back to the system.
  size_t SweepClosed();
  // Shuts down the connections abandoning streams too fast (gRPC then
  // closes them, freeing their calls).
  void ShutAbusers(Clock::time_point now);
  // Accepts and closes one waiting connection using the reserve descriptor.
  void ShedOneWithReserve(int listen_fd);

  grpc::Server* const server_;
  PeerTable* const peers_;
  grpc::experimental::ExternalConnectionAcceptor* const tls_;
  std::vector<ListeningSocket> listeners_;
  const Options options_;
  int wake_read_ = -1;
  int wake_write_ = -1;
  int reserve_fd_ = -1;
  std::vector<Live> live_;        // the accept thread's
  std::deque<Pending> pending_;   // the accept thread's, oldest first
  StreamResetWatch reset_watch_;  // the accept thread's
  Clock::time_point next_reset_check_;
  int shut_open_ = 0;  // connections shut for abuse not yet closed by gRPC
  std::thread thread_;
  std::atomic<bool> stopping_{false};

  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> refused_over_cap_{0};
  std::atomic<int64_t> refused_no_descriptors_{0};
  std::atomic<int64_t> closed_bad_preface_{0};
  std::atomic<int64_t> closed_silent_{0};
  std::atomic<int64_t> closed_rapid_reset_{0};
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CONNECTION_GATE_H_

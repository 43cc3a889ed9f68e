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
// Thread safety: Start and Stop from one thread; the counters from any.
#ifndef STATECACHE_DAEMON_CONNECTION_GATE_H_
#define STATECACHE_DAEMON_CONNECTION_GATE_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/service/peer.h"

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
    // Live connections at once over every listener; a connection beyond
    // it is closed on arrival. REQUIRES: >= 1.
    int max_connections = 512;
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

 private:
  // A connection handed to gRPC, known by its descriptor and its socket's
  // inode: once gRPC closes it, the number is free or names something else.
  struct Live {
    int fd;
    dev_t dev;
    ino_t ino;
  };
  void Run();
  void AcceptOn(const ListeningSocket& listener);
  // Forgets the connections gRPC has closed; returns how many remain.
  size_t SweepClosed();
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
  std::vector<Live> live_;  // the accept thread's
  std::thread thread_;
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> refused_over_cap_{0};
  std::atomic<int64_t> refused_no_descriptors_{0};
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CONNECTION_GATE_H_

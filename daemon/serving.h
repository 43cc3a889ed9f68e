// Serving: the daemon's gRPC server and the doors into it. The services
// (with the standard health service and reflection) on one server, its
// message limits and TLS credentials, the listening socket bound by the
// daemon itself and fed through a ConnectionGate (peer credentials,
// connection cap, recovery from descriptor exhaustion).
//
// TCP is served only with TLS (a certificate and key; with a client CA,
// mutual TLS: a client without a certificate the CA signed cannot connect)
// or when the operator says --insecure_tcp, knowing what that exposes.
//
// Thread safety: Start, then Stop, from one thread.
#ifndef STATECACHE_DAEMON_SERVING_H_
#define STATECACHE_DAEMON_SERVING_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/connection_gate.h"
#include "daemon/grpc/call_tracker.h"
#include "daemon/service/peer.h"

namespace statecache {

struct ServingOptions {
  std::string listen;  // as --listen (after defaulting)
  int max_message_bytes = 16 << 20;
  int max_connections = 512;
  // Calls one connection may have open at once (HTTP/2 streams: each
  // StepStream holds one for its life); more wait in the client.
  int max_streams_per_connection = 100;
  // How long a new connection may stay silent before it is closed, and the
  // bound on a TLS handshake (see ConnectionGate). Valid: 10 to 600000.
  int64_t handshake_timeout_ms = 10000;
  // Streams a second one connection may open and abandon (reset, cancel)
  // before it is closed (see StreamResetWatch); 0: never. Valid: 0 to 10^9.
  int64_t max_resets_per_second = 1000;
  // PEM files; cert and key together, or neither. client_ca: require client
  // certificates it signed.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  bool insecure_tcp = false;
};

class Serving {
 public:
  // Reads the TLS files, builds and starts the server with `services`, binds
  // `options.listen` and starts accepting on it. REQUIRES: the listen
  // address prepared (PrepareListenAddress); `services` and `peers` outlive
  // this. Errors: INVALID_ARGUMENT (TLS flags inconsistent, TCP without TLS
  // or --insecure_tcp, a TLS file unreadable, a handshake timeout or reset
  // rate out of range: configuration errors);
  // UNAVAILABLE (the address cannot be bound; gRPC could not start).
  static absl::StatusOr<std::unique_ptr<Serving>> Start(
      const ServingOptions& options,
      std::initializer_list<grpc::Service*> services, PeerTable* peers);
  ~Serving();

  // The address as clients dial it (the picked port for TCP port 0).
  const std::string& address() const { return address_; }
  // What the doors refused so far.
  const ConnectionGate& gate() const { return *gate_; }

  // The health service's answer: for the server as a whole ("") and for
  // each of the daemon's services by name.
  void SetHealth(bool serving);

  // Lets calls in flight finish after new sessions are refused: those
  // `calls` counts (a Step being served on a stream, a Resize) get up to
  // `grace` (after it, a pending Resize finishes CANCELLED); then Stop.
  void Drain(CallTracker& calls, absl::Duration grace);

  // Stops accepting (the socket file goes) and shuts the server down,
  // giving calls in flight until `deadline`. Idempotent.
  void Stop(absl::Time deadline);

 private:
  Serving() = default;

  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> tls_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ConnectionGate> gate_;
  std::string address_;
  bool stopped_ = false;
};

// Whether `address` is TCP (not unix: or unix-abstract:).
bool IsTcpAddress(const std::string& address);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVING_H_

// Peer: who is on the other end of a call, as the daemon's listeners
// established it, and PeerTable: the Unix-socket peers' credentials, by the
// descriptor their connection was handed to gRPC on.
//
// A session is bound to the principal of the peer that attached it (the
// peer's uid on a Unix socket, the identity its client certificate carries
// over TLS), and the access lists (access_policy.h) name principals, so a
// session token alone is not enough to use a session or reach the operators'
// calls.
//
// Thread safety: Peer is a value. PeerTable is thread-safe.
#ifndef STATECACHE_DAEMON_SERVICE_PEER_H_
#define STATECACHE_DAEMON_SERVICE_PEER_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace statecache {

struct Peer {
  enum class Kind {
    // A caller in the daemon's own process (tests, benchmarks): trusted.
    kInProcess,
    // A Unix-socket peer, identified by the kernel (SO_PEERCRED).
    kLocal,
    // A TLS peer whose client certificate the configured CA verified.
    kCertificate,
    // A TCP peer nothing vouches for (plaintext, or TLS without a client
    // certificate).
    kAnonymous,
  };
  Kind kind = Kind::kInProcess;
  // kLocal: the credentials the peer connected with.
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
  // kCertificate: the certificate's identity (its first subject alternative
  // name, else its common name).
  std::string certificate;

  static Peer InProcess() { return Peer{}; }
  static Peer Local(uid_t uid, gid_t gid, pid_t pid) {
    Peer peer;
    peer.kind = Kind::kLocal;
    peer.uid = uid;
    peer.gid = gid;
    peer.pid = pid;
    return peer;
  }
  static Peer Certified(std::string identity) {
    Peer peer;
    peer.kind = Kind::kCertificate;
    peer.certificate = std::move(identity);
    return peer;
  }
  static Peer Anonymous() {
    Peer peer;
    peer.kind = Kind::kAnonymous;
    return peer;
  }

  // The same principal: what a session is bound to. Two processes of one
  // uid are one principal (either could read the other's memory anyway).
  bool SamePrincipal(const Peer& other) const;
  // The principal as operators write it: "uid:1000", "x509:NAME",
  // "anonymous", "in-process".
  std::string Principal() const;
  // For messages and logs: the principal, with the pid of a local peer.
  std::string Describe() const;
};

// The credentials of each Unix-socket (and plaintext TCP) connection the
// daemon accepted itself, by the descriptor it gave gRPC. gRPC names such a
// connection's peer "fd:N", which is how a call finds its entry. A
// descriptor number is reused only after gRPC closed the connection, and
// the listener records the new connection before handing it over, so an
// entry describes the connection that now has that number. The one gap: a
// call whose handler starts after its own connection closed and the
// number went to a new peer is resolved as that peer. It is microseconds
// wide, and using a session still needs that session's id.
class PeerTable {
 public:
  void Record(int fd, const Peer& peer) ABSL_LOCKS_EXCLUDED(mu_);
  // The peer recorded for "fd:N", or nullopt (not such a name, or unknown).
  std::optional<Peer> Find(absl::string_view grpc_peer) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, Peer> by_fd_ ABSL_GUARDED_BY(mu_);
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_PEER_H_

// AccessPolicy: which peers may attach sessions and which may make the
// operators' calls (ListSessions, EvictSession, Resize, Drain).
//
// Two lists of principals, as the daemon's --attach_allow and --admin_allow
// flags give them, comma-separated:
//   uid:N / user:NAME     a Unix-socket peer running as that user
//   gid:N / group:NAME    a Unix-socket peer whose primary group it is
//   x509:NAME             a TLS peer whose verified client certificate
//                         names NAME (first subject alternative name, else
//                         common name)
//   any                   every peer that can reach a listener (attach only)
// A peer in the daemon's own process is always allowed. An anonymous peer
// (plaintext TCP, TLS without a client certificate) matches only `any`, so
// it is never an operator. GetStats and Ping are open to every peer: they
// carry the same aggregate numbers /metrics serves.
//
// Thread safety: immutable after construction; thread-safe.
#ifndef STATECACHE_DAEMON_SERVICE_ACCESS_POLICY_H_
#define STATECACHE_DAEMON_SERVICE_ACCESS_POLICY_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/service/peer.h"

namespace statecache {

class AccessPolicy {
 public:
  // Every peer may attach and administer: for in-process use, where every
  // caller is a Peer::InProcess() anyway.
  AccessPolicy() = default;

  // Parses the two lists (user and group names resolved now).
  // Errors: INVALID_ARGUMENT naming the entry that is not one of the forms
  // above, or a user or group that does not exist; `any` in the admin list.
  static absl::StatusOr<AccessPolicy> Parse(absl::string_view attach_allow,
                                            absl::string_view admin_allow);

  // OK, or PERMISSION_DENIED naming the peer and the flag that would admit
  // it.
  absl::Status CheckAttach(const Peer& peer) const;
  // `call` names the refused call in the message.
  absl::Status CheckAdmin(const Peer& peer, absl::string_view call) const;

  // The lists as the flags would give them (for the startup log).
  std::string DebugString() const;

 private:
  struct Entry {
    enum class Kind { kUid, kGid, kCertificate, kAny } kind;
    uint32_t id = 0;
    std::string name;
  };
  struct List {
    bool configured = false;  // false: everyone (the in-process default)
    std::vector<Entry> entries;
    bool Admits(const Peer& peer) const;
    std::string DebugString() const;
  };
  static absl::StatusOr<List> ParseList(absl::string_view text,
                                        absl::string_view flag);

  List attach_;
  List admin_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_ACCESS_POLICY_H_

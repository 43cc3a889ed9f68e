#include "daemon/service/peer.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace statecache {

bool Peer::SamePrincipal(const Peer& other) const {
  if (kind != other.kind) return false;
  switch (kind) {
    case Kind::kLocal:
      return uid == other.uid;
    case Kind::kCertificate:
      return certificate == other.certificate;
    case Kind::kInProcess:
    case Kind::kAnonymous:
      return true;
  }
  return false;
}

std::string Peer::Principal() const {
  switch (kind) {
    case Kind::kLocal:
      return absl::StrCat("uid:", uid);
    case Kind::kCertificate:
      return absl::StrCat("x509:", certificate);
    case Kind::kAnonymous:
      return "anonymous";
    case Kind::kInProcess:
      return "in-process";
  }
  return "unknown";
}

std::string Peer::Describe() const {
  if (kind == Kind::kLocal) {
    return absl::StrCat("uid:", uid, " (gid ", gid, ", pid ", pid, ")");
  }
  return Principal();
}

void PeerTable::Record(int fd, const Peer& peer) {
  absl::MutexLock lock(&mu_);
  by_fd_[fd] = peer;
}

std::optional<Peer> PeerTable::Find(absl::string_view grpc_peer) const {
  constexpr absl::string_view kPrefix = "fd:";
  if (!absl::StartsWith(grpc_peer, kPrefix)) return std::nullopt;
  int fd = -1;
  if (!absl::SimpleAtoi(grpc_peer.substr(kPrefix.size()), &fd)) {
    return std::nullopt;
  }
  absl::MutexLock lock(&mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return std::nullopt;
  return it->second;
}

}  // namespace statecache

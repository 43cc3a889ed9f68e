// DaemonTarget: runs passes on a running statecached through the C++ client
// library (one unary Step, or one StepStream message, per pass; the library
// sends the packed form). The session is attached at Create and renewed by
// the library's keepalive thread, so a run longer than the lease (think
// times, --realtime) keeps it. Detach says goodbye; without it the lease
// runs out and the daemon releases the session's requests all the same.
//
// Thread safety: thread-compatible (one simulation drives it).
#ifndef STATECACHE_BENCH_LOADGEN_DAEMON_TARGET_H_
#define STATECACHE_BENCH_LOADGEN_DAEMON_TARGET_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "bench/loadgen/pass.h"
#include "client/statecache_client.h"

namespace statecache::loadgen {

class DaemonTarget final : public StepTarget {
 public:
  // Connects to `address` and attaches with `identity`, asking for
  // placement advice when `advise_placement`.
  // Errors: UNAVAILABLE (nothing answers at `address`); Attach's errors
  // (FAILED_PRECONDITION for an identity the daemon does not serve, naming
  // the field; UNAVAILABLE while it drains).
  static absl::StatusOr<std::unique_ptr<DaemonTarget>> Create(
      const std::string& address, const ModelIdentity& identity, bool streamed,
      bool advise_placement = false);

  // What Attach returned: the pool's size, transfer and step limit.
  const SessionInfo& session() const { return session_; }
  // The daemon's counters as Create found them, before attaching.
  const DaemonStats& stats_before_attach() const { return before_; }

  absl::StatusOr<StepResults> Run(const Pass& pass, double* seconds) override;
  absl::StatusOr<DaemonStats> Stats() override;
  // Errors: NOT_FOUND (the session had already expired).
  absl::Status Detach();

 private:
  DaemonTarget(std::unique_ptr<Client> client, bool streamed)
      : client_(std::move(client)), streamed_(streamed) {}

  std::unique_ptr<Client> client_;
  const bool streamed_;
  SessionInfo session_;
  DaemonStats before_;
  StepBuilder builder_;  // reused
};

// Appends `op` to `builder` (shared with tests).
void AddToBuilder(const PassOp& op, StepBuilder& builder);

}  // namespace statecache::loadgen

#endif  // STATECACHE_BENCH_LOADGEN_DAEMON_TARGET_H_

// RpcObserver: what the gRPC adapter reports about each call it finishes,
// for metrics. Kept apart from any metrics library so the adapter does not
// depend on one.
//
// Thread safety: implementations must be thread-safe and cheap (called on
// gRPC's threads, once per call or StepStream message).
#ifndef STATECACHE_DAEMON_GRPC_RPC_OBSERVER_H_
#define STATECACHE_DAEMON_GRPC_RPC_OBSERVER_H_

#include "absl/status/status.h"

namespace statecache {

enum class RpcMethod {
  kAttach,
  kDetach,
  kKeepAlive,
  kStep,
  kStepStream,  // one per message
  kPing,
  kOpenStepChannel,
  kStepChannel,  // one per Step served on a step channel (daemon/channel)
  kGetStats,
  kListSessions,
  kResize,
  kEvictSession,
  kDrain,
  kCount,  // not a method
};

// "Attach", "StepStream", ... as in the proto.
const char* RpcMethodName(RpcMethod method);

class RpcObserver {
 public:
  virtual ~RpcObserver() = default;
  virtual void OnRpc(RpcMethod method, absl::StatusCode code,
                     double seconds) = 0;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_GRPC_RPC_OBSERVER_H_

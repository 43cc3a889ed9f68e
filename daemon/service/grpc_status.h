// The one place where the daemon turns an absl::Status into a grpc::Status.
//
// StateCache reports every outcome as an absl::Status; the gRPC adapter hands
// each one through ToGrpcStatus at the edge, so the mapping (and any future
// policy, such as scrubbing internal messages) lives here and nowhere else.
//
// Thread safety: stateless; thread-safe.
#ifndef STATECACHE_DAEMON_SERVICE_GRPC_STATUS_H_
#define STATECACHE_DAEMON_SERVICE_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace statecache {

// Same code (the two enums share google.rpc.Code's values, but the mapping is
// spelled out so neither side can drift), same message. A code gRPC does not
// know becomes UNKNOWN.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_GRPC_STATUS_H_

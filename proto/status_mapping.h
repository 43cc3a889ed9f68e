// The one place where a status crosses between absl and the wire, both
// directions, for the daemon and every C++ client alike:
//   * absl::Status <-> grpc::Status, the RPC's own status (the daemon's
//     adapter answers with ToGrpcStatus, the client reads FromGrpcStatus);
//   * absl::Status <-> an in-message code, the google.rpc.Code number that
//     OperationResult.code, PackedResults.codes and StepResponse.error_code
//     carry (ToWireCode / FromWireCode).
// absl::StatusCode, grpc::StatusCode and google.rpc.Code share their values;
// the grpc mapping is still spelled out, in one table, so neither side can
// drift.
//
// Thread safety: stateless; thread-safe.
#ifndef STATECACHE_PROTO_STATUS_MAPPING_H_
#define STATECACHE_PROTO_STATUS_MAPPING_H_

#include <grpcpp/support/status.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace statecache {

// Same code, same message. A code gRPC does not know becomes UNKNOWN.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Same code, same message. A code absl does not know becomes UNKNOWN.
absl::Status FromGrpcStatus(const grpc::Status& status);

// The google.rpc.Code number of `status` (0 for OK).
int32_t ToWireCode(const absl::Status& status);

// The status an in-message code and its message stand for: OK for 0; a
// number that is no google.rpc.Code becomes UNKNOWN, the number kept in the
// message ("code 99: ...").
absl::Status FromWireCode(int64_t code, absl::string_view message);

}  // namespace statecache

#endif  // STATECACHE_PROTO_STATUS_MAPPING_H_

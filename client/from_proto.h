// The client library's plain types (statecache_client.h) from the proto's
// messages, written once for the library and for tools that hold the
// messages themselves (bench/loadgen runs the daemon's core in-process and
// reports what the library would).
//
// Thread safety: pure functions.
#ifndef STATECACHE_CLIENT_FROM_PROTO_H_
#define STATECACHE_CLIENT_FROM_PROTO_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "client/daemon_stats_proto.h"
#include "client/statecache_client.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {

// GetStats' answer and the messages it carries (DaemonStats,
// ModelIdentity, TransferConfig, WarmRestartStats) to and from their
// messages: FromProto and ToProto, written by the build with the structs
// (client/daemon_stats_proto.h).

// A list-form result as the library reports it: the refusal's status (its
// code and message), or the result of its kind.
// Errors: INTERNAL for a successful result of no kind.
absl::StatusOr<OperationResult> FromProto(const v1::OperationResult& result);

// A packed Step's results, one per kind in `kinds` (the request's
// PackedOperations.kinds), read by the codec (proto/packed_codec.h).
// Errors: INTERNAL when the packed results do not follow the layout rule for
// these kinds.
absl::StatusOr<StepResults> FromProto(
    const v1::StepResponse& response,
    const google::protobuf::RepeatedField<uint32_t>& kinds);

}  // namespace statecache

#endif  // STATECACHE_CLIENT_FROM_PROTO_H_

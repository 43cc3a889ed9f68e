// The packed (columnar) form of a Step, converted to and from the list form
// (Operation, OperationResult) by the codec (proto/packed_codec.h), which
// holds every kind's layout: these are loops over its readers and writers.
//
// For clients and tools that build a pass as a list and want to send it
// packed, and for reading packed results back as OperationResults. A client
// that cares for speed writes each kind's message with PackedOperationWriter
// directly, as the C++ client library does, rather than building the list.
//
// Thread-safe (pure functions).
#ifndef STATECACHE_PROTO_PACKED_FORM_H_
#define STATECACHE_PROTO_PACKED_FORM_H_

#include "absl/status/status.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {

// Writes `operations` into `packed` (cleared first).
// Errors: INVALID_ARGUMENT for an operation with no kind set.
absl::Status PackOperations(
    const google::protobuf::RepeatedPtrField<v1::Operation>& operations,
    v1::PackedOperations* packed);

// The inverse: `operations` (cleared first) from `packed`.
// Errors: INVALID_ARGUMENT when `packed` does not follow the layout rule
// (unknown kind, a column too short or too long, a negative length).
absl::Status UnpackOperations(
    const v1::PackedOperations& packed,
    google::protobuf::RepeatedPtrField<v1::Operation>* operations);

// The results of a packed Step as OperationResults (`results` cleared
// first), one per kind in `kinds` (the request's PackedOperations.kinds).
// Errors: INVALID_ARGUMENT when `packed` does not match the kinds.
absl::Status UnpackResults(
    const v1::PackedResults& packed,
    const google::protobuf::RepeatedField<uint32_t>& kinds,
    google::protobuf::RepeatedPtrField<v1::OperationResult>* results);

// The inverse of UnpackResults: `packed` (cleared first) from list-form
// results. Errors: INVALID_ARGUMENT for a successful result with no kind.
absl::Status PackResults(
    const google::protobuf::RepeatedPtrField<v1::OperationResult>& results,
    v1::PackedResults* packed);

}  // namespace statecache

#endif  // STATECACHE_PROTO_PACKED_FORM_H_

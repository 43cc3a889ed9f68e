#include "proto/status_mapping.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace statecache {
namespace {

using A = absl::StatusCode;
using G = grpc::StatusCode;

// Every code both enums have, in google.rpc.Code order.
constexpr std::pair<A, G> kCodes[] = {
    {A::kOk, G::OK},
    {A::kCancelled, G::CANCELLED},
    {A::kUnknown, G::UNKNOWN},
    {A::kInvalidArgument, G::INVALID_ARGUMENT},
    {A::kDeadlineExceeded, G::DEADLINE_EXCEEDED},
    {A::kNotFound, G::NOT_FOUND},
    {A::kAlreadyExists, G::ALREADY_EXISTS},
    {A::kPermissionDenied, G::PERMISSION_DENIED},
    {A::kResourceExhausted, G::RESOURCE_EXHAUSTED},
    {A::kFailedPrecondition, G::FAILED_PRECONDITION},
    {A::kAborted, G::ABORTED},
    {A::kOutOfRange, G::OUT_OF_RANGE},
    {A::kUnimplemented, G::UNIMPLEMENTED},
    {A::kInternal, G::INTERNAL},
    {A::kUnavailable, G::UNAVAILABLE},
    {A::kDataLoss, G::DATA_LOSS},
    {A::kUnauthenticated, G::UNAUTHENTICATED},
};

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  G code = G::UNKNOWN;
  for (const auto& [a, g] : kCodes) {
    if (a == status.code()) code = g;
  }
  return grpc::Status(code, std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  A code = A::kUnknown;
  for (const auto& [a, g] : kCodes) {
    if (g == status.error_code()) code = a;
  }
  return absl::Status(code, status.error_message());
}

int32_t ToWireCode(const absl::Status& status) {
  return static_cast<int32_t>(status.code());
}

absl::Status FromWireCode(int64_t code, absl::string_view message) {
  if (code == 0) return absl::OkStatus();
  for (const auto& [a, g] : kCodes) {
    if (static_cast<int64_t>(a) == code) return absl::Status(a, message);
  }
  return absl::UnknownError(absl::StrCat("code ", code, ": ", message));
}

}  // namespace statecache

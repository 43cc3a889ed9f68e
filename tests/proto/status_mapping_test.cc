// proto/status_mapping.h: every code both ways, and the codes absl and the
// wire may carry that gRPC does not know.
#include "proto/status_mapping.h"

#include <string>

#include "gtest/gtest.h"

namespace statecache {
namespace {

TEST(StatusMappingTest, EveryCodeRoundTripsWithItsMessage) {
  for (int code = 0; code <= 16; ++code) {
    SCOPED_TRACE(code);
    const absl::Status status(static_cast<absl::StatusCode>(code), "why");
    const grpc::Status grpc_status = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(grpc_status.error_code()), code);
    EXPECT_EQ(FromGrpcStatus(grpc_status), status);
    EXPECT_EQ(ToWireCode(status), code);
    EXPECT_EQ(FromWireCode(code, "why"), status);
  }
}

TEST(StatusMappingTest, UnknownCodesBecomeUnknown) {
  EXPECT_EQ(ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(99), "x"))
                .error_code(),
            grpc::StatusCode::UNKNOWN);
  for (int64_t code : {int64_t{-1}, int64_t{17}, int64_t{1} << 40}) {
    const absl::Status status = FromWireCode(code, "why");
    EXPECT_TRUE(absl::IsUnknown(status)) << status;
    EXPECT_EQ(status.message(), "code " + std::to_string(code) + ": why");
  }
}

}  // namespace
}  // namespace statecache

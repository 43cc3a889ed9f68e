// Attaching with the test identity over raw stubs, for GoogleTest tests.
#ifndef STATECACHE_TESTS_INTEGRATION_ATTACH_SESSION_H_
#define STATECACHE_TESTS_INTEGRATION_ATTACH_SESSION_H_

#include <string>

#include "gtest/gtest.h"
#include "tests/integration/test_util.h"

namespace statecache::testing {

// The session id, or "" (and a test failure) when refused. `response`
// receives the whole reply if given.
inline std::string AttachSession(RawStubs& stubs, const std::string& name,
                                 v1::AttachResponse* response = nullptr) {
  v1::AttachRequest request;
  *request.mutable_identity() = TestIdentityProto();
  request.set_client_name(name);
  v1::AttachResponse local;
  v1::AttachResponse* out = response ? response : &local;
  grpc::Status status = stubs.scheduler->Attach(Ctx().get(), request, out);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return out->session_id();
}

}  // namespace statecache::testing

#endif  // STATECACHE_TESTS_INTEGRATION_ATTACH_SESSION_H_

// Shared pieces of the integration tests: the model identity every test
// daemon serves, raw gRPC stubs for exact status codes, chained block hashes,
// and a polling wait with a deadline.
#ifndef STATECACHE_TESTS_INTEGRATION_TEST_UTIL_H_
#define STATECACHE_TESTS_INTEGRATION_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/statecache_client.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"

namespace statecache::testing {

inline constexpr char kModelId[] = "it/model-7b";
inline constexpr int64_t kBlock = 64;
inline constexpr char kNamespace[] = "it-namespace";
inline constexpr int32_t kNumSpec = 1;
inline constexpr int32_t kWidth = 1 + kNumSpec;

// The identity flags of every test daemon.
inline std::vector<std::string> IdentityFlags() {
  return {absl::StrCat("--model_id=", kModelId),
          absl::StrCat("--hash_block_size=", kBlock),
          absl::StrCat("--hash_namespace=", kNamespace),
          absl::StrCat("--num_spec=", kNumSpec)};
}

inline std::vector<std::string> WithIdentity(std::vector<std::string> flags) {
  std::vector<std::string> all = IdentityFlags();
  all.insert(all.end(), flags.begin(), flags.end());
  return all;
}

inline ModelIdentity TestIdentity() {
  return ModelIdentity{.model_id = kModelId,
                       .hash_block_size = kBlock,
                       .hash_namespace = kNamespace,
                       .num_spec = kNumSpec};
}

inline v1::Identity TestIdentityProto() {
  v1::Identity id;
  id.set_model_id(kModelId);
  id.set_hash_block_size(kBlock);
  id.set_hash_namespace(kNamespace);
  id.set_num_spec(kNumSpec);
  return id;
}

// Raw generated stubs over one channel, for exact codes and bad input.
struct RawStubs {
  explicit RawStubs(const std::string& address) {
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(64 << 20);
    args.SetMaxReceiveMessageSize(64 << 20);
    channel = grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args);
    scheduler = v1::StateCache::NewStub(channel);
    admin = v1::StateCacheAdmin::NewStub(channel);
  }
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::StateCache::Stub> scheduler;
  std::unique_ptr<v1::StateCacheAdmin::Stub> admin;
};

// A context with a deadline, so no test call can hang.
inline std::unique_ptr<grpc::ClientContext> Ctx(
    absl::Duration timeout = absl::Seconds(10)) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return context;
}

// splitmix64, kept in [0, 2^63).
inline int64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<int64_t>(x & 0x7fffffffffffffffULL);
}

// Chained block hashes: block i's hash covers blocks 0..i. `content[i]`
// stands for block i's tokens.
inline std::vector<int64_t> ChainedHashes(
    const std::vector<uint64_t>& content) {
  std::vector<int64_t> hashes;
  uint64_t prev = 0x5eed;
  for (uint64_t c : content) {
    const int64_t h = Mix(prev * 31 + Mix(c));
    hashes.push_back(h);
    prev = static_cast<uint64_t>(h);
  }
  return hashes;
}

// Calls `done` every `interval` until it returns true or `timeout` passes.
// Returns whether it became true. (Polling with a deadline: the condition
// is observed, never assumed after a fixed sleep.)
inline bool PollUntil(const std::function<bool()>& done, absl::Duration timeout,
                      absl::Duration interval = absl::Milliseconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (done()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(interval);
  }
}

}  // namespace statecache::testing

#endif  // STATECACHE_TESTS_INTEGRATION_TEST_UTIL_H_

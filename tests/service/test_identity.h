// The model identity the service tests attach with, and its block size.
#ifndef STATECACHE_TESTS_SERVICE_TEST_IDENTITY_H_
#define STATECACHE_TESTS_SERVICE_TEST_IDENTITY_H_

#include <cstdint>

#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {

inline constexpr int64_t kTestBlock = 64;

inline v1::Identity TestIdentity() {
  v1::Identity id;
  id.set_model_id("test/model");
  id.set_hash_block_size(kTestBlock);
  id.set_hash_namespace("ns");
  return id;
}

}  // namespace statecache

#endif  // STATECACHE_TESTS_SERVICE_TEST_IDENTITY_H_

// Staging memory on the heap, for test devices that have no region of
// their own (the fault-injection tests, the step fuzzer's checking device).
#ifndef STATECACHE_TESTS_DEVICE_HEAP_STAGING_H_
#define STATECACHE_TESTS_DEVICE_HEAP_STAGING_H_

#include <cstdint>
#include <memory>

#include "daemon/device/device.h"

namespace statecache {

class HeapStaging : public HostStaging {
 public:
  explicit HeapStaging(uint64_t bytes)
      : data_(new char[bytes]()), size_(bytes) {}
  char* data() const override { return data_.get(); }
  uint64_t size() const override { return size_; }

 private:
  const std::unique_ptr<char[]> data_;
  const uint64_t size_;
};

}  // namespace statecache

#endif  // STATECACHE_TESTS_DEVICE_HEAP_STAGING_H_

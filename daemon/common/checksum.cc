#include "daemon/common/checksum.h"

#include <xxhash.h>

namespace statecache {

uint64_t Checksum(const void* data, size_t size) {
  return XXH3_64bits(data, size);
}

}  // namespace statecache

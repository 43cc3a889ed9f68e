// The byte patterns the device tests write into slots: every byte of every
// piece says which (seed, slot, tensor, layer, position) wrote it, so a byte
// in the wrong place is caught wherever it lands.
#ifndef STATECACHE_TESTS_DEVICE_PATTERN_H_
#define STATECACHE_TESTS_DEVICE_PATTERN_H_

#include <cstdint>

namespace statecache::testing {

inline uint8_t PatternByte(uint64_t seed, int64_t slot, int tensor,
                           int64_t layer, uint64_t index) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull ^
               (static_cast<uint64_t>(slot) << 40) ^
               (static_cast<uint64_t>(layer) << 24) ^
               (static_cast<uint64_t>(tensor) << 16) ^ index;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 29;
  // Never 0, so an unwritten (zero) byte never passes for a pattern byte.
  return static_cast<uint8_t>(x % 255 + 1);
}

}  // namespace statecache::testing

#endif  // STATECACHE_TESTS_DEVICE_PATTERN_H_

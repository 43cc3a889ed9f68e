// DType: the element types a state tensor may hold, with their sizes and the
// names layout files and the wire use for them.
//
// Only the size matters to the daemon (it moves bytes, never interprets
// them); the name travels to model runners so they build typed views.
//
// Thread-safe: pure functions.
#ifndef STATECACHE_VOCABULARY_DTYPE_H_
#define STATECACHE_VOCABULARY_DTYPE_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace statecache {

enum class DType : uint8_t {
  kBF16,    // "bf16"     (torch.bfloat16)
  kF16,     // "f16"      (torch.float16)
  kF32,     // "f32"      (torch.float32)
  kF8E4M3,  // "f8_e4m3"  (torch.float8_e4m3fn)
  kF8E5M2,  // "f8_e5m2"  (torch.float8_e5m2)
};

// Bytes per element: 1, 2 or 4.
int64_t DTypeSize(DType dtype);

// The canonical name (the quoted names above). Canonical names are what the
// layout fingerprint hashes.
std::string_view DTypeName(DType dtype);

// Accepts the canonical names and the torch spellings ("bfloat16", "float16",
// "half", "float32", "float", "float8_e4m3fn", "float8_e5m2").
// Errors: INVALID_ARGUMENT naming the accepted names.
absl::StatusOr<DType> ParseDType(std::string_view name);

}  // namespace statecache

#endif  // STATECACHE_VOCABULARY_DTYPE_H_

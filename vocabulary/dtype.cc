#include "vocabulary/dtype.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace statecache {
namespace {

struct DTypeInfo {
  DType dtype;
  int64_t size;
  std::string_view name;
  std::string_view torch_name;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kBF16, 2, "bf16", "bfloat16"},
    {DType::kF16, 2, "f16", "float16"},
    {DType::kF32, 4, "f32", "float32"},
    {DType::kF8E4M3, 1, "f8_e4m3", "float8_e4m3fn"},
    {DType::kF8E5M2, 1, "f8_e5m2", "float8_e5m2"},
};

const DTypeInfo& Info(DType dtype) { return kDTypes[static_cast<int>(dtype)]; }

}  // namespace

int64_t DTypeSize(DType dtype) { return Info(dtype).size; }

std::string_view DTypeName(DType dtype) { return Info(dtype).name; }

absl::StatusOr<DType> ParseDType(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.name || name == info.torch_name) return info.dtype;
  }
  if (name == "half") return DType::kF16;
  if (name == "float") return DType::kF32;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", std::string(name),
                   "\" (accepted: bf16, f16, f32, f8_e4m3, f8_e5m2, or the "
                   "torch names bfloat16, float16, half, float32, float, "
                   "float8_e4m3fn, float8_e5m2)"));
}

}  // namespace statecache

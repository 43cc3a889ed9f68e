#include "daemon/device/layout_presets.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/string_view_compat.h"

namespace statecache {
namespace {

// Qwen3-Next-80B-A3B (Qwen/Qwen3-Next-80B-A3B-Instruct, -Thinking), config:
//   num_hidden_layers 48, full_attention_interval 4 (layer_types: every 4th
//   layer is full attention) -> 36 Gated DeltaNet ("linear_attention") layers;
//   linear_num_key_heads 16, linear_num_value_heads 32,
//   linear_key_head_dim 128, linear_value_head_dim 128,
//   linear_conv_kernel_dim 4; torch_dtype bfloat16.
//   conv_dim = 2 * key_heads * key_head_dim + value_heads * value_head_dim
//            = 2*16*128 + 32*128 = 8192 (q, k and v go through the conv);
//   conv state [4 - 1 + num_spec, 8192];
//   recurrent state [value_heads, key_head_dim, value_head_dim] = 32x128x128.
absl::StatusOr<StateLayout> Qwen3Next80B(int num_spec,
                                         Arrangement arrangement) {
  constexpr int64_t kKeyHeads = 16, kValueHeads = 32, kKeyDim = 128,
                    kValueDim = 128, kConvKernel = 4;
  constexpr int64_t kConvDim =
      2 * kKeyHeads * kKeyDim + kValueHeads * kValueDim;
  return StateLayout::Create(
      "qwen3-next-80b-a3b",
      {{"conv", {kConvKernel - 1 + num_spec, kConvDim}, DType::kBF16},
       {"ssm", {kValueHeads, kKeyDim, kValueDim}, DType::kBF16}},
      /*num_layers=*/36, arrangement);
}

// Nemotron-H-8B (nvidia/Nemotron-H-8B-Base-8K, -Reasoning-128K), config:
//   num_hidden_layers 52, hybrid_override_pattern
//   "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-" -> 24 Mamba-2
//   layers ('M'; '*' is attention, '-' MLP); mamba_num_heads 128,
//   mamba_head_dim 64, ssm_state_size 128, n_groups 8, conv_kernel 4;
//   torch_dtype bfloat16.
//   conv_dim = mamba_num_heads * mamba_head_dim + 2 * n_groups *
//              ssm_state_size = 8192 + 2048 = 10240 (x, B and C);
//   conv state [4 - 1 + num_spec, 10240];
//   ssm state [mamba_num_heads, mamba_head_dim, ssm_state_size] = 128x64x128.
absl::StatusOr<StateLayout> NemotronH8B(int num_spec, Arrangement arrangement) {
  constexpr int64_t kHeads = 128, kHeadDim = 64, kState = 128, kGroups = 8,
                    kConvKernel = 4;
  constexpr int64_t kConvDim = kHeads * kHeadDim + 2 * kGroups * kState;
  return StateLayout::Create(
      "nemotron-h-8b",
      {{"conv", {kConvKernel - 1 + num_spec, kConvDim}, DType::kBF16},
       {"ssm", {kHeads, kHeadDim, kState}, DType::kBF16}},
      /*num_layers=*/24, arrangement);
}

// Jamba v0.1 (ai21labs/Jamba-v0.1), config:
//   num_hidden_layers 32, attn_layer_period 8, attn_layer_offset 4 (layers
//   4, 12, 20, 28 are attention) -> 28 Mamba-1 layers; hidden_size 4096,
//   mamba_expand 2, mamba_d_state 16, mamba_d_conv 4; torch_dtype bfloat16.
//   intermediate = mamba_expand * hidden_size = 8192 (Mamba-1 convolves x
//   only);
//   conv state [4 - 1 + num_spec, 8192]; ssm state [8192, mamba_d_state 16].
absl::StatusOr<StateLayout> JambaV01(int num_spec, Arrangement arrangement) {
  constexpr int64_t kIntermediate = 2 * 4096, kState = 16, kConvKernel = 4;
  return StateLayout::Create(
      "jamba-v0.1",
      {{"conv", {kConvKernel - 1 + num_spec, kIntermediate}, DType::kBF16},
       {"ssm", {kIntermediate, kState}, DType::kBF16}},
      /*num_layers=*/28, arrangement);
}

struct Preset {
  std::string_view name;
  std::vector<std::string_view> aliases;  // lower case
  absl::StatusOr<StateLayout> (*make)(int num_spec, Arrangement arrangement);
};

const std::vector<Preset>& Presets() {
  static const auto* presets = new std::vector<Preset>{
      {"qwen3-next-80b-a3b",
       {"qwen/qwen3-next-80b-a3b-instruct", "qwen/qwen3-next-80b-a3b-thinking"},
       &Qwen3Next80B},
      {"nemotron-h-8b",
       {"nvidia/nemotron-h-8b-base-8k", "nvidia/nemotron-h-8b-reasoning-128k"},
       &NemotronH8B},
      {"jamba-v0.1", {"ai21labs/jamba-v0.1"}, &JambaV01},
  };
  return *presets;
}

}  // namespace

std::vector<std::string_view> LayoutPresetNames() {
  std::vector<std::string_view> names;
  for (const Preset& p : Presets()) names.push_back(p.name);
  return names;
}

absl::StatusOr<StateLayout> LayoutPreset(std::string_view model, int num_spec,
                                         Arrangement arrangement) {
  if (num_spec < 0 || num_spec > kMaxNumSpec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_spec: must be in 0..", kMaxNumSpec, ", got ", num_spec));
  }
  const std::string key = absl::AsciiStrToLower(Av(model));
  for (const Preset& p : Presets()) {
    bool match = key == p.name;
    for (std::string_view alias : p.aliases) match = match || key == alias;
    if (match) return p.make(num_spec, arrangement);
  }
  const std::vector<std::string_view> known = LayoutPresetNames();
  const std::vector<std::string> names(known.begin(), known.end());
  return absl::NotFoundError(absl::StrCat(
      "no layout preset for model \"", Av(model),
      "\" (known: ", absl::StrJoin(names, ", "), "; or pass a layout file)"));
}

}  // namespace statecache

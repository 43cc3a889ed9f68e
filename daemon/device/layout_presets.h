// Layout presets for real hybrid models, so `--model NAME` needs no layout
// file. Each preset's source comment cites the Hugging Face config fields its
// shapes come from.
//
// Conventions shared by every preset:
//   * Only the recurrent layers carry state; attention layers are skipped.
//   * The conv state is time-major, [conv_kernel - 1 + num_spec, conv_dim]
//     (the vLLM V1 layout): num_spec extra rows hold the inputs of the
//     speculative tokens a verify pass may roll back.
//   * dtype is the model's dtype (bf16), as vLLM's "auto" state dtypes
//     choose; a deployment that keeps the SSM state in f32 writes a layout
//     file instead.
//   * Slot-major unless the caller asks otherwise.
//
// Thread-safe: pure functions.
#ifndef STATECACHE_DAEMON_DEVICE_LAYOUT_PRESETS_H_
#define STATECACHE_DAEMON_DEVICE_LAYOUT_PRESETS_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "vocabulary/layout.h"

namespace statecache {

inline constexpr int kMaxNumSpec = 16;

// The canonical preset names, e.g. "qwen3-next-80b-a3b".
std::vector<std::string_view> LayoutPresetNames();

// The preset called `model`: a canonical name or its Hugging Face repo id
// (e.g. "Qwen/Qwen3-Next-80B-A3B-Instruct"), compared case-insensitively.
// The layout's name() is the canonical name.
// REQUIRES: 0 <= num_spec <= kMaxNumSpec.
// Errors: NOT_FOUND naming the known presets; INVALID_ARGUMENT for num_spec.
absl::StatusOr<StateLayout> LayoutPreset(
    std::string_view model, int num_spec = 0,
    Arrangement arrangement = Arrangement::kSlotMajor);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_DEVICE_LAYOUT_PRESETS_H_

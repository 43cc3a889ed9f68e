// Layout files: a StateLayout written as JSON, for models without a preset.
//
//   {
//     "format": "statecache-layout/v1",     optional; if present, exactly this
//     "name": "my-model",                   optional display name
//     "arrangement": "slot_major",          optional: slot_major (default) or
//                                           layer_major (the daemon's
//                                           --layer_major overrides it)
//     "num_layers": 36,                     state layers only
//     "tensors": [                          in order; the order is part of the
//       {"name": "conv", "dtype": "bf16",   fingerprint
//        "shape": [3, 8192]},
//       {"name": "ssm", "dtype": "bf16", "shape": [32, 128, 128]}
//     ]
//   }
//
// Strict: unknown keys, wrong types, non-integer numbers and missing required
// keys are refused, so a typo never silently becomes a default. Every error
// names the file and the JSON path of the bad field, e.g.
//   "qwen.json: tensors[1].shape[2]: must be >= 1, got 0".
//
// Thread-safe: pure functions.
#ifndef STATECACHE_DAEMON_DEVICE_LAYOUT_FILE_H_
#define STATECACHE_DAEMON_DEVICE_LAYOUT_FILE_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "vocabulary/layout.h"

namespace statecache {

// Parses the text of a layout file; `source` prefixes every error message.
// Errors: INVALID_ARGUMENT (malformed JSON, or a bad field, named).
absl::StatusOr<StateLayout> ParseLayoutJson(
    std::string_view text, std::string_view source = "layout file");

// Reads and parses the file at `path`.
// Errors: NOT_FOUND / PERMISSION_DENIED / INTERNAL when it cannot be read;
// otherwise as ParseLayoutJson.
absl::StatusOr<StateLayout> LoadLayoutFile(const std::string& path);

// The layout in the file format, "format" included (ParseLayoutJson of it
// gives an equal layout).
std::string LayoutToJson(const StateLayout& layout);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_DEVICE_LAYOUT_FILE_H_

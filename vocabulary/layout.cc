#include "vocabulary/layout.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace statecache {
namespace {

uint64_t RoundUp(uint64_t value, uint64_t to) {
  return (value + to - 1) / to * to;
}

bool ValidTensorName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string_view ArrangementName(Arrangement arrangement) {
  return arrangement == Arrangement::kSlotMajor ? "slot_major" : "layer_major";
}

absl::StatusOr<Arrangement> ParseArrangement(std::string_view name) {
  if (name == "slot_major") return Arrangement::kSlotMajor;
  if (name == "layer_major") return Arrangement::kLayerMajor;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown arrangement \"", std::string(name),
                   "\" (accepted: slot_major, layer_major)"));
}

absl::StatusOr<StateLayout> StateLayout::Create(
    std::string name, std::vector<StateTensorSpec> tensors, int64_t num_layers,
    Arrangement arrangement) {
  if (tensors.empty()) {
    return absl::InvalidArgumentError("tensors: a layout needs at least one");
  }
  if (tensors.size() > static_cast<size_t>(kMaxLayoutTensors)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensors: ", tensors.size(), " is more than ", kMaxLayoutTensors));
  }
  if (num_layers < 1 || num_layers > kMaxLayoutLayers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_layers: must be in 1..", kMaxLayoutLayers, ", got ", num_layers));
  }
  absl::flat_hash_set<std::string> names;
  uint64_t layer_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const StateTensorSpec& t = tensors[i];
    const std::string where = absl::StrCat("tensors[", i, "]");
    if (!ValidTensorName(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".name: \"", t.name,
                       "\" is not 1..64 characters of [A-Za-z0-9_.-]"));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".name: duplicate tensor name \"", t.name, "\""));
    }
    if (t.shape.empty() || t.shape.size() > kMaxTensorRank) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".shape: rank must be in 1..", kMaxTensorRank,
                       ", got ", t.shape.size()));
    }
    // Checked piece by piece against the slot limit, so no product overflows.
    uint64_t bytes = static_cast<uint64_t>(DTypeSize(t.dtype));
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".shape[", d, "]: must be >= 1, got ", t.shape[d]));
      }
      if (static_cast<uint64_t>(t.shape[d]) > kMaxBytesPerSlot ||
          bytes * static_cast<uint64_t>(t.shape[d]) > kMaxBytesPerSlot) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".shape: one piece exceeds ", kMaxBytesPerSlot, " bytes"));
      }
      bytes *= static_cast<uint64_t>(t.shape[d]);
    }
    layer_bytes += RoundUp(bytes, kLayoutAlignment);
  }
  if (layer_bytes * static_cast<uint64_t>(num_layers) > kMaxBytesPerSlot) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_layers: ", num_layers, " layers of ", layer_bytes,
        " bytes make a slot larger than ", kMaxBytesPerSlot, " bytes"));
  }
  StateLayout layout;
  layout.name_ = std::move(name);
  layout.tensors_ = std::move(tensors);
  layout.num_layers_ = num_layers;
  layout.arrangement_ = arrangement;
  layout.Compute();
  return layout;
}

void StateLayout::Compute() {
  piece_bytes_.clear();
  padded_piece_bytes_.clear();
  tensor_offset_in_layer_.clear();
  layer_bytes_ = 0;
  for (const StateTensorSpec& t : tensors_) {
    uint64_t bytes = static_cast<uint64_t>(DTypeSize(t.dtype));
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
    piece_bytes_.push_back(bytes);
    padded_piece_bytes_.push_back(RoundUp(bytes, kLayoutAlignment));
    tensor_offset_in_layer_.push_back(layer_bytes_);
    layer_bytes_ += padded_piece_bytes_.back();
  }
  fingerprint_ = Fnv1a64(CanonicalString());
}

StateLayout StateLayout::WithArrangement(Arrangement arrangement) const {
  StateLayout copy = *this;
  copy.arrangement_ = arrangement;
  copy.fingerprint_ = Fnv1a64(copy.CanonicalString());
  return copy;
}

int StateLayout::FindTensor(std::string_view name) const {
  for (int i = 0; i < num_tensors(); ++i) {
    if (tensors_[i].name == name) return i;
  }
  return -1;
}

uint64_t StateLayout::PieceOffset(int tensor, int64_t layer, int64_t slot,
                                  int64_t capacity) const {
  const uint64_t in_layer = static_cast<uint64_t>(layer) * layer_bytes_ +
                            tensor_offset_in_layer_[tensor];
  if (arrangement_ == Arrangement::kSlotMajor) {
    return static_cast<uint64_t>(slot) * bytes_per_slot() + in_layer;
  }
  // Block (layer, tensor) starts after every earlier block, each of which
  // holds `capacity` pieces: capacity * (bytes of one slot's earlier pieces).
  return static_cast<uint64_t>(capacity) * in_layer +
         static_cast<uint64_t>(slot) * padded_piece_bytes_[tensor];
}

TensorPlacement StateLayout::Place(int tensor, int64_t layer,
                                   int64_t capacity) const {
  TensorPlacement p;
  p.tensor = tensor;
  p.layer = layer;
  p.offset = PieceOffset(tensor, layer, 0, capacity);
  p.slot_stride = arrangement_ == Arrangement::kSlotMajor
                      ? bytes_per_slot()
                      : padded_piece_bytes_[tensor];
  p.bytes = piece_bytes_[tensor];
  p.padded_bytes = padded_piece_bytes_[tensor];
  const StateTensorSpec& spec = tensors_[tensor];
  p.strides.assign(spec.shape.size(), 0);
  uint64_t stride = static_cast<uint64_t>(DTypeSize(spec.dtype));
  for (size_t d = spec.shape.size(); d-- > 0;) {
    p.strides[d] = stride;
    stride *= static_cast<uint64_t>(spec.shape[d]);
  }
  return p;
}

std::vector<TensorPlacement> StateLayout::Placements(int64_t capacity) const {
  std::vector<TensorPlacement> all;
  all.reserve(static_cast<size_t>(num_layers_) * tensors_.size());
  for (int64_t layer = 0; layer < num_layers_; ++layer) {
    for (int tensor = 0; tensor < num_tensors(); ++tensor) {
      all.push_back(Place(tensor, layer, capacity));
    }
  }
  return all;
}

std::string StateLayout::CanonicalString() const {
  std::string out =
      absl::StrCat("statecache-layout/v1;align=", kLayoutAlignment,
                   ";arrangement=", std::string(ArrangementName(arrangement_)),
                   ";layers=", num_layers_, ";");
  for (const StateTensorSpec& t : tensors_) {
    absl::StrAppend(&out, "tensor=", t.name, ":",
                    std::string(DTypeName(t.dtype)), ":",
                    absl::StrJoin(t.shape, "x"), ";");
  }
  return out;
}

std::string StateLayout::FingerprintHex() const {
  return absl::StrFormat("%016x", fingerprint_);
}

std::string StateLayout::DebugString() const {
  std::string out = absl::StrFormat(
      "layout %s: %d layers, %s, %d bytes/slot, fingerprint %s",
      name_.empty() ? "(unnamed)" : name_, num_layers_,
      ArrangementName(arrangement_), bytes_per_slot(), FingerprintHex());
  for (int i = 0; i < num_tensors(); ++i) {
    absl::StrAppendFormat(&out, "\n  %s: %s [%s], %d bytes/layer (%d padded)",
                          tensors_[i].name, DTypeName(tensors_[i].dtype),
                          absl::StrJoin(tensors_[i].shape, ", "),
                          piece_bytes_[i], padded_piece_bytes_[i]);
  }
  return out;
}

}  // namespace statecache

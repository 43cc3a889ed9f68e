#include "client/state_memory.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/statecache/v1/statecache.pb.h"
#include "vocabulary/dtype.h"
#include "vocabulary/layout.h"

namespace statecache {

absl::StatusOr<RegionExport> RegionFromStateMemory(
    const std::string& serialized) {
  v1::StateMemory m;
  if (!m.ParseFromString(serialized)) {
    return absl::InvalidArgumentError("StateMemory does not parse");
  }
  std::vector<StateTensorSpec> tensors;
  for (const v1::StateTensor& t : m.tensors()) {
    absl::StatusOr<DType> dtype = ParseDType(t.dtype());
    if (!dtype.ok()) return dtype.status();
    tensors.push_back(StateTensorSpec{
        t.name(), std::vector<int64_t>(t.shape().begin(), t.shape().end()),
        *dtype});
  }
  absl::StatusOr<Arrangement> arrangement = ParseArrangement(m.arrangement());
  if (!arrangement.ok()) return arrangement.status();
  absl::StatusOr<StateLayout> layout = StateLayout::Create(
      m.layout_name(), std::move(tensors), m.num_layers(), *arrangement);
  if (!layout.ok()) return layout.status();
  RegionExport region;
  region.backend = m.backend();
  region.handle = m.handle();
  region.device_ordinal = m.device_ordinal();
  region.region_bytes = m.region_bytes();
  region.num_slots = m.num_slots();
  region.capacity_slots = m.capacity_slots();
  region.layout_fingerprint = m.layout_fingerprint();
  region.placements = layout->Placements(m.capacity_slots());
  if (layout->FingerprintHex() != m.layout_fingerprint()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StateMemory: fingerprint ", m.layout_fingerprint(),
        " does not match its layout (", layout->FingerprintHex(), ")"));
  }
  if (static_cast<int>(region.placements.size()) != m.placements_size()) {
    return absl::InvalidArgumentError("StateMemory: placements disagree");
  }
  for (int i = 0; i < m.placements_size(); ++i) {
    const v1::TensorPlacement& got = m.placements(i);
    const TensorPlacement& want = region.placements[i];
    if (got.tensor() != want.tensor || got.layer() != want.layer ||
        got.offset() != want.offset || got.slot_stride() != want.slot_stride ||
        got.bytes() != want.bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "StateMemory: placement ", i, " disagrees with the layout"));
    }
  }
  region.layout = *std::move(layout);
  return region;
}

}  // namespace statecache

// region_probe: a stand-in for a model runner in another process. It maps a
// host state region with HostRegion and obeys one command per stdin line,
// answering one line on stdout ("ok" or "error <what>"):
//
//   open <shm name> <layout json file> <num_slots> <capacity>
//   write <seed> <slot>...         fill every piece of each slot (padding
//                                  excluded) with the seed's pattern
//   verify <seed> <src>...         one <src> per slot of the region: slot s
//                                  must hold src's pattern (-1: all zeros)
//   remap <num_slots> <capacity>   follow a resize
//   create <prefix> <epoch>        be a daemon: create a 1-slot HostDevice
//                                  and answer "ok <shm name>" (the tests
//                                  then kill the probe to leave it stale)
//   quit
//
// Used by tests/device/host_device_test.cc.
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/device/host_device.h"
#include "daemon/device/host_region.h"
#include "daemon/device/layout_file.h"
#include "tests/device/pattern.h"

namespace statecache {
namespace {

RegionExport MakeExport(const std::string& name, const StateLayout& layout,
                        int64_t num_slots, int64_t capacity) {
  RegionExport region;
  region.backend = "host";
  region.handle = name;
  region.num_slots = num_slots;
  region.capacity_slots = capacity;
  region.region_bytes = layout.RegionBytes(capacity);
  region.layout = layout;
  region.layout_fingerprint = layout.FingerprintHex();
  region.placements = layout.Placements(capacity);
  return region;
}

std::string Verify(const HostRegion& region, uint64_t seed,
                   const std::vector<int64_t>& sources) {
  const StateLayout& layout = region.region().layout;
  if (static_cast<int64_t>(sources.size()) != region.region().num_slots) {
    return "error verify wants one source per slot";
  }
  for (int64_t slot = 0; slot < region.region().num_slots; ++slot) {
    const int64_t src = sources[slot];
    for (int64_t layer = 0; layer < layout.num_layers(); ++layer) {
      for (int t = 0; t < layout.num_tensors(); ++t) {
        // Padding included: copies move it, nobody writes it, so it is 0.
        const uint8_t* piece =
            reinterpret_cast<const uint8_t*>(region.Piece(t, layer, slot));
        const uint64_t bytes = layout.piece_bytes(t);
        for (uint64_t i = 0; i < layout.padded_piece_bytes(t); ++i) {
          const uint8_t want =
              src < 0 || i >= bytes
                  ? 0
                  : testing::PatternByte(seed, src, t, layer, i);
          if (piece[i] != want) {
            std::ostringstream out;
            out << "error mismatch slot " << slot << " tensor " << t
                << " layer " << layer << " byte " << i << ": got "
                << int{piece[i]} << " want " << int{want} << " (src " << src
                << ")";
            return out.str();
          }
        }
      }
    }
  }
  return "ok";
}

int Main() {
  std::optional<HostRegion> region;
  std::unique_ptr<HostDevice> device;
  std::optional<StateLayout> layout;
  std::string name;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    std::string reply = "ok";
    if (command == "quit") {
      std::cout << "ok" << std::endl;
      return 0;
    } else if (command == "open") {
      std::string file;
      int64_t num_slots = 0, capacity = 0;
      in >> name >> file >> num_slots >> capacity;
      absl::StatusOr<StateLayout> loaded = LoadLayoutFile(file);
      if (!loaded.ok()) {
        reply = "error " + std::string(loaded.status().message());
      } else {
        layout = *loaded;
        absl::StatusOr<HostRegion> opened =
            HostRegion::Open(MakeExport(name, *layout, num_slots, capacity));
        if (opened.ok()) {
          region.emplace(std::move(*opened));
        } else {
          reply = "error " + std::string(opened.status().message());
        }
      }
    } else if (command == "create") {
      HostDeviceOptions options;
      uint64_t epoch = 0;
      in >> options.prefix >> epoch;
      options.epoch = epoch;
      options.layout =
          *StateLayout::Create("probe", {{"x", {16}, DType::kF32}}, 1);
      options.num_slots = 1;
      absl::StatusOr<std::unique_ptr<HostDevice>> created =
          HostDevice::Create(options);
      if (created.ok()) {
        device = std::move(*created);
        reply = "ok " + device->shm_name();
      } else {
        reply = "error " + std::string(created.status().message());
      }
    } else if (!region.has_value()) {
      reply = "error not open";
    } else if (command == "write") {
      uint64_t seed = 0;
      in >> seed;
      int64_t slot;
      while (in >> slot) {
        for (int64_t l = 0; l < layout->num_layers(); ++l) {
          for (int t = 0; t < layout->num_tensors(); ++t) {
            absl::Span<uint8_t> piece = region->PieceBytes(t, l, slot);
            for (uint64_t i = 0; i < piece.size(); ++i) {
              piece[i] = testing::PatternByte(seed, slot, t, l, i);
            }
          }
        }
      }
    } else if (command == "verify") {
      uint64_t seed = 0;
      in >> seed;
      std::vector<int64_t> sources;
      int64_t src;
      while (in >> src) sources.push_back(src);
      reply = Verify(*region, seed, sources);
    } else if (command == "remap") {
      int64_t num_slots = 0, capacity = 0;
      in >> num_slots >> capacity;
      absl::Status s =
          region->Remap(MakeExport(name, *layout, num_slots, capacity));
      if (!s.ok()) reply = "error " + std::string(s.message());
    } else {
      reply = "error unknown command " + command;
    }
    std::cout << reply << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace statecache

int main() { return statecache::Main(); }

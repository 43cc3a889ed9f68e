// HostSlotMemory: a SlotMemory over a real HostDevice (shared memory), for
// tests of the verbs that move bytes (the host tier, warm restart), with
// a known byte pattern to write into slots and check them against.
#ifndef STATECACHE_TESTS_SERVICE_HOST_SLOT_MEMORY_H_
#define STATECACHE_TESTS_SERVICE_HOST_SLOT_MEMORY_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "daemon/core/slot_memory.h"
#include "daemon/device/fault_injecting_device.h"
#include "daemon/device/host_device.h"
#include "gtest/gtest.h"

namespace statecache {

inline constexpr int64_t kTestBlock = 16;

// Two tensors (bf16 and f32) of two layers.
inline StateLayout SmallTestLayout() {
  return *StateLayout::Create(
      "small", {{"conv", {3, 8}, DType::kBF16}, {"ssm", {2, 4}, DType::kF32}},
      2);
}
inline uint64_t SmallSlotBytes() { return SmallTestLayout().bytes_per_slot(); }

// The bytes a slot holds after Fill(slot, seed).
inline std::vector<char> SlotPattern(uint8_t seed) {
  std::vector<char> bytes(SmallSlotBytes());
  for (uint64_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>(seed + i * 7 + (i >> 8));
  }
  return bytes;
}

struct HostSlotMemory {
  // `prefix` names the shared-memory object (unique per test); a faulty
  // one wraps the device in a FaultInjectingDevice (`faults`).
  HostSlotMemory(int64_t num_slots, const std::string& prefix,
                 uint64_t tier_slots = 0, bool faulty = false) {
    HostDeviceOptions options;
    options.layout = SmallTestLayout();
    options.num_slots = num_slots;
    options.max_slots = 4 * num_slots;
    options.epoch = NewTestEpoch();
    options.prefix = prefix;
    auto created = HostDevice::Create(options);
    EXPECT_TRUE(created.ok()) << created.status();
    host = std::move(*created).release();
    std::shared_ptr<Device> device(host);
    if (faulty) {
      faults = std::make_shared<FaultInjectingDevice>(device);
      device = faults;
    }
    memory.emplace(*SlotMemory::Create(
        num_slots, *StateTransfer::Create(TransferKind::kFork, 1, true),
        kTestBlock, device));
    if (tier_slots > 0) {
      EXPECT_TRUE(memory->ResizeHostTier(tier_slots * SlotBytes()).ok());
    }
  }
  static uint64_t NewTestEpoch() {
    static uint64_t n = 0;
    return static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) + ++n;
  }
  uint64_t SlotBytes() const { return host->layout().bytes_per_slot(); }
  char* SlotData(int64_t slot) const {
    return host->base() + slot * SlotBytes();
  }
  void Fill(int64_t slot, uint8_t seed) const {
    const std::vector<char> bytes = SlotPattern(seed);
    std::memcpy(SlotData(slot), bytes.data(), bytes.size());
  }
  bool Holds(int64_t slot, uint8_t seed) const {
    return std::memcmp(SlotData(slot), SlotPattern(seed).data(), SlotBytes()) ==
           0;
  }
  std::vector<char> Bytes(int64_t slot) const {
    return std::vector<char>(SlotData(slot), SlotData(slot) + SlotBytes());
  }

  // Files a checkpoint of `seed`'s bytes under hashes[blocks - 1] through
  // a request's fork checkpoint at `anchor_pos` (the prompt's end at
  // blocks * kTestBlock: a checkpoint, not a guess), then lets it go back
  // to the pool's LRU. Returns its slot.
  int64_t PublishCheckpoint(const std::vector<int64_t>& hashes, int64_t blocks,
                            uint8_t seed, int64_t anchor_pos = 0) {
    SlotHolding holding;
    AdmitSpec spec;
    spec.num_tokens = static_cast<int64_t>(hashes.size()) * kTestBlock + 8;
    spec.block_hashes = hashes;
    EXPECT_TRUE(memory->Admit(holding, spec).ok());
    Fill(holding.slots[0], seed);
    absl::StatusOr<CheckpointOutcome> out = memory->Checkpoint(
        holding, anchor_pos != 0 ? anchor_pos : blocks * kTestBlock, blocks,
        hashes[blocks - 1]);
    EXPECT_TRUE(out.ok() && out->kept);
    const int64_t slot = out->fork_src;
    EXPECT_TRUE(memory->ReturnPins(slot, 1).ok());
    EXPECT_TRUE(memory->Release(holding, /*drop_reader=*/false).ok());
    return slot;
  }

  HostDevice* host = nullptr;  // owned by the device chain
  std::shared_ptr<FaultInjectingDevice> faults;
  std::optional<SlotMemory> memory;
};

// An admission of `width` slots with `hashes`, `kv_hit` of them held by
// the KV cache.
inline AdmitSpec TestSpec(const std::vector<int64_t>& hashes, int32_t kv_hit,
                          int32_t width = 1) {
  AdmitSpec spec;
  spec.width = width;
  spec.num_tokens = static_cast<int64_t>(hashes.size()) * kTestBlock + 8;
  spec.kv_hit_blocks = kv_hit;
  spec.block_hashes = hashes;
  return spec;
}

}  // namespace statecache

#endif  // STATECACHE_TESTS_SERVICE_HOST_SLOT_MEMORY_H_

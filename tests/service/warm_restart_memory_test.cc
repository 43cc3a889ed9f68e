// SlotMemory's warm restart against real (host) state memory: checkpoints
// published with known bytes are sealed, saved and read out; a fresh
// SlotMemory on another HostDevice restores them in their LRU order and
// marks, byte for byte, into slots 0..; a checkpoint whose bytes do not match
// its checksum is never indexed, on the device or in the host tier, and a
// tier image corrupted after its demotion is never promoted.
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "daemon/common/checksum.h"
#include "daemon/core/slot_memory.h"
#include "daemon/device/host_device.h"
#include "gtest/gtest.h"
#include "tests/service/host_slot_memory.h"

namespace statecache {

void PrintTo(const SlotMemory::SavedCheckpoint& c, std::ostream* os) {
  *os << "{hash " << c.hash << " at " << c.location
      << (c.speculative ? " speculative" : "") << " sum " << c.checksum << "}";
}
void PrintTo(const SlotMemory::RestoreCounts& c, std::ostream* os) {
  *os << "{device " << c.device << " tier " << c.tier << " bad_checksum "
      << c.bad_checksum << " no_room " << c.no_room << " duplicate "
      << c.duplicate << "}";
}

namespace {

constexpr int64_t kBlock = kTestBlock;
using Saved = std::vector<SlotMemory::SavedCheckpoint>;
using V = std::vector<int64_t>;

uint64_t SlotBytes() { return SmallSlotBytes(); }
std::vector<char> Pattern(uint8_t seed) { return SlotPattern(seed); }
uint64_t SumOf(uint8_t seed) {
  const std::vector<char> bytes = Pattern(seed);
  return Checksum(bytes.data(), bytes.size());
}

using Memory = HostSlotMemory;

AdmitSpec Spec(const std::vector<int64_t>& hashes, int32_t kv_hit,
               int32_t width = 1) {
  return TestSpec(hashes, kv_hit, width);
}

// Files a one-block checkpoint of `seed`'s bytes under `hash` through a
// request's fork checkpoint (a guess when `speculative`: its boundary is not
// the anchor), then lets it go back to the pool's LRU. Not sealed.
int64_t Publish(Memory& m, int64_t hash, uint8_t seed,
                bool speculative = false) {
  return m.PublishCheckpoint({hash}, 1, seed, speculative ? 2 * kBlock : 0);
}

// Admits and releases `n` cold requests of one slot each, spending the LRU
// (into the tier, when on), the engine writing each slot it was given.
void Churn(Memory& m, int n, uint8_t seed) {
  std::vector<SlotHolding> holdings(n);
  for (SlotHolding& h : holdings) {
    ASSERT_TRUE(m.memory->Admit(h, Spec({}, 0)).ok());
  }
  ASSERT_TRUE(m.memory->FlushDemotions().ok());
  ASSERT_TRUE(m.memory->SealCheckpoints().ok());
  for (SlotHolding& h : holdings) m.Fill(h.slots[0], seed);
  for (SlotHolding& h : holdings) {
    ASSERT_TRUE(m.memory->Release(h, false).ok());
  }
}

// The images of `saved`, packed in order, as the state directory keeps
// them (copied out of the staging memory, so they outlive it).
struct Images {
  Saved saved;
  std::vector<char> bytes;
  std::vector<SlotMemory::RestoreImage> Restore() const {
    std::vector<SlotMemory::RestoreImage> out;
    for (size_t k = 0; k < saved.size(); ++k) {
      out.push_back({saved[k], bytes.data() + k * SlotBytes()});
    }
    return out;
  }
  char* Image(size_t k) { return bytes.data() + k * SlotBytes(); }
};
Images DeviceImages(Memory& m) {
  Images images;
  images.saved = m.memory->SaveCheckpoints().device;
  absl::StatusOr<std::unique_ptr<HostStaging>> staging =
      m.memory->ReadCheckpointImages(images.saved);
  EXPECT_TRUE(staging.ok()) << staging.status();
  if (staging.ok()) {
    images.bytes.assign((*staging)->data(),
                        (*staging)->data() + images.saved.size() * SlotBytes());
  }
  return images;
}
Images TierImages(const Memory& m) {
  Images images;
  images.saved = m.memory->SaveCheckpoints().tier;
  const HostStaging* tier = m.memory->host_tier_memory();
  for (const SlotMemory::SavedCheckpoint& c : images.saved) {
    const char* image = tier->data() + c.location * SlotBytes();
    images.bytes.insert(images.bytes.end(), image, image + SlotBytes());
  }
  return images;
}

// Four sealed checkpoints: 11 (seed 10) in slot 0, 12 (20, a guess) in 1,
// 13 (30) in 2, 14 (40, a guess) in 3. LRU: 14 12 11 13 (guesses at the
// head, the latest first).
void PublishFour(Memory& m) {
  ASSERT_TRUE(m.memory->EnableChecksums().ok());
  EXPECT_EQ(Publish(m, 11, 10), 0);
  EXPECT_EQ(Publish(m, 12, 20, /*speculative=*/true), 1);
  EXPECT_EQ(Publish(m, 13, 30), 2);
  ASSERT_TRUE(m.memory->SealCheckpoints().ok());
  EXPECT_EQ(Publish(m, 14, 40, true), 3);
  ASSERT_TRUE(m.memory->SealCheckpoints().ok());
  ASSERT_EQ(m.memory->pool().Dump().checkpointed, (V{3, 1, 0, 2}));
  ASSERT_EQ(m.memory->pool().Dump().speculative, (V{1, 3}));
}

const Saved kFourSaved = {{14, 3, true, SumOf(40)},
                          {12, 1, true, SumOf(20)},
                          {11, 0, false, SumOf(10)},
                          {13, 2, false, SumOf(30)}};

TEST(WarmRestartMemoryTest, OnlySealedCheckpointsAreSavedWithTheirChecksums) {
  Memory m(8, "wr_seal");
  // Without checksums nothing is vouched for, so nothing is saved.
  Publish(m, 7, 1);
  EXPECT_TRUE(m.memory->SaveCheckpoints().device.empty());
  // Enabling seals what is filed already, from its bytes now.
  ASSERT_TRUE(m.memory->EnableChecksums().ok());
  EXPECT_TRUE(m.memory->checksums_enabled());
  EXPECT_EQ(m.memory->SaveCheckpoints().device,
            (Saved{{7, 0, false, SumOf(1)}}));
  // A checkpoint published since is saved only once sealed.
  Publish(m, 8, 2);
  EXPECT_EQ(m.memory->SaveCheckpoints().device.size(), 1u);
  ASSERT_TRUE(m.memory->SealCheckpoints().ok());
  EXPECT_EQ(m.memory->SaveCheckpoints().device,
            (Saved{{7, 0, false, SumOf(1)}, {8, 1, false, SumOf(2)}}));
  // Checksums need state memory.
  SlotMemory bare = *SlotMemory::Create(
      4, *StateTransfer::Create(TransferKind::kFork, 1, true), kBlock, nullptr);
  EXPECT_EQ(bare.EnableChecksums().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(WarmRestartMemoryTest, RestoreBringsTheCheckpointsBackInOrderByteForByte) {
  Memory a(8, "wr_save");
  PublishFour(a);
  EXPECT_EQ(a.memory->SaveCheckpoints().device, kFourSaved);
  Images images = DeviceImages(a);
  ASSERT_EQ(images.saved, kFourSaved);  // all intact: none dropped
  for (size_t k = 0; k < 4; ++k) {
    const uint8_t seed = std::vector<uint8_t>{40, 20, 10, 30}[k];
    EXPECT_EQ(std::memcmp(images.Image(k), Pattern(seed).data(), SlotBytes()),
              0)
        << k;
  }

  Memory b(8, "wr_restore");
  absl::StatusOr<SlotMemory::RestoreCounts> counts =
      b.memory->Restore(images.Restore(), {});
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(*counts, (SlotMemory::RestoreCounts{.device = 4}));
  const PoolSnapshot dump = b.memory->pool().Dump();
  EXPECT_EQ(dump.checkpointed, (V{0, 1, 2, 3}));  // the saved LRU, in 0..3
  EXPECT_EQ(dump.speculative, (V{0, 1}));         // 14 and 12
  EXPECT_EQ(*b.memory->Lookup(14), 0);
  EXPECT_EQ(*b.memory->Lookup(12), 1);
  EXPECT_EQ(*b.memory->Lookup(11), 2);
  EXPECT_EQ(*b.memory->Lookup(13), 3);
  EXPECT_TRUE(b.Holds(0, 40));
  EXPECT_TRUE(b.Holds(1, 20));
  EXPECT_TRUE(b.Holds(2, 10));
  EXPECT_TRUE(b.Holds(3, 30));
  EXPECT_EQ(dump.fates, CheckpointFates{});
  EXPECT_TRUE(b.memory->pool().CheckInvariants().ok());
  // Checksums are on, and the restored ones are saved again as they were.
  EXPECT_TRUE(b.memory->checksums_enabled());
  EXPECT_EQ(b.memory->SaveCheckpoints().device,
            (Saved{{14, 0, true, SumOf(40)},
                   {12, 1, true, SumOf(20)},
                   {11, 2, false, SumOf(10)},
                   {13, 3, false, SumOf(30)}}));
  // A resume forks from a restored checkpoint, reading its bytes.
  const std::vector<int64_t> prompt = {13};
  SlotHolding holding;
  absl::StatusOr<Admission> admitted =
      b.memory->Admit(holding, Spec(prompt, 1));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->outcome, ResumeOutcome::kFork);
  EXPECT_EQ(holding.fork_src, 3);
  EXPECT_TRUE(b.Holds(holding.fork_src, 30));
  // The restored LRU is spent in the saved order: slots 4..7 are vacant
  // and go first (one of them to `holding`), then 14, then 12.
  SlotHolding more[5];
  for (SlotHolding& h : more) {
    ASSERT_TRUE(b.memory->Admit(h, Spec({}, 0)).ok());
  }
  EXPECT_EQ(*b.memory->Lookup(14), -1);
  EXPECT_EQ(*b.memory->Lookup(12), -1);
  EXPECT_EQ(*b.memory->Lookup(11), 2);
}

TEST(WarmRestartMemoryTest, ACorruptedImageIsCountedAndNeverIndexed) {
  Memory a(8, "wr_bad");
  PublishFour(a);
  Images images = DeviceImages(a);
  ASSERT_EQ(images.saved.size(), 4u);
  images.Image(1)[SlotBytes() - 1] ^= 0x01;  // 12's last byte
  images.saved[3].checksum ^= 1;             // 13's record

  Memory b(8, "wr_bad_restore");
  absl::StatusOr<SlotMemory::RestoreCounts> counts =
      b.memory->Restore(images.Restore(), {});
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(*counts,
            (SlotMemory::RestoreCounts{.device = 2, .bad_checksum = 2}));
  EXPECT_EQ(*b.memory->Lookup(12), -1);
  EXPECT_EQ(*b.memory->Lookup(13), -1);
  // The good ones fill slots 0.. in their order.
  EXPECT_EQ(b.memory->pool().Dump().checkpointed, (V{0, 1}));
  EXPECT_EQ(b.memory->pool().Dump().speculative, (V{0}));
  EXPECT_EQ(*b.memory->Lookup(14), 0);
  EXPECT_EQ(*b.memory->Lookup(11), 1);
  EXPECT_TRUE(b.Holds(0, 40));
  EXPECT_TRUE(b.Holds(1, 10));
  // A resume of a dropped one is a miss.
  const std::vector<int64_t> prompt = {12};
  SlotHolding holding;
  EXPECT_EQ(b.memory->Admit(holding, Spec(prompt, 1))->outcome,
            ResumeOutcome::kMiss);
}

TEST(WarmRestartMemoryTest, MoreCheckpointsThanSlotsKeepsTheMostRecent) {
  Memory a(8, "wr_room");
  PublishFour(a);
  const Images images = DeviceImages(a);
  {
    Memory b(2, "wr_room_two");
    absl::StatusOr<SlotMemory::RestoreCounts> counts =
        b.memory->Restore(images.Restore(), {});
    ASSERT_TRUE(counts.ok()) << counts.status();
    EXPECT_EQ(*counts, (SlotMemory::RestoreCounts{.device = 2, .no_room = 2}));
    // The LRU's tail end: 11 then 13.
    EXPECT_EQ(b.memory->pool().Dump().checkpointed, (V{0, 1}));
    EXPECT_TRUE(b.memory->pool().Dump().speculative.empty());
    EXPECT_EQ(*b.memory->Lookup(11), 0);
    EXPECT_EQ(*b.memory->Lookup(13), 1);
    EXPECT_EQ(*b.memory->Lookup(14), -1);
    EXPECT_EQ(*b.memory->Lookup(12), -1);
    EXPECT_TRUE(b.Holds(0, 10));
    EXPECT_TRUE(b.Holds(1, 30));
  }
  {
    // A bad image is dropped before the room is counted: the most recent
    // good ones fill the room.
    Images bent = images;
    bent.Image(3)[0] ^= 0x20;  // 13
    Memory b(2, "wr_room_bad");
    absl::StatusOr<SlotMemory::RestoreCounts> counts =
        b.memory->Restore(bent.Restore(), {});
    ASSERT_TRUE(counts.ok()) << counts.status();
    EXPECT_EQ(*counts, (SlotMemory::RestoreCounts{
                           .device = 2, .bad_checksum = 1, .no_room = 1}));
    EXPECT_EQ(*b.memory->Lookup(12), 0);
    EXPECT_EQ(*b.memory->Lookup(11), 1);
    EXPECT_TRUE(b.Holds(0, 20));
    EXPECT_TRUE(b.Holds(1, 10));
  }
  {
    // The same hash twice: the later record wins, counted a duplicate.
    Images twice;
    twice.saved = {{5, 0, false, SumOf(1)}, {5, 1, true, SumOf(2)}};
    twice.bytes = Pattern(1);
    const std::vector<char> second = Pattern(2);
    twice.bytes.insert(twice.bytes.end(), second.begin(), second.end());
    Memory b(4, "wr_twice");
    absl::StatusOr<SlotMemory::RestoreCounts> counts =
        b.memory->Restore(twice.Restore(), {});
    ASSERT_TRUE(counts.ok()) << counts.status();
    EXPECT_EQ(*counts,
              (SlotMemory::RestoreCounts{.device = 1, .duplicate = 1}));
    EXPECT_EQ(*b.memory->Lookup(5), 0);
    EXPECT_TRUE(b.Holds(0, 2));
    EXPECT_EQ(b.memory->pool().Dump().speculative, (V{0}));
  }
}

TEST(WarmRestartMemoryTest, TierEntriesComeBackIntoTheTierWithTheirBytes) {
  Memory a(4, "wr_tier", /*tier_slots=*/4);
  ASSERT_TRUE(a.memory->EnableChecksums().ok());
  Publish(a, 21, 1);
  Publish(a, 22, 2);
  ASSERT_TRUE(a.memory->SealCheckpoints().ok());
  Churn(a, 4, 9);  // both spent into the tier, 21 first
  ASSERT_EQ(a.memory->HostTierDump(), (V{21, 22}));
  ASSERT_EQ(*a.memory->Lookup(21), -1);
  Publish(a, 23, 3);  // and one on the device
  ASSERT_TRUE(a.memory->SealCheckpoints().ok());
  const SlotMemory::Saved saved = a.memory->SaveCheckpoints();
  ASSERT_EQ(saved.tier.size(), 2u);
  EXPECT_EQ(saved.tier[0].hash, 21);
  EXPECT_EQ(saved.tier[0].checksum, SumOf(1));
  EXPECT_EQ(saved.tier[1].hash, 22);
  EXPECT_EQ(saved.tier[1].checksum, SumOf(2));
  EXPECT_NE(saved.tier[0].location, saved.tier[1].location);
  const Images tier = TierImages(a);
  const Images device = DeviceImages(a);
  ASSERT_EQ(device.saved.size(), 1u);
  EXPECT_EQ(device.saved[0].hash, 23);

  Memory b(4, "wr_tier_back", 4);
  absl::StatusOr<SlotMemory::RestoreCounts> counts =
      b.memory->Restore(device.Restore(), tier.Restore());
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(*counts, (SlotMemory::RestoreCounts{.device = 1, .tier = 2}));
  EXPECT_EQ(b.memory->HostTierDump(), (V{21, 22}));
  EXPECT_TRUE(b.memory->InHostTier(21));
  EXPECT_EQ(b.memory->host_tier_stats().counts.restored, 2);
  EXPECT_EQ(b.memory->host_tier_stats().counts.demotions, 0);
  EXPECT_EQ(*b.memory->Lookup(23), 0);
  EXPECT_TRUE(b.Holds(0, 3));
  // The tier's own save is the restored one (checksums kept).
  const Saved again = b.memory->SaveCheckpoints().tier;
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].checksum, SumOf(1));
  EXPECT_EQ(again[1].checksum, SumOf(2));
  // A resume promotes from the restored tier, byte for byte.
  const std::vector<int64_t> prompt = {21};
  SlotHolding holding;
  absl::StatusOr<Admission> admitted =
      b.memory->Admit(holding, Spec(prompt, 1));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->outcome, ResumeOutcome::kTier);
  EXPECT_TRUE(b.Holds(holding.slots[0], 1));

  {
    // A smaller tier keeps the most recent; a corrupted image is dropped.
    Memory c(4, "wr_tier_small", 1);
    counts = c.memory->Restore({}, tier.Restore());
    ASSERT_TRUE(counts.ok());
    EXPECT_EQ(*counts, (SlotMemory::RestoreCounts{.tier = 1, .no_room = 1}));
    EXPECT_EQ(c.memory->HostTierDump(), (V{22}));
    Images bent = tier;
    bent.Image(1)[5] ^= 0x10;  // 22
    Memory d(4, "wr_tier_bent", 4);
    counts = d.memory->Restore({}, bent.Restore());
    ASSERT_TRUE(counts.ok());
    EXPECT_EQ(*counts,
              (SlotMemory::RestoreCounts{.tier = 1, .bad_checksum = 1}));
    EXPECT_EQ(d.memory->HostTierDump(), (V{21}));
    EXPECT_FALSE(d.memory->InHostTier(22));
    // With the tier off, tier images have no room at all.
    Memory e(4, "wr_tier_off");
    counts = e.memory->Restore({}, tier.Restore());
    ASSERT_TRUE(counts.ok());
    EXPECT_EQ(*counts, (SlotMemory::RestoreCounts{.no_room = 2}));
    EXPECT_TRUE(e.memory->HostTierDump().empty());
  }
}

TEST(WarmRestartMemoryTest, RestoreIntoAMemoryInUseChangesNothing) {
  Memory a(8, "wr_used");
  PublishFour(a);
  const Images images = DeviceImages(a);
  const std::vector<SlotMemory::RestoreImage> restore = images.Restore();

  {  // A checkpoint filed.
    Memory b(8, "wr_used_ckpt");
    Publish(b, 99, 77);
    const PoolSnapshot before = b.memory->pool().Dump();
    EXPECT_EQ(b.memory->Restore(restore, {}).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(b.memory->pool().Dump(), before);
    EXPECT_TRUE(b.Holds(0, 77));
    EXPECT_EQ(*b.memory->Lookup(14), -1);
  }
  {  // A live request only, in slot 0.
    Memory b(8, "wr_used_live");
    SlotHolding holding;
    ASSERT_TRUE(b.memory->Admit(holding, Spec({}, 0)).ok());
    ASSERT_EQ(holding.slots[0], 0);
    b.Fill(0, 55);
    const PoolSnapshot before = b.memory->pool().Dump();
    EXPECT_EQ(b.memory->Restore(restore, {}).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(b.memory->pool().Dump(), before);
    EXPECT_TRUE(b.Holds(0, 55));  // its bytes not overwritten
    EXPECT_EQ(b.memory->NumOwned(), 1);
    EXPECT_FALSE(b.memory->checksums_enabled());
  }
  {  // Only a tier entry.
    Memory b(4, "wr_used_tier", 4);
    Publish(b, 98, 66);
    Churn(b, 4, 1);
    ASSERT_EQ(b.memory->HostTierDump(), (V{98}));
    ASSERT_EQ(b.memory->pool().NumIndexed(), 0);
    const PoolSnapshot before = b.memory->pool().Dump();
    EXPECT_EQ(b.memory->Restore(restore, {}).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(b.memory->pool().Dump(), before);
    EXPECT_EQ(b.memory->HostTierDump(), (V{98}));
  }
  {  // Bad arguments: nothing filed, nothing written.
    Memory b(8, "wr_bad_args");
    b.Fill(0, 44);
    std::vector<SlotMemory::RestoreImage> bad = restore;
    bad[2].bytes = nullptr;
    EXPECT_EQ(b.memory->Restore(bad, {}).status().code(),
              absl::StatusCode::kInvalidArgument);
    bad = restore;
    bad[3].saved.hash = -4;
    EXPECT_EQ(b.memory->Restore({}, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(b.memory->pool().NumIndexed(), 0);
    EXPECT_TRUE(b.Holds(0, 44));
    // And then it restores.
    absl::StatusOr<SlotMemory::RestoreCounts> counts =
        b.memory->Restore(restore, {});
    ASSERT_TRUE(counts.ok()) << counts.status();
    EXPECT_EQ(counts->device, 4);
  }
  {  // No state memory.
    SlotMemory bare = *SlotMemory::Create(
        4, *StateTransfer::Create(TransferKind::kFork, 1, true), kBlock,
        nullptr);
    EXPECT_EQ(bare.Restore(restore, {}).status().code(),
              absl::StatusCode::kFailedPrecondition);
    std::vector<SlotMemory::SavedCheckpoint> none;
    EXPECT_EQ(bare.ReadCheckpointImages(none).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

TEST(WarmRestartMemoryTest, ReadingImagesDropsASlotWrittenAfterItWasSealed) {
  Memory a(8, "wr_stale");
  PublishFour(a);
  Saved saved = a.memory->SaveCheckpoints().device;
  ASSERT_EQ(saved, kFourSaved);
  // A stray write into 12's slot (1), one byte at its end.
  a.SlotData(1)[SlotBytes() - 1] ^= 0x04;
  absl::StatusOr<std::unique_ptr<HostStaging>> staging =
      a.memory->ReadCheckpointImages(saved);
  ASSERT_TRUE(staging.ok()) << staging.status();
  EXPECT_EQ(saved, (Saved{kFourSaved[0], kFourSaved[2], kFourSaved[3]}));
  // The images that remain are packed in order: 14, 11, 13.
  const char* data = (*staging)->data();
  EXPECT_EQ(std::memcmp(data, Pattern(40).data(), SlotBytes()), 0);
  EXPECT_EQ(std::memcmp(data + SlotBytes(), Pattern(10).data(), SlotBytes()),
            0);
  EXPECT_EQ(
      std::memcmp(data + 2 * SlotBytes(), Pattern(30).data(), SlotBytes()), 0);
  // Nothing saved: a valid (empty) result.
  Saved none;
  EXPECT_TRUE(a.memory->ReadCheckpointImages(none).ok());
  EXPECT_TRUE(none.empty());
}

TEST(WarmRestartMemoryTest, ATierImageCorruptedAfterDemotionIsAMissAndErased) {
  Memory m(4, "wr_tier_rot", /*tier_slots=*/4);
  ASSERT_TRUE(m.memory->EnableChecksums().ok());
  Publish(m, 31, 5);
  Publish(m, 32, 6);
  ASSERT_TRUE(m.memory->SealCheckpoints().ok());
  Churn(m, 4, 9);
  ASSERT_EQ(m.memory->HostTierDump(), (V{31, 32}));
  const Saved tier = m.memory->SaveCheckpoints().tier;
  ASSERT_EQ(tier.size(), 2u);
  ASSERT_EQ(tier[0].hash, 31);
  // A stray write into 31's image in the tier's memory.
  m.memory->host_tier_memory()->data()[tier[0].location * SlotBytes() + 3] ^=
      0x40;

  std::vector<std::vector<char>> before;
  for (int64_t slot = 0; slot < 4; ++slot) before.push_back(m.Bytes(slot));

  const std::vector<int64_t> rotten = {31};
  SlotHolding a;
  absl::StatusOr<Admission> admitted = m.memory->Admit(a, Spec(rotten, 1));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->outcome, ResumeOutcome::kMiss);
  EXPECT_EQ(admitted->blocks_resumed, 0);
  // Nothing was copied into the committed slot.
  EXPECT_EQ(m.Bytes(a.slots[0]), before[a.slots[0]]);
  EXPECT_FALSE(m.memory->InHostTier(31));
  EXPECT_EQ(m.memory->HostTierDump(), (V{32}));
  EXPECT_EQ(m.memory->host_tier_stats().promotions_failed, 1);
  EXPECT_EQ(m.memory->host_tier_stats().promotions, 0);
  // And it is not saved any more.
  EXPECT_EQ(m.memory->SaveCheckpoints().tier.size(), 1u);
  // The intact one still promotes.
  const std::vector<int64_t> intact = {32};
  SlotHolding b;
  admitted = m.memory->Admit(b, Spec(intact, 1));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->outcome, ResumeOutcome::kTier);
  EXPECT_TRUE(m.Holds(b.slots[0], 6));
  EXPECT_EQ(m.memory->host_tier_stats().promotions, 1);
}

// Restore's precondition ("nothing held or filed yet") covers a slot still
// pinned for a reader whose checkpoint was unindexed and whose holder went:
// it is refused before anything is written, not left half restored.
TEST(WarmRestartMemoryTest, ARestoreOverAPinnedSlotIsRefusedUpFront) {
  Memory a(8, "wr_pinned_src");
  PublishFour(a);
  const Images images = DeviceImages(a);

  Memory b(8, "wr_pinned");
  SlotHolding first, second;
  ASSERT_TRUE(b.memory->Admit(first, Spec({}, 0)).ok());
  ASSERT_TRUE(b.memory->Admit(second, Spec({}, 0)).ok());
  ASSERT_EQ(second.slots[0], 1);
  b.Fill(1, 88);
  // Slot 1 becomes a fork source (pinned for second's next forward)...
  absl::StatusOr<CheckpointOutcome> forked =
      b.memory->Checkpoint(second, kBlock, 1, 500);
  ASSERT_TRUE(forked.ok() && forked->kept);
  ASSERT_EQ(forked->fork_src, 1);
  // ...its KV block dies (unindexed), and both requests go; the pin stays
  // on the caller's clock until its next tick.
  const std::vector<int64_t> dead = {500};
  ASSERT_EQ(*b.memory->Unindex(dead), 1);
  ASSERT_TRUE(b.memory->Release(first, /*drop_reader=*/false).ok());
  ASSERT_TRUE(b.memory->Release(second, /*drop_reader=*/false).ok());
  ASSERT_TRUE(*b.memory->pool().IsPinned(1));
  ASSERT_EQ(b.memory->pool().NumIndexed(), 0);
  ASSERT_EQ(b.memory->NumOwned(), 0);
  const PoolSnapshot before = b.memory->pool().Dump();

  const absl::StatusOr<SlotMemory::RestoreCounts> counts =
      b.memory->Restore(images.Restore(), {});
  EXPECT_EQ(counts.status().code(), absl::StatusCode::kFailedPrecondition)
      << counts.status();
  EXPECT_EQ(b.memory->pool().Dump(), before);
  EXPECT_TRUE(b.Holds(1, 88)) << "the pinned slot's bytes were overwritten";
  EXPECT_EQ(*b.memory->Lookup(14), -1) << "a partial restore was filed";
}

}  // namespace
}  // namespace statecache

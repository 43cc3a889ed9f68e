// SlotMemory's host tier against real (host) state memory: a checkpoint the
// pool spends is copied out before its slot is written and copied back, byte
// for byte, into the committed slot of an admission that resumes from it;
// the device pool's own decisions stay the reference's; a failed copy never
// leaves an image that could be served.
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/core/slot_memory.h"
#include "daemon/device/fault_injecting_device.h"
#include "daemon/device/host_device.h"
#include "gtest/gtest.h"
#include "tests/service/host_slot_memory.h"

namespace statecache {
namespace {

constexpr int64_t kBlock = kTestBlock;

using Memory = HostSlotMemory;

AdmitSpec Spec(const std::vector<int64_t>& hashes, int32_t kv_hit,
               int32_t width = 1) {
  return TestSpec(hashes, kv_hit, width);
}

int64_t PublishCheckpoint(Memory& m, const std::vector<int64_t>& hashes,
                          int64_t blocks, uint8_t seed) {
  return m.PublishCheckpoint(hashes, blocks, seed);
}

// Admits and releases `n` cold requests of one slot each, spending the LRU.
void Churn(Memory& m, int n, uint8_t seed) {
  std::vector<SlotHolding> holdings(n);
  for (SlotHolding& h : holdings) {
    ASSERT_TRUE(m.memory->Admit(h, Spec({}, 0)).ok());
  }
  // What the engine does after the reply: overwrite the slots it was given.
  ASSERT_TRUE(m.memory->FlushDemotions().ok());
  for (SlotHolding& h : holdings) m.Fill(h.slots[0], seed);
  for (SlotHolding& h : holdings) {
    ASSERT_TRUE(m.memory->Release(h, false).ok());
  }
}

TEST(HostTierMemoryTest, AnEvictedCheckpointResumesFromTheTierByteForByte) {
  Memory m(/*num_slots=*/4, "tier_bytes", /*tier_slots=*/4);
  const std::vector<int64_t> hashes = {101, 102, 103};
  PublishCheckpoint(m, hashes, 3, /*seed=*/42);
  ASSERT_GE(*m.memory->Lookup(103), 0);
  Churn(m, 4, /*seed=*/9);  // every slot written: the checkpoint is gone
  ASSERT_EQ(*m.memory->Lookup(103), -1);
  EXPECT_TRUE(m.memory->InHostTier(103));
  EXPECT_EQ(m.memory->pool().Fates().evicted, 1);

  const SlotMemory::Resumable where =
      *m.memory->ResumableHit(hashes.size() * kBlock + 8, 3, hashes, false);
  EXPECT_EQ(where.blocks, 0);
  EXPECT_EQ(where.tier_blocks, 3);

  SlotHolding resumed;
  absl::StatusOr<Admission> admitted =
      m.memory->Admit(resumed, Spec(hashes, 3, /*width=*/2));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->outcome, ResumeOutcome::kTier);
  EXPECT_EQ(admitted->blocks_resumed, 3);
  EXPECT_EQ(resumed.fork_src, -1);
  ASSERT_EQ(resumed.slots.size(), 2u);
  EXPECT_TRUE(m.Holds(resumed.slots[0], 42));
  const SlotMemory::HostTierStats stats = m.memory->host_tier_stats();
  EXPECT_EQ(stats.promotions, 1);
  EXPECT_EQ(stats.counts.hits, 1);
  EXPECT_EQ(stats.entries, 1);
  EXPECT_EQ(stats.capacity_bytes, 4 * m.SlotBytes());
}

TEST(HostTierMemoryTest, TheDeviceWinsWhenItIsAsDeepAndTheTierWhenDeeper) {
  Memory m(4, "tier_depth", 4);
  const std::vector<int64_t> hashes = {201, 202, 203};
  PublishCheckpoint(m, hashes, 2, 55);
  Churn(m, 4, 1);  // 202 only in the tier
  ASSERT_TRUE(m.memory->InHostTier(202));
  PublishCheckpoint(m, hashes, 2, 60);  // and on the device, newer
  // Three blocks asked, two held both here and there: the device's.
  SlotHolding a;
  absl::StatusOr<Admission> device_hit = m.memory->Admit(a, Spec(hashes, 3));
  EXPECT_EQ(device_hit->outcome, ResumeOutcome::kFork);
  EXPECT_EQ(device_hit->blocks_resumed, 2);
  EXPECT_TRUE(m.Holds(a.fork_src, 60));
  ASSERT_TRUE(m.memory->DropForkSource(a).ok());
  ASSERT_TRUE(m.memory->Release(a, false).ok());
  PublishCheckpoint(m, hashes, 3, 50);
  Churn(m, 4, 1);                       // 203 only in the tier
  PublishCheckpoint(m, hashes, 2, 65);  // 202 on the device
  // Deeper in the tier: from the tier, even with 202 on the device.
  SlotHolding b;
  absl::StatusOr<Admission> tier_hit = m.memory->Admit(b, Spec(hashes, 3));
  EXPECT_EQ(tier_hit->outcome, ResumeOutcome::kTier);
  EXPECT_EQ(tier_hit->blocks_resumed, 3);
  EXPECT_TRUE(m.Holds(b.slots[0], 50));
}

// The same random run with the tier off and on: after every call the device
// pool's dump is the same (the tier-off run admits cold wherever the tier
// resumed, which is what the pool is told of a tier resume), and the tier
// adds hits.
TEST(HostTierMemoryTest, TheDevicePoolsDecisionsAreTheSameWithTheTierOn) {
  Memory off(6, "tier_off");
  Memory on(6, "tier_on", /*tier_slots=*/24);
  std::mt19937_64 rng(7);
  std::vector<SlotHolding> live_off(64), live_on(64);
  std::vector<bool> live(64, false);
  int tier_hits = 0;
  auto hashes_of = [](int prompt) {
    return std::vector<int64_t>{1000 + prompt, 2000 + prompt, 3000 + prompt};
  };
  for (int step = 0; step < 3000; ++step) {
    const int r = static_cast<int>(rng() % 64);
    const int prompt = static_cast<int>(rng() % 12);
    const std::vector<int64_t> hashes = hashes_of(prompt);
    const int kv = static_cast<int>(rng() % 4);
    if (!live[r]) {
      const AdmitSpec spec = Spec(hashes, kv);
      const SlotMemory::Resumable where = *on.memory->ResumableHit(
          spec.num_tokens, kv, hashes, /*assume_checkpointed=*/false);
      absl::StatusOr<Admission> a_on = on.memory->Admit(live_on[r], spec);
      int kv_off = kv;
      if (a_on.ok() && a_on->outcome == ResumeOutcome::kTier) {
        ++tier_hits;
        kv_off = 0;
        // Only deeper than the device could resume, as resumable_hit said.
        EXPECT_GT(a_on->blocks_resumed, where.blocks) << step;
        EXPECT_EQ(a_on->blocks_resumed, where.tier_blocks) << step;
      }
      absl::StatusOr<Admission> a_off =
          off.memory->Admit(live_off[r], Spec(hashes, kv_off));
      ASSERT_EQ(a_on.ok(), a_off.ok()) << step;
      if (a_on.ok()) {
        if (a_on->outcome != ResumeOutcome::kTier) {
          EXPECT_EQ(a_on->outcome, a_off->outcome) << step;
        }
        live[r] = true;
        // The engine writes the slot it was given.
        ASSERT_TRUE(on.memory->FlushDemotions().ok());
      }
    } else if (rng() % 3 == 0) {
      const int64_t blocks = 1 + static_cast<int64_t>(rng() % 3);
      absl::StatusOr<CheckpointOutcome> c_on = on.memory->Checkpoint(
          live_on[r], 0, blocks, hashes_of(prompt)[blocks - 1]);
      absl::StatusOr<CheckpointOutcome> c_off = off.memory->Checkpoint(
          live_off[r], 0, blocks, hashes_of(prompt)[blocks - 1]);
      ASSERT_EQ(c_on.ok(), c_off.ok()) << step;
    } else {
      for (auto* pair : {&live_on[r], &live_off[r]}) {
        if (pair->fork_src >= 0) {
          ASSERT_TRUE((pair == &live_on[r] ? on : off)
                          .memory->DropForkSource(*pair)
                          .ok());
        }
      }
      ASSERT_TRUE(on.memory->Release(live_on[r], false).ok());
      ASSERT_TRUE(off.memory->Release(live_off[r], false).ok());
      live[r] = false;
    }
    ASSERT_EQ(on.memory->pool().Dump(), off.memory->pool().Dump())
        << "step " << step;
  }
  EXPECT_GT(tier_hits, 0);
  EXPECT_GT(on.memory->host_tier_stats().counts.demotions, 0);
}

TEST(HostTierMemoryTest, AFailedDemotionFilesNothingInTheTier) {
  Memory m(4, "tier_fail_out", 4, /*faulty=*/true);
  const std::vector<int64_t> hashes = {301};
  PublishCheckpoint(m, hashes, 1, 7);
  m.faults->FailNthCopy(1);
  std::vector<SlotHolding> holdings(4);
  for (SlotHolding& h : holdings)
    ASSERT_TRUE(m.memory->Admit(h, Spec({}, 0)).ok());
  EXPECT_FALSE(m.memory->FlushDemotions().ok());
  EXPECT_FALSE(m.memory->InHostTier(301));
  EXPECT_EQ(m.memory->host_tier_stats().demotions_failed, 1);
  for (SlotHolding& h : holdings) ASSERT_TRUE(m.memory->Release(h, false).ok());
  SlotHolding again;
  EXPECT_EQ(m.memory->Admit(again, Spec(hashes, 1))->outcome,
            ResumeOutcome::kMiss);
}

TEST(HostTierMemoryTest, AFailedPromotionAdmitsAsAMiss) {
  Memory m(4, "tier_fail_in", 4, /*faulty=*/true);
  const std::vector<int64_t> hashes = {401, 402};
  PublishCheckpoint(m, hashes, 2, 7);
  Churn(m, 4, 3);
  ASSERT_TRUE(m.memory->InHostTier(402));
  m.faults->FailNthCopy(1);
  SlotHolding h;
  absl::StatusOr<Admission> admitted = m.memory->Admit(h, Spec(hashes, 2));
  ASSERT_TRUE(admitted.ok());
  EXPECT_EQ(admitted->outcome, ResumeOutcome::kMiss);
  EXPECT_EQ(admitted->blocks_resumed, 0);
  EXPECT_EQ(h.slots.size(), 1u);
  EXPECT_EQ(m.memory->host_tier_stats().promotions_failed, 1);
}

TEST(HostTierMemoryTest, UnindexAndClearIndexDropTierEntriesToo) {
  Memory m(2, "tier_unindex", 4);
  PublishCheckpoint(m, {501}, 1, 1);
  PublishCheckpoint(m, {502}, 1, 2);
  Churn(m, 2, 3);
  ASSERT_TRUE(m.memory->InHostTier(501));
  ASSERT_TRUE(m.memory->InHostTier(502));
  const std::vector<int64_t> dead = {501};
  ASSERT_TRUE(m.memory->Unindex(dead).ok());
  EXPECT_FALSE(m.memory->InHostTier(501));
  EXPECT_TRUE(m.memory->InHostTier(502));
  m.memory->ClearIndex();
  EXPECT_FALSE(m.memory->InHostTier(502));
}

TEST(HostTierMemoryTest, ResizingTheTierKeepsTheMostRecentImages) {
  Memory m(2, "tier_resize", 4);
  for (int i = 0; i < 4; ++i) {
    PublishCheckpoint(m, {600 + i}, 1, static_cast<uint8_t>(10 * i));
    Churn(m, 2, 99);
  }
  ASSERT_EQ(m.memory->HostTierDump(),
            (std::vector<int64_t>{600, 601, 602, 603}));
  ASSERT_TRUE(m.memory->ResizeHostTier(2 * m.SlotBytes()).ok());
  EXPECT_EQ(m.memory->HostTierDump(), (std::vector<int64_t>{602, 603}));
  for (int i : {2, 3}) {
    SlotHolding h;
    ASSERT_EQ(m.memory->Admit(h, Spec({600 + i}, 1))->outcome,
              ResumeOutcome::kTier);
    EXPECT_TRUE(m.Holds(h.slots[0], static_cast<uint8_t>(10 * i))) << i;
    ASSERT_TRUE(m.memory->Release(h, false).ok());
  }
  EXPECT_EQ(m.memory->ResizeHostTier(m.SlotBytes() - 1).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.memory->ResizeHostTier(0).ok());
  EXPECT_FALSE(m.memory->InHostTier(603));
  EXPECT_EQ(m.memory->host_tier_stats().capacity_bytes, 0u);
}

TEST(HostTierMemoryTest, ATierNeedsStateMemory) {
  SlotMemory bare = *SlotMemory::Create(
      4, *StateTransfer::Create(TransferKind::kFork, 1, true), kBlock, nullptr);
  EXPECT_EQ(bare.ResizeHostTier(1 << 20).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace statecache

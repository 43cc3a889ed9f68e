// Copy tables: coalescing, the refusals that keep a batch order-independent,
// and that a table moves exactly the bytes slot by slot copies would; the
// same for tables between slots and slot images (BuildImageCopyTable).
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "daemon/device/copy_plan.h"
#include "daemon/device/layout_presets.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/host_copy.h"

namespace statecache {
namespace {

using ::testing::HasSubstr;

StateLayout Small(Arrangement arrangement) {
  return *StateLayout::Create("small",
                              {{"conv", {3, 40}, DType::kBF16},   // 240 -> 240
                               {"ssm", {2, 5, 3}, DType::kF32}},  // 120 -> 128
                              4, arrangement);
}

TEST(CopyTableTest, SlotMajorPairIsOneDescriptor) {
  const StateLayout l = Small(Arrangement::kSlotMajor);
  absl::StatusOr<CopyTable> t = BuildCopyTable(l, 10, 10, {{{7, 2}}});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->descriptors.size(), 1u);
  EXPECT_EQ(t->descriptors[0].src_offset, 7 * l.bytes_per_slot());
  EXPECT_EQ(t->descriptors[0].dst_offset, 2 * l.bytes_per_slot());
  EXPECT_EQ(t->descriptors[0].bytes, l.bytes_per_slot());
  EXPECT_EQ(t->total_bytes, l.bytes_per_slot());
}

TEST(CopyTableTest, AdjacentPairsCoalesceInAnyOrder) {
  const StateLayout l = Small(Arrangement::kSlotMajor);
  // 7->2, 8->3, 9->4 is one run whatever the order given; 0->6 is another.
  absl::StatusOr<CopyTable> t =
      BuildCopyTable(l, 10, 10, {{{9, 4}, {0, 6}, {7, 2}, {8, 3}}});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->descriptors.size(), 2u);
  EXPECT_EQ(t->descriptors[1].src_offset, 7 * l.bytes_per_slot());
  EXPECT_EQ(t->descriptors[1].bytes, 3 * l.bytes_per_slot());
  EXPECT_EQ(t->total_bytes, 4 * l.bytes_per_slot());
}

TEST(CopyTableTest, LayerMajorHasOneDescriptorPerBlockAndRun) {
  const StateLayout l = Small(Arrangement::kLayerMajor);
  absl::StatusOr<CopyTable> one = BuildCopyTable(l, 10, 8, {{{5, 1}}});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->descriptors.size(), 8u);  // 4 layers x 2 tensors
  EXPECT_EQ(one->total_bytes, l.bytes_per_slot());
  absl::StatusOr<CopyTable> run =
      BuildCopyTable(l, 10, 8, {{{5, 1}, {6, 2}, {7, 3}}});
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->descriptors.size(), 8u);
  EXPECT_EQ(run->total_bytes, 3 * l.bytes_per_slot());
  for (const CopyDescriptor& d : run->descriptors) {
    EXPECT_EQ(d.src_offset % 16, 0u);
    EXPECT_EQ(d.dst_offset % 16, 0u);
    EXPECT_EQ(d.bytes % 16, 0u);
  }
}

TEST(CopyTableTest, RefusesOrderDependentOrOutOfRangeBatches) {
  const StateLayout l = Small(Arrangement::kSlotMajor);
  struct Case {
    std::vector<SlotPair> pairs;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{1, 10}}, "pairs[0] (1 -> 10): slot out of range [0, 10)"},
      {{{-1, 3}}, "out of range"},
      {{{3, 3}}, "source is the destination"},
      {{{1, 2}, {2, 3}}, "slot 2 is also a destination"},
      {{{2, 3}, {1, 2}}, "slot 2 is also a source"},
      {{{1, 3}, {2, 3}}, "slot 3 is the destination of two pairs"},
      {{{1, 2}, {2, 1}}, "is also a destination"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<CopyTable> t = BuildCopyTable(l, 10, 10, c.pairs);
    ASSERT_FALSE(t.ok()) << c.message;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(c.message));
  }
  // Fan-out (one source, several destinations) is fine.
  EXPECT_TRUE(BuildCopyTable(l, 10, 10, {{{1, 2}, {1, 3}, {1, 4}}}).ok());
  EXPECT_TRUE(BuildCopyTable(l, 10, 10, {}).ok());
}

// The table moves exactly what copying every piece of every pair one by one
// would, in both arrangements, and passes ValidateCopyTable.
TEST(CopyTableTest, TableEqualsPieceByPieceCopies) {
  std::mt19937_64 rng(7);
  for (Arrangement a : {Arrangement::kSlotMajor, Arrangement::kLayerMajor}) {
    const StateLayout l = Small(a);
    const int64_t capacity = 24;
    const uint64_t bytes = l.RegionBytes(capacity);
    for (int round = 0; round < 20; ++round) {
      // Random disjoint pairs: sources from one shuffled half, destinations
      // from the other.
      std::vector<int64_t> slots(capacity);
      for (int64_t i = 0; i < capacity; ++i) slots[i] = i;
      std::shuffle(slots.begin(), slots.end(), rng);
      std::vector<SlotPair> pairs;
      const int n = 1 + static_cast<int>(rng() % (capacity / 2));
      for (int i = 0; i < n; ++i) pairs.push_back({slots[i], slots[n + i]});
      absl::StatusOr<CopyTable> t =
          BuildCopyTable(l, capacity, capacity, pairs);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_TRUE(ValidateCopyTable(t->descriptors, bytes, bytes, true).ok());
      EXPECT_EQ(t->total_bytes, n * l.bytes_per_slot());

      std::vector<uint8_t> region(bytes);
      for (uint8_t& b : region) b = static_cast<uint8_t>(rng());
      std::vector<uint8_t> want = region;
      for (const auto& [src, dst] : pairs) {
        for (int64_t layer = 0; layer < l.num_layers(); ++layer) {
          for (int tensor = 0; tensor < l.num_tensors(); ++tensor) {
            std::memcpy(
                want.data() + l.PieceOffset(tensor, layer, dst, capacity),
                region.data() + l.PieceOffset(tensor, layer, src, capacity),
                l.padded_piece_bytes(tensor));
          }
        }
      }
      HostCopier copier({.num_threads = 1});
      copier.Run(t->descriptors, region.data(), region.data());
      ASSERT_EQ(region, want);
    }
  }
}

TEST(ImageCopyTableTest, SlotMajorImagesAreOneDescriptorAndRunsMerge) {
  const StateLayout l = Small(Arrangement::kSlotMajor);
  const uint64_t b = l.bytes_per_slot();
  // Slots 7, 8, 9 into consecutive images, given out of order: one run. Slot
  // 0 at offset 5b, and a fan-out of 8 at 6b + 16, alone.
  const std::vector<SlotImage> images = {
      {9, 2 * b}, {0, 5 * b}, {7, 0}, {8, 6 * b + 16}, {8, b}};
  absl::StatusOr<CopyTable> read =
      BuildImageCopyTable(l, 10, 10, 8 * b, images, /*to_region=*/false);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->descriptors.size(), 3u);
  EXPECT_EQ(read->descriptors[0].src_offset, 7 * b);
  EXPECT_EQ(read->descriptors[0].dst_offset, 0u);
  EXPECT_EQ(read->descriptors[0].bytes, 3 * b);
  EXPECT_EQ(read->descriptors[1].src_offset, 0u);
  EXPECT_EQ(read->descriptors[1].dst_offset, 5 * b);
  EXPECT_EQ(read->descriptors[1].bytes, b);
  EXPECT_EQ(read->descriptors[2].src_offset, 8 * b);
  EXPECT_EQ(read->descriptors[2].dst_offset, 6 * b + 16);
  EXPECT_EQ(read->descriptors[2].bytes, b);
  EXPECT_EQ(read->total_bytes, 5 * b);

  // Writing back: the same ranges, the other way round (no fan-out).
  const std::vector<SlotImage> back = {{9, 2 * b}, {0, 5 * b}, {7, 0}, {8, b}};
  absl::StatusOr<CopyTable> write =
      BuildImageCopyTable(l, 10, 10, 8 * b, back, /*to_region=*/true);
  ASSERT_TRUE(write.ok()) << write.status();
  ASSERT_EQ(write->descriptors.size(), 2u);
  EXPECT_EQ(write->descriptors[0].src_offset, 0u);
  EXPECT_EQ(write->descriptors[0].dst_offset, 7 * b);
  EXPECT_EQ(write->descriptors[0].bytes, 3 * b);
  EXPECT_EQ(write->descriptors[1].src_offset, 5 * b);
  EXPECT_EQ(write->descriptors[1].dst_offset, 0u);
  EXPECT_EQ(write->total_bytes, 4 * b);
}

TEST(ImageCopyTableTest, LayerMajorImageIsOneDescriptorPerPiece) {
  const StateLayout l = Small(Arrangement::kLayerMajor);
  const uint64_t offset = 3 * l.bytes_per_slot();
  const SlotImage image{5, offset};
  for (const bool to_region : {false, true}) {
    absl::StatusOr<CopyTable> t = BuildImageCopyTable(
        l, 10, 8, 4 * l.bytes_per_slot(), {&image, 1}, to_region);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->descriptors.size(), 8u);  // 4 layers x 2 tensors
    EXPECT_EQ(t->total_bytes, l.bytes_per_slot());
    size_t k = 0;
    for (int64_t layer = 0; layer < l.num_layers(); ++layer) {
      for (int tensor = 0; tensor < l.num_tensors(); ++tensor, ++k) {
        const CopyDescriptor& d = t->descriptors[k];
        const uint64_t region = l.PieceOffset(tensor, layer, 5, 10);
        // [layer][tensor], padded: 240 + 128 bytes per layer.
        const uint64_t staging = offset + layer * 368 + (tensor == 0 ? 0 : 240);
        EXPECT_EQ(d.src_offset, to_region ? staging : region) << k;
        EXPECT_EQ(d.dst_offset, to_region ? region : staging) << k;
        EXPECT_EQ(d.bytes, tensor == 0 ? 240u : 128u) << k;
      }
    }
  }
}

TEST(ImageCopyTableTest, RefusesBadImages) {
  const StateLayout l = Small(Arrangement::kSlotMajor);
  const uint64_t b = l.bytes_per_slot();
  const uint64_t staging = 4 * b;
  struct Case {
    std::vector<SlotImage> images;
    bool to_region;
    std::string message;  // empty: accepted
  };
  const std::vector<Case> cases = {
      {{{0, 0}, {10, b}},
       false,
       "images[1] (slot 10 at offset " + std::to_string(b) +
           "): slot out of range [0, 10)"},
      {{{-1, 0}}, true, "images[0] (slot -1 at offset 0): slot out of range"},
      {{{0, 3 * b + 16}}, false, "pass the end of the staging memory"},
      {{{0, 4 * b}}, true, "images[0] (slot 0 at offset"},
      {{{0, ~uint64_t{0} - 15}}, false, "pass the end"},  // offset + b wraps
      {{{0, 0}, {1, 2 * b}, {2, b + 16}},
       false,
       "images[2] (slot 2 at offset " + std::to_string(b + 16) +
           "): overlaps images[1]"},
      {{{0, b}, {1, b}},
       true,
       "images[1] (slot 1 at offset " + std::to_string(b) +
           "): overlaps images[0]"},
      {{{3, 0}, {3, b}},
       true,
       "images[1] (slot 3 at offset " + std::to_string(b) +
           "): slot 3 is also written by images[0]"},
      {{{3, 0}, {3, b}}, false, ""},  // fan-out reads
      {{{3, 0}, {4, b}, {5, 3 * b}},
       true,
       ""},  // the last image ends at the end
      {{}, false, ""},
      {{}, true, ""},
  };
  for (const Case& c : cases) {
    absl::StatusOr<CopyTable> t =
        BuildImageCopyTable(l, 10, 10, staging, c.images, c.to_region);
    if (c.message.empty()) {
      EXPECT_TRUE(t.ok()) << t.status();
      continue;
    }
    ASSERT_FALSE(t.ok()) << c.message;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(c.message));
  }
}

// Reading random slots into random disjoint images moves exactly what
// copying every piece into its [layer][tensor] place would, in both
// arrangements; writing the images onto other slots puts the same bytes
// back, piece by piece.
TEST(ImageCopyTableTest, TablesEqualPieceByPieceCopies) {
  std::mt19937_64 rng(11);
  for (Arrangement a : {Arrangement::kSlotMajor, Arrangement::kLayerMajor}) {
    const StateLayout l = Small(a);
    const int64_t capacity = 16;
    const int64_t num_slots = 12;  // not the capacity: layer-major blocks
    const uint64_t b = l.bytes_per_slot();
    const uint64_t region_bytes = l.RegionBytes(capacity);
    const uint64_t staging_bytes = 20 * b;
    for (int round = 0; round < 20; ++round) {
      // Images in shuffled staging positions (some gaps), slots chosen with
      // repeats (fan-out) for the read.
      std::vector<uint64_t> positions(20);
      for (size_t i = 0; i < positions.size(); ++i) positions[i] = i * b;
      std::shuffle(positions.begin(), positions.end(), rng);
      std::vector<SlotImage> images;
      const int n = 1 + static_cast<int>(rng() % 10);
      for (int i = 0; i < n; ++i) {
        images.push_back(
            {static_cast<int64_t>(rng() % num_slots), positions[i]});
      }
      absl::StatusOr<CopyTable> read = BuildImageCopyTable(
          l, capacity, num_slots, staging_bytes, images, false);
      ASSERT_TRUE(read.ok()) << read.status();
      EXPECT_TRUE(ValidateCopyTable(read->descriptors, region_bytes,
                                    staging_bytes, false)
                      .ok());
      EXPECT_EQ(read->total_bytes, n * b);

      std::vector<uint8_t> region(region_bytes);
      for (uint8_t& x : region) x = static_cast<uint8_t>(rng());
      std::vector<uint8_t> staging(staging_bytes, 0);
      std::vector<uint8_t> want = staging;
      for (const SlotImage& image : images) {
        for (int64_t layer = 0; layer < l.num_layers(); ++layer) {
          for (int tensor = 0; tensor < l.num_tensors(); ++tensor) {
            std::memcpy(want.data() + image.offset + layer * l.layer_bytes() +
                            l.tensor_offset_in_layer(tensor),
                        region.data() +
                            l.PieceOffset(tensor, layer, image.slot, capacity),
                        l.padded_piece_bytes(tensor));
          }
        }
      }
      HostCopier copier({.num_threads = 1});
      copier.Run(read->descriptors, region.data(), staging.data());
      ASSERT_EQ(staging, want);

      // Back onto distinct slots: slot k takes image k.
      std::vector<int64_t> targets(num_slots);
      for (int64_t i = 0; i < num_slots; ++i) targets[i] = i;
      std::shuffle(targets.begin(), targets.end(), rng);
      std::vector<SlotImage> back;
      for (int i = 0; i < n; ++i)
        back.push_back({targets[i], images[i].offset});
      absl::StatusOr<CopyTable> write = BuildImageCopyTable(
          l, capacity, num_slots, staging_bytes, back, true);
      ASSERT_TRUE(write.ok()) << write.status();
      EXPECT_TRUE(ValidateCopyTable(write->descriptors, staging_bytes,
                                    region_bytes, false)
                      .ok());
      std::vector<uint8_t> want_region = region;
      for (int i = 0; i < n; ++i) {
        for (int64_t layer = 0; layer < l.num_layers(); ++layer) {
          for (int tensor = 0; tensor < l.num_tensors(); ++tensor) {
            std::memcpy(want_region.data() +
                            l.PieceOffset(tensor, layer, targets[i], capacity),
                        region.data() + l.PieceOffset(tensor, layer,
                                                      images[i].slot, capacity),
                        l.padded_piece_bytes(tensor));
          }
        }
      }
      copier.Run(write->descriptors, staging.data(), region.data());
      ASSERT_EQ(region, want_region);
    }
  }
}

TEST(CopyTableTest, ValidateFindsOverlapsAndOverruns) {
  const uint64_t kRegion = 1000;
  struct Case {
    std::vector<CopyDescriptor> table;
    bool same_region;
    std::string message;  // empty: valid
  };
  const std::vector<Case> cases = {
      {{{0, 100, 50}, {0, 200, 50}}, true, ""},            // fan-out
      {{{0, 100, 50}, {300, 120, 50}}, true, "overlaps"},  // dst/dst
      {{{0, 100, 50}, {120, 300, 50}}, true, "overlaps"},  // src/dst
      {{{0, 100, 50}, {120, 300, 50}}, false, ""},         // separate regions
      {{{0, 30, 50}}, true, "overlaps"},                   // itself
      {{{990, 0, 20}}, true, "outside the source region"},
      {{{0, 990, 20}}, false, "outside the destination region"},
      {{{0, 10, 0}}, true, "zero bytes"},
      {{{0, 500, 10}, {0, 400, 150}}, true, "overlaps"},
  };
  for (const Case& c : cases) {
    absl::Status s =
        ValidateCopyTable(c.table, kRegion, kRegion, c.same_region);
    if (c.message.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
    }
  }
}

TEST(CopyTableTest, SplitKeepsBytesAndAlignment) {
  const std::vector<CopyDescriptor> table = {{0, 1 << 20, 100000},
                                             {16, 32, 16}};
  const std::vector<CopyDescriptor> split = SplitCopyTable(table, 4096);
  uint64_t total = 0;
  for (const CopyDescriptor& d : split) {
    EXPECT_LE(d.bytes, 4096u);
    EXPECT_EQ(d.src_offset % 16, 0u);
    total += d.bytes;
  }
  EXPECT_EQ(total, 100016u);
  EXPECT_EQ(split.size(), 25u + 1u);  // ceil(100000 / 4096) + 1
  EXPECT_EQ(split.back().bytes, 16u);
}

}  // namespace
}  // namespace statecache

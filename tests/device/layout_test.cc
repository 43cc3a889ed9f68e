// StateLayout: sizes (Qwen3-Next by hand), placements that tile each slot
// exactly and keep distinct slots apart in both arrangements, the 16-byte
// rule, element strides, the fingerprint, presets and refusals.
#include "vocabulary/layout.h"

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "daemon/device/layout_presets.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace statecache {
namespace {

using ::testing::HasSubstr;

StateLayout MustCreate(std::vector<StateTensorSpec> tensors, int64_t layers,
                       Arrangement arrangement = Arrangement::kSlotMajor) {
  absl::StatusOr<StateLayout> layout =
      StateLayout::Create("test", std::move(tensors), layers, arrangement);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

// A layout with odd sizes, so padding shows up everywhere.
StateLayout OddLayout(Arrangement arrangement) {
  return MustCreate({{"a", {3}, DType::kF16},         // 6 -> 16
                     {"b", {5, 7}, DType::kF8E4M3},   // 35 -> 48
                     {"c", {2, 2, 2}, DType::kF32}},  // 32 -> 32
                    3, arrangement);
}

std::vector<StateLayout> AllTestLayouts() {
  std::vector<StateLayout> layouts;
  for (Arrangement a : {Arrangement::kSlotMajor, Arrangement::kLayerMajor}) {
    layouts.push_back(OddLayout(a));
    for (std::string_view name : LayoutPresetNames()) {
      layouts.push_back(*LayoutPreset(name, 1, a));
    }
  }
  return layouts;
}

TEST(LayoutTest, Qwen3NextBytesByHand) {
  // conv: (conv_kernel 4 - 1 + num_spec) x conv_dim 8192, bf16 (2 bytes);
  // ssm: 32 x 128 x 128, bf16; 36 Gated DeltaNet layers.
  absl::StatusOr<StateLayout> q = LayoutPreset("qwen3-next-80b-a3b");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->num_layers(), 36);
  EXPECT_EQ(q->piece_bytes(0), 3u * 8192 * 2);        // 49152
  EXPECT_EQ(q->piece_bytes(1), 32u * 128 * 128 * 2);  // 1048576
  EXPECT_EQ(q->layer_bytes(), 49152u + 1048576u);     // 1097728
  EXPECT_EQ(q->bytes_per_slot(), 36u * 1097728u);     // 39518208
  EXPECT_EQ(q->bytes_per_slot(), 39518208u);
  EXPECT_EQ(q->RegionBytes(1000), 39518208000u);

  absl::StatusOr<StateLayout> spec2 = LayoutPreset("qwen3-next-80b-a3b", 2);
  ASSERT_TRUE(spec2.ok());
  EXPECT_EQ(spec2->tensors()[0].shape, (std::vector<int64_t>{5, 8192}));
  EXPECT_EQ(spec2->bytes_per_slot(), 36u * (5u * 8192 * 2 + 1048576u));
}

TEST(LayoutTest, OtherPresetsByHand) {
  // Nemotron-H-8B: conv 3 x (128*64 + 2*8*128 = 10240), ssm 128x64x128,
  // 24 Mamba-2 layers.
  absl::StatusOr<StateLayout> n = LayoutPreset("nemotron-h-8b");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->bytes_per_slot(), 24u * (3u * 10240 * 2 + 128u * 64 * 128 * 2));
  // Jamba v0.1: conv 3 x 8192, ssm 8192 x 16, 28 Mamba layers.
  absl::StatusOr<StateLayout> j = LayoutPreset("jamba-v0.1");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->bytes_per_slot(), 28u * (3u * 8192 * 2 + 8192u * 16 * 2));
}

TEST(LayoutTest, PresetNamesAliasesAndRefusals) {
  EXPECT_GE(LayoutPresetNames().size(), 3u);
  absl::StatusOr<StateLayout> alias =
      LayoutPreset("Qwen/Qwen3-Next-80B-A3B-Instruct");
  ASSERT_TRUE(alias.ok());
  EXPECT_EQ(alias->name(), "qwen3-next-80b-a3b");
  EXPECT_EQ(LayoutPreset("no-such-model").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(LayoutPreset("no-such-model").status().message()),
              HasSubstr("qwen3-next-80b-a3b"));
  EXPECT_EQ(LayoutPreset("jamba-v0.1", -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LayoutPreset("jamba-v0.1", kMaxNumSpec + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<StateLayout> lm =
      LayoutPreset("jamba-v0.1", 0, Arrangement::kLayerMajor);
  ASSERT_TRUE(lm.ok());
  EXPECT_EQ(lm->arrangement(), Arrangement::kLayerMajor);
}

TEST(LayoutTest, PaddingTo16Bytes) {
  const StateLayout l = OddLayout(Arrangement::kSlotMajor);
  EXPECT_EQ(l.piece_bytes(0), 6u);
  EXPECT_EQ(l.padded_piece_bytes(0), 16u);
  EXPECT_EQ(l.piece_bytes(1), 35u);
  EXPECT_EQ(l.padded_piece_bytes(1), 48u);
  EXPECT_EQ(l.padded_piece_bytes(2), 32u);
  EXPECT_EQ(l.layer_bytes(), 96u);
  EXPECT_EQ(l.bytes_per_slot(), 288u);
  for (const StateLayout& layout : AllTestLayouts()) {
    for (int64_t capacity : {1, 3, 7}) {
      for (const TensorPlacement& p : layout.Placements(capacity)) {
        EXPECT_EQ(p.offset % kLayoutAlignment, 0u);
        EXPECT_EQ(p.slot_stride % kLayoutAlignment, 0u);
        EXPECT_EQ(p.padded_bytes % kLayoutAlignment, 0u);
      }
    }
  }
}

TEST(LayoutTest, SlotMajorPiecesTileEachSlotExactly) {
  for (const StateLayout& layout : AllTestLayouts()) {
    if (layout.arrangement() != Arrangement::kSlotMajor) continue;
    const int64_t capacity = 4;
    for (int64_t slot = 0; slot < capacity; ++slot) {
      std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end)
      for (int64_t l = 0; l < layout.num_layers(); ++l) {
        for (int t = 0; t < layout.num_tensors(); ++t) {
          const uint64_t begin = layout.PieceOffset(t, l, slot, capacity);
          ranges.push_back({begin, begin + layout.padded_piece_bytes(t)});
        }
      }
      std::sort(ranges.begin(), ranges.end());
      // Every byte of [slot * bps, (slot + 1) * bps) exactly once.
      uint64_t at = slot * layout.bytes_per_slot();
      for (const auto& [begin, end] : ranges) {
        ASSERT_EQ(begin, at) << layout.DebugString();
        at = end;
      }
      EXPECT_EQ(at, (slot + 1) * layout.bytes_per_slot());
    }
  }
}

TEST(LayoutTest, DistinctSlotsAreDisjointAndTheRegionIsCovered) {
  for (const StateLayout& layout : AllTestLayouts()) {
    for (int64_t capacity : {1, 2, 5}) {
      std::vector<std::pair<uint64_t, uint64_t>> ranges;
      for (int64_t slot = 0; slot < capacity; ++slot) {
        for (int64_t l = 0; l < layout.num_layers(); ++l) {
          for (int t = 0; t < layout.num_tensors(); ++t) {
            const uint64_t begin = layout.PieceOffset(t, l, slot, capacity);
            ranges.push_back({begin, begin + layout.padded_piece_bytes(t)});
          }
        }
      }
      std::sort(ranges.begin(), ranges.end());
      // No overlap, no gap: the region's bytes, each once, in both
      // arrangements.
      uint64_t at = 0;
      for (const auto& [begin, end] : ranges) {
        ASSERT_EQ(begin, at)
            << layout.DebugString() << " capacity " << capacity;
        at = end;
      }
      EXPECT_EQ(at, layout.RegionBytes(capacity));
    }
  }
}

TEST(LayoutTest, PlacementsAgreeWithPieceOffsets) {
  for (const StateLayout& layout : AllTestLayouts()) {
    const int64_t capacity = 6;
    const std::vector<TensorPlacement> all = layout.Placements(capacity);
    ASSERT_EQ(all.size(),
              static_cast<size_t>(layout.num_layers() * layout.num_tensors()));
    for (const TensorPlacement& p : all) {
      EXPECT_EQ(&p - all.data(), p.layer * layout.num_tensors() + p.tensor);
      EXPECT_EQ(p, layout.Place(p.tensor, p.layer, capacity));
      for (int64_t slot = 0; slot < capacity; ++slot) {
        EXPECT_EQ(p.offset + slot * p.slot_stride,
                  layout.PieceOffset(p.tensor, p.layer, slot, capacity));
      }
      if (layout.arrangement() == Arrangement::kSlotMajor) {
        EXPECT_EQ(p.slot_stride, layout.bytes_per_slot());
      } else {
        EXPECT_EQ(p.slot_stride, layout.padded_piece_bytes(p.tensor));
      }
    }
  }
}

TEST(LayoutTest, ElementStridesAreRowMajorBytes) {
  const StateLayout q = *LayoutPreset("qwen3-next-80b-a3b");
  const TensorPlacement ssm = q.Place(1, 0, 8);
  EXPECT_EQ(ssm.strides, (std::vector<uint64_t>{128 * 128 * 2, 128 * 2, 2}));
  EXPECT_EQ(ssm.bytes, 32u * 128 * 128 * 2);
  const TensorPlacement conv = q.Place(0, 5, 8);
  EXPECT_EQ(conv.strides, (std::vector<uint64_t>{8192 * 2, 2}));
  for (const StateLayout& layout : AllTestLayouts()) {
    for (const TensorPlacement& p : layout.Placements(3)) {
      const StateTensorSpec& spec = layout.tensors()[p.tensor];
      const uint64_t element = DTypeSize(spec.dtype);
      EXPECT_EQ(p.strides.back(), element);
      EXPECT_EQ(p.strides[0] * spec.shape[0], p.bytes);
      // Byte strides divide into element strides (torch.as_strided).
      EXPECT_EQ(p.slot_stride % element, 0u);
      EXPECT_EQ(p.offset % element, 0u);
    }
  }
}

TEST(LayoutTest, LayerMajorBlocksHoldEverySlotBackToBack) {
  const StateLayout l = OddLayout(Arrangement::kLayerMajor);
  const int64_t capacity = 10;
  // Block order: layer 0 {a, b, c}, layer 1 {a, b, c}, ...
  EXPECT_EQ(l.Place(0, 0, capacity).offset, 0u);
  EXPECT_EQ(l.Place(1, 0, capacity).offset, 10u * 16);
  EXPECT_EQ(l.Place(2, 0, capacity).offset, 10u * (16 + 48));
  EXPECT_EQ(l.Place(0, 1, capacity).offset, 10u * 96);
  EXPECT_EQ(l.RegionBytes(capacity), 10u * 288);
}

TEST(LayoutTest, CanonicalStringIsDocumented) {
  EXPECT_EQ(LayoutPreset("qwen3-next-80b-a3b")->CanonicalString(),
            "statecache-layout/v1;align=16;arrangement=slot_major;layers=36;"
            "tensor=conv:bf16:3x8192;tensor=ssm:bf16:32x128x128;");
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);  // FNV-1a test vector
  const StateLayout q = *LayoutPreset("qwen3-next-80b-a3b");
  EXPECT_EQ(q.fingerprint(), Fnv1a64(q.CanonicalString()));
  EXPECT_EQ(q.FingerprintHex().size(), 16u);
}

TEST(LayoutTest, FingerprintChangesWhenAnythingChanges) {
  const std::vector<StateTensorSpec> base = {{"conv", {3, 64}, DType::kBF16},
                                             {"ssm", {4, 8, 8}, DType::kF32}};
  const uint64_t fp = MustCreate(base, 5).fingerprint();
  // The display name is not part of it.
  EXPECT_EQ(StateLayout::Create("other name", base, 5)->fingerprint(), fp);

  std::vector<std::vector<StateTensorSpec>> variants;
  auto v = base;
  v[0].name = "conv2";
  variants.push_back(v);
  v = base;
  v[1].dtype = DType::kBF16;
  variants.push_back(v);
  v = base;
  v[0].shape[1] = 65;
  variants.push_back(v);
  v = base;
  v[1].shape = {4, 64};  // same bytes, other shape
  variants.push_back(v);
  v = base;
  std::swap(v[0], v[1]);
  variants.push_back(v);
  v = base;
  v.push_back({"extra", {1}, DType::kF16});
  variants.push_back(v);
  for (const auto& variant : variants) {
    EXPECT_NE(MustCreate(variant, 5).fingerprint(), fp);
  }
  EXPECT_NE(MustCreate(base, 6).fingerprint(), fp);
  EXPECT_NE(MustCreate(base, 5, Arrangement::kLayerMajor).fingerprint(), fp);
  EXPECT_NE(MustCreate(base, 5)
                .WithArrangement(Arrangement::kLayerMajor)
                .fingerprint(),
            fp);
  EXPECT_NE(LayoutPreset("qwen3-next-80b-a3b", 1)->fingerprint(),
            LayoutPreset("qwen3-next-80b-a3b", 0)->fingerprint());
}

TEST(LayoutTest, CreateRefusesBadLayoutsNamingTheField) {
  struct Case {
    std::vector<StateTensorSpec> tensors;
    int64_t layers;
    std::string field;
  };
  const std::vector<Case> cases = {
      {{}, 1, "tensors"},
      {{{"a", {1}, DType::kF16}}, 0, "num_layers"},
      {{{"a", {1}, DType::kF16}}, kMaxLayoutLayers + 1, "num_layers"},
      {{{"", {1}, DType::kF16}}, 1, "tensors[0].name"},
      {{{"a b", {1}, DType::kF16}}, 1, "tensors[0].name"},
      {{{"a", {1}, DType::kF16}, {"a", {1}, DType::kF16}},
       1,
       "tensors[1].name"},
      {{{"a", {}, DType::kF16}}, 1, "tensors[0].shape"},
      {{{"a", {1, 1, 1, 1, 1, 1, 1, 1, 1}, DType::kF16}},
       1,
       "tensors[0].shape"},
      {{{"a", {4, 0}, DType::kF16}}, 1, "tensors[0].shape[1]"},
      {{{"a", {4, -3}, DType::kF16}}, 1, "tensors[0].shape[1]"},
      {{{"a", {1 << 20, 1 << 20}, DType::kF32}}, 1, "tensors[0].shape"},
      {{{"a", {1 << 20}, DType::kF32}}, 2048, "num_layers"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<StateLayout> layout =
        StateLayout::Create("x", c.tensors, c.layers);
    ASSERT_FALSE(layout.ok()) << c.field;
    EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(layout.status().message()),
                ::testing::StartsWith(c.field + ":"))
        << layout.status();
  }
}

TEST(LayoutTest, DTypeNames) {
  EXPECT_EQ(*ParseDType("bf16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("float"), DType::kF32);
  EXPECT_EQ(*ParseDType("float8_e4m3fn"), DType::kF8E4M3);
  EXPECT_EQ(DTypeSize(DType::kF8E5M2), 1);
  EXPECT_EQ(DTypeName(DType::kF16), "f16");
  EXPECT_FALSE(ParseDType("int7").ok());
  EXPECT_EQ(*ParseArrangement("layer_major"), Arrangement::kLayerMajor);
  EXPECT_FALSE(ParseArrangement("column_major").ok());
}

}  // namespace
}  // namespace statecache

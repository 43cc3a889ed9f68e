// HostDevice with a model-runner stand-in in another process
// (region_probe): patterns written there, copies run here, every byte
// checked there; shrinking returns the object's blocks; growing works;
// export, mode, unlink and refusals. Slot images: slots read into staging
// memory and written back, every byte checked through the daemon's mapping.
#include "daemon/device/host_device.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/device/host_region.h"
#include "daemon/device/layout_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/device/host_test_util.h"
#include "tests/device/pattern.h"
#include "tests/device/probe_process.h"

namespace statecache {

// Test names and skip lines say "slot_major", not "1-byte object <00>".
void PrintTo(Arrangement arrangement, std::ostream* os) {
  *os << ArrangementName(arrangement);
}

namespace {

using testing::FillSlots;
using testing::Image;

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kPrefix[] = "statecache_test";

uint64_t NextEpoch() {
  static uint64_t epoch = 1000;
  return ++epoch;
}

// st_blocks of the object, in bytes, as `ls -s` would count it.
uint64_t AllocatedBytes(const std::string& shm_name) {
  struct stat st;
  if (stat(("/dev/shm" + shm_name).c_str(), &st) != 0) return ~uint64_t{0};
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

std::string WriteLayoutFile(const StateLayout& layout) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/layout_",
                                        getpid(), "_", NextEpoch(), ".json");
  std::ofstream(path) << LayoutToJson(layout);
  return path;
}

std::string Sources(const std::vector<int64_t>& sources) {
  return absl::StrJoin(sources, " ");
}

class HostDeviceTest : public ::testing::TestWithParam<Arrangement> {
 protected:
  std::unique_ptr<HostDevice> MakeDevice(const StateLayout& layout,
                                         int64_t num_slots, int64_t max_slots) {
    HostDeviceOptions options;
    options.layout = layout.WithArrangement(GetParam());
    options.num_slots = num_slots;
    options.max_slots = max_slots;
    options.epoch = NextEpoch();
    options.prefix = kPrefix;
    // Every copy goes through the thread pool, not only large ones.
    options.copier = {
        .num_threads = 3, .inline_bytes = 0, .min_share_bytes = 1};
    absl::StatusOr<std::unique_ptr<HostDevice>> device =
        HostDevice::Create(options);
    EXPECT_TRUE(device.ok()) << device.status();
    return device.ok() ? std::move(*device) : nullptr;
  }

  std::string Open(testing::ProbeProcess& probe, const HostDevice& device) {
    const RegionExport region = device.Export();
    return probe.Ask(absl::StrCat(
        "open ", region.handle, " ", WriteLayoutFile(device.layout()), " ",
        region.num_slots, " ", region.capacity_slots));
  }
};

// Padding in every piece: 240 + 120 (-> 128) bytes per layer, 4 layers.
StateLayout PaddedLayout() {
  return *StateLayout::Create(
      "padded",
      {{"conv", {3, 40}, DType::kBF16}, {"ssm", {2, 5, 3}, DType::kF32}}, 4);
}

TEST_P(HostDeviceTest, AnotherProcessSeesEveryCopiedByte) {
  std::unique_ptr<HostDevice> device = MakeDevice(PaddedLayout(), 16, 32);
  ASSERT_NE(device, nullptr);
  testing::ProbeProcess probe(STATECACHE_REGION_PROBE);
  ASSERT_EQ(Open(probe, *device), "ok");
  ASSERT_EQ(probe.Ask("write 5 0 1 2 3 4 5 6 7"), "ok");
  // Before any copy: the probe's writes, zeros elsewhere.
  ASSERT_EQ(probe.Ask("verify 5 " + Sources({0, 1, 2, 3, 4, 5, 6, 7, -1, -1, -1,
                                             -1, -1, -1, -1, -1})),
            "ok");

  // A run of neighbours, a fan-out and a lone pair, in one batch.
  absl::StatusOr<CopyResult> copied =
      device->Copy({{{0, 8}, {1, 9}, {2, 10}, {5, 12}, {5, 13}, {7, 15}}});
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->bytes, 6 * device->layout().bytes_per_slot());
  EXPECT_EQ(probe.Ask("verify 5 " + Sources({0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2,
                                             -1, 5, 5, -1, 7})),
            "ok");
  // The probe does notice a wrong byte (slot 12 holds 5's pattern, not 4's).
  EXPECT_THAT(probe.Ask("verify 5 " + Sources({0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2,
                                               -1, 4, 5, -1, 7})),
              StartsWith("error mismatch slot 12"));

  // Relocation-style copies downwards, then overwrite a source.
  ASSERT_TRUE(device->Copy({{{15, 11}, {13, 14}}}).ok());
  ASSERT_TRUE(device->Copy({{{3, 0}}}).ok());
  EXPECT_EQ(probe.Ask("verify 5 " + Sources({3, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 7,
                                             5, 5, 5, 7})),
            "ok");

  // A refused batch copies nothing.
  absl::StatusOr<CopyResult> refused = device->Copy({{{1, 2}, {2, 4}}});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(probe.Ask("verify 5 " + Sources({3, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 7,
                                             5, 5, 5, 7})),
            "ok");
  EXPECT_EQ(probe.Ask("quit"), "ok");
}

TEST_P(HostDeviceTest, ShrinkReturnsBlocksAndGrowWorks) {
  // 1 MiB slots (4 layers of 256 KiB): page-aligned pieces in both
  // arrangements.
  const StateLayout layout =
      *StateLayout::Create("big", {{"s", {64, 1024}, DType::kF32}}, 4);
  std::unique_ptr<HostDevice> device = MakeDevice(layout, 32, 40);
  ASSERT_NE(device, nullptr);
  const std::string name = device->shm_name();
  const uint64_t slot = layout.bytes_per_slot();
  EXPECT_GE(AllocatedBytes(name), 32 * slot);
  EXPECT_EQ(device->CommittedBytes(), AllocatedBytes(name));

  testing::ProbeProcess probe(STATECACHE_REGION_PROBE);
  ASSERT_EQ(Open(probe, *device), "ok");
  std::vector<int64_t> all;
  for (int64_t s = 0; s < 32; ++s) all.push_back(s);
  ASSERT_EQ(probe.Ask("write 9 " + Sources(all)), "ok");

  // Shrink to 8: the tail's memory goes back to the system.
  const uint64_t before = AllocatedBytes(name);
  ASSERT_TRUE(device->Resize(8).ok());
  const uint64_t after = AllocatedBytes(name);
  EXPECT_LT(after, before);
  EXPECT_LE(after, 8 * slot + 64 * 1024);  // slack for partial pages
  EXPECT_GE(after, 8 * slot);
  EXPECT_EQ(device->num_slots(), 8);
  EXPECT_EQ(device->CommittedBytes(), after);
  RegionExport shrunk = device->Export();
  ASSERT_EQ(probe.Ask(absl::StrCat("remap 8 ", shrunk.capacity_slots)), "ok");
  EXPECT_EQ(probe.Ask("verify 9 0 1 2 3 4 5 6 7"), "ok");

  // Grow to 24: the kept slots keep their bytes, the new ones are zeros, and
  // copies reach them.
  ASSERT_TRUE(device->Resize(24).ok());
  EXPECT_GE(AllocatedBytes(name), 24 * slot);
  RegionExport grown = device->Export();
  ASSERT_EQ(probe.Ask(absl::StrCat("remap 24 ", grown.capacity_slots)), "ok");
  std::vector<int64_t> want = {0, 1, 2, 3, 4, 5, 6, 7};
  want.resize(24, -1);
  EXPECT_EQ(probe.Ask("verify 9 " + Sources(want)), "ok");
  ASSERT_TRUE(device->Copy({{{2, 20}, {3, 21}}}).ok());
  want[20] = 2;
  want[21] = 3;
  EXPECT_EQ(probe.Ask("verify 9 " + Sources(want)), "ok");

  // Past the capacity.
  EXPECT_EQ(device->Resize(41).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(device->Resize(-1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->num_slots(), 24);
  // Copies see the new size.
  EXPECT_EQ(device->Copy({{{0, 30}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(probe.Ask("quit"), "ok");
}

TEST_P(HostDeviceTest, ExportDescribesTheRegion) {
  std::unique_ptr<HostDevice> device = MakeDevice(PaddedLayout(), 6, 10);
  ASSERT_NE(device, nullptr);
  const RegionExport region = device->Export();
  EXPECT_EQ(region.backend, "host");
  EXPECT_EQ(region.handle, device->shm_name());
  EXPECT_THAT(region.handle, StartsWith(absl::StrCat("/", kPrefix, "-")));
  EXPECT_EQ(region.device_ordinal, -1);
  EXPECT_EQ(region.num_slots, 6);
  const int64_t capacity = GetParam() == Arrangement::kSlotMajor ? 6 : 10;
  EXPECT_EQ(region.capacity_slots, capacity);
  EXPECT_EQ(region.region_bytes, device->layout().RegionBytes(capacity));
  EXPECT_EQ(region.placements, device->layout().Placements(capacity));
  EXPECT_EQ(region.layout_fingerprint, device->layout().FingerprintHex());

  // The same bytes through the daemon's mapping and a client's.
  absl::StatusOr<HostRegion> client = HostRegion::Open(region);
  ASSERT_TRUE(client.ok()) << client.status();
  client->Typed<float>(1, 3, 5)[7] = 42.0f;
  const char* daemon_piece =
      device->base() + device->layout().PieceOffset(1, 3, 5, capacity);
  EXPECT_EQ(reinterpret_cast<const float*>(daemon_piece)[7], 42.0f);

  RegionExport other = region;
  other.handle = "/statecache_test-other";
  EXPECT_EQ(client->Remap(other).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(HostDeviceTest, ModeAndUnlinkOnDestruction) {
  HostDeviceOptions options;
  options.layout = PaddedLayout().WithArrangement(GetParam());
  options.num_slots = 2;
  options.epoch = NextEpoch();
  options.prefix = kPrefix;
  absl::StatusOr<std::unique_ptr<HostDevice>> device =
      HostDevice::Create(options);
  ASSERT_TRUE(device.ok()) << device.status();
  const std::string name = (*device)->shm_name();
  struct stat st;
  ASSERT_EQ(stat(("/dev/shm" + name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const RegionExport region = (*device)->Export();
  device->reset();
  EXPECT_NE(stat(("/dev/shm" + name).c_str(), &st), 0);
  EXPECT_EQ(HostRegion::Open(region).status().code(),
            absl::StatusCode::kNotFound);

  options.mode = 0640;
  options.epoch = NextEpoch();
  device = HostDevice::Create(options);
  ASSERT_TRUE(device.ok());
  ASSERT_EQ(stat(("/dev/shm" + (*device)->shm_name()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

// Three tensors, two of them padded (120 -> 128, 14 -> 16 bytes), over
// three layers: 384 bytes per layer.
StateLayout ImageLayout() {
  return *StateLayout::Create("images",
                              {{"conv", {3, 40}, DType::kBF16},
                               {"ssm", {2, 5, 3}, DType::kF32},
                               {"gate", {7}, DType::kBF16}},
                              3);
}

// A slot's bytes through the daemon's mapping, pieces in [layer][tensor]
// order.
std::vector<char> SlotBytes(const HostDevice& device, int64_t slot) {
  const StateLayout& l = device.layout();
  const int64_t capacity = device.Export().capacity_slots;
  std::vector<char> bytes;
  for (int64_t layer = 0; layer < l.num_layers(); ++layer) {
    for (int tensor = 0; tensor < l.num_tensors(); ++tensor) {
      const char* piece =
          device.base() + l.PieceOffset(tensor, layer, slot, capacity);
      bytes.insert(bytes.end(), piece, piece + l.padded_piece_bytes(tensor));
    }
  }
  return bytes;
}

std::vector<char> StagingBytes(const HostStaging& staging, uint64_t offset,
                               uint64_t bytes) {
  return std::vector<char>(staging.data() + offset,
                           staging.data() + offset + bytes);
}

TEST_P(HostDeviceTest, ReadSlotsCopiesEverySlotIntoItsImage) {
  const StateLayout layout = ImageLayout();
  ASSERT_EQ(layout.layer_bytes(), 384u);
  std::unique_ptr<HostDevice> device = MakeDevice(layout, 12, 16);
  ASSERT_NE(device, nullptr);
  FillSlots(*device, 3);
  const uint64_t b = layout.bytes_per_slot();
  absl::StatusOr<std::unique_ptr<HostStaging>> staging =
      device->AllocateStaging(8 * b);
  ASSERT_TRUE(staging.ok()) << staging.status();
  ASSERT_EQ((*staging)->size(), 8 * b);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*staging)->data()) % 64, 0u);
  std::memset((*staging)->data(), 0, 8 * b);

  // A run of neighbours, a lone slot after a gap, a fan-out of slot 5, and
  // the last slot at an offset that is not a multiple of the slot size.
  const std::vector<SlotImage> images = {
      {5, 0}, {6, b}, {7, 2 * b}, {2, 4 * b}, {5, 5 * b}, {11, 6 * b + 16}};
  absl::StatusOr<CopyResult> read = device->ReadSlots(**staging, images);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->bytes, 6 * b);
  if (GetParam() == Arrangement::kSlotMajor) {
    EXPECT_EQ(read->descriptors, 4);  // 5-6-7 is one range
  }

  // Every byte of the staging memory: the images, and zeros in the gaps.
  std::vector<char> want(8 * b, 0);
  for (const SlotImage& image : images) {
    const std::vector<char> bytes = Image(layout, 3, image.slot);
    std::copy(bytes.begin(), bytes.end(), want.begin() + image.offset);
  }
  EXPECT_TRUE(StagingBytes(**staging, 0, 8 * b) == want);
  for (const SlotImage& image : images) {
    EXPECT_TRUE(StagingBytes(**staging, image.offset, b) ==
                Image(layout, 3, image.slot))
        << "slot " << image.slot;
  }
  // The test can tell slots apart: slot 6's image is not slot 5's.
  EXPECT_FALSE(StagingBytes(**staging, b, b) == Image(layout, 3, 5));
  // The region is as it was.
  for (int64_t slot = 0; slot < 12; ++slot) {
    EXPECT_TRUE(SlotBytes(*device, slot) == Image(layout, 3, slot)) << slot;
  }
}

TEST_P(HostDeviceTest, WriteSlotsPutsImagesOntoSlots) {
  const StateLayout layout = ImageLayout();
  std::unique_ptr<HostDevice> device = MakeDevice(layout, 12, 16);
  ASSERT_NE(device, nullptr);
  FillSlots(*device, 4);
  const uint64_t b = layout.bytes_per_slot();
  absl::StatusOr<std::unique_ptr<HostStaging>> staging =
      device->AllocateStaging(6 * b);
  ASSERT_TRUE(staging.ok()) << staging.status();

  // Out and back onto other slots: 1, 2, 3 (one run) onto 8, 9, 10 and 0
  // onto 11, as a tier would move checkpoints out and in again.
  const std::vector<SlotImage> out = {{1, 0}, {2, b}, {3, 2 * b}, {0, 4 * b}};
  ASSERT_TRUE(device->ReadSlots(**staging, out).ok());
  const std::vector<SlotImage> in = {{8, 0}, {9, b}, {10, 2 * b}, {11, 4 * b}};
  absl::StatusOr<CopyResult> written = device->WriteSlots(**staging, in);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->bytes, 4 * b);
  if (GetParam() == Arrangement::kSlotMajor) {
    EXPECT_EQ(written->descriptors, 2);
  }
  const std::vector<int64_t> sources = {0, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 0};
  for (int64_t slot = 0; slot < 12; ++slot) {
    EXPECT_TRUE(SlotBytes(*device, slot) == Image(layout, 4, sources[slot]))
        << "slot " << slot << " should hold slot " << sources[slot];
  }

  // An image the caller wrote itself (another seed) onto slot 6: WriteSlots
  // alone, not only a round trip of ReadSlots.
  const std::vector<char> own = Image(layout, 99, 6);
  std::memcpy((*staging)->data() + 5 * b, own.data(), b);
  const SlotImage image{6, 5 * b};
  ASSERT_TRUE(device->WriteSlots(**staging, {&image, 1}).ok());
  EXPECT_TRUE(SlotBytes(*device, 6) == own);
  EXPECT_FALSE(SlotBytes(*device, 6) == Image(layout, 4, 6));
  EXPECT_TRUE(SlotBytes(*device, 5) == Image(layout, 4, 5));
  EXPECT_TRUE(SlotBytes(*device, 7) == Image(layout, 4, 7));
}

TEST_P(HostDeviceTest, RefusedImageCopiesChangeNothing) {
  const StateLayout layout = ImageLayout();
  std::unique_ptr<HostDevice> device = MakeDevice(layout, 12, 16);
  ASSERT_NE(device, nullptr);
  FillSlots(*device, 5);
  const uint64_t b = layout.bytes_per_slot();
  const uint64_t size = 4 * b;
  absl::StatusOr<std::unique_ptr<HostStaging>> staging =
      device->AllocateStaging(size);
  ASSERT_TRUE(staging.ok()) << staging.status();
  // Staging holds slot 0's image of another seed everywhere: a refused read
  // must not overwrite it, a refused write must not copy it.
  const std::vector<char> other = Image(layout, 77, 0);
  for (uint64_t offset = 0; offset < size; offset += b) {
    std::memcpy((*staging)->data() + offset, other.data(), b);
  }
  const std::vector<char> staging_before = StagingBytes(**staging, 0, size);

  struct Case {
    std::vector<SlotImage> images;
    bool write_only;  // refused by WriteSlots alone
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{0, 0}, {12, b}}, false, "images[1] (slot 12"},  // out of range
      {{{0, 0}, {-1, b}}, false, "slot out of range"},
      {{{0, 0}, {1, 3 * b + 16}}, false, "pass the end"},  // past the end
      {{{0, 0}, {1, b}, {2, b + 16}}, false, "overlaps"},  // overlapping
      {{{3, 0}, {3, 2 * b}}, true, "slot 3 is also written"},
  };
  for (const Case& c : cases) {
    if (!c.write_only) {
      absl::StatusOr<CopyResult> read = device->ReadSlots(**staging, c.images);
      EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument)
          << c.message;
      EXPECT_THAT(read.status().message(), HasSubstr(c.message));
    }
    absl::StatusOr<CopyResult> write = device->WriteSlots(**staging, c.images);
    EXPECT_EQ(write.status().code(), absl::StatusCode::kInvalidArgument)
        << c.message;
    EXPECT_THAT(write.status().message(), HasSubstr(c.message));
    EXPECT_TRUE(StagingBytes(**staging, 0, size) == staging_before)
        << c.message;
    for (int64_t slot = 0; slot < 12; ++slot) {
      EXPECT_TRUE(SlotBytes(*device, slot) == Image(layout, 5, slot))
          << c.message << ": slot " << slot;
    }
  }
  // A fan-out read is fine, a shrunk region's tail is out of range.
  const SlotImage twice[] = {{3, 0}, {3, 2 * b}};
  EXPECT_TRUE(device->ReadSlots(**staging, twice).ok());
  EXPECT_TRUE(StagingBytes(**staging, 2 * b, b) == Image(layout, 5, 3));
  ASSERT_TRUE(device->Resize(10).ok());
  const SlotImage tail{10, 0};
  EXPECT_EQ(device->WriteSlots(**staging, {&tail, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->AllocateStaging(0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Arrangements, HostDeviceTest,
                         ::testing::Values(Arrangement::kSlotMajor,
                                           Arrangement::kLayerMajor),
                         [](const auto& param) {
                           return std::string(ArrangementName(param.param));
                         });

TEST(HostDeviceRefusalTest, BadOptions) {
  HostDeviceOptions options;
  options.prefix = kPrefix;
  options.epoch = NextEpoch();
  EXPECT_EQ(HostDevice::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);  // empty layout
  options.layout = PaddedLayout();
  options.num_slots = 5;
  options.max_slots = 4;
  EXPECT_EQ(HostDevice::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.max_slots = 0;
  options.prefix = "bad-prefix";
  EXPECT_EQ(HostDevice::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.prefix = kPrefix;
  options.num_slots = -1;
  EXPECT_EQ(HostDevice::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HostDeviceRefusalTest, SameNameTwiceIsAlreadyExists) {
  HostDeviceOptions options;
  options.layout = PaddedLayout();
  options.num_slots = 1;
  options.prefix = kPrefix;
  options.epoch = NextEpoch();
  absl::StatusOr<std::unique_ptr<HostDevice>> first =
      HostDevice::Create(options);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(HostDevice::Create(options).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(DeviceFactoryTest, CreatesHostAndRefusesTheRest) {
  DeviceOptions options;
  options.layout = PaddedLayout();
  options.num_slots = 3;
  options.epoch = NextEpoch();
  options.shm_prefix = kPrefix;
  absl::StatusOr<std::unique_ptr<Device>> host = CreateDevice(options);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ((*host)->backend(), "host");
  EXPECT_EQ((*host)->Export().backend, "host");
  EXPECT_EQ((*host)->max_slots(), kMaxLayoutSlots);
  EXPECT_THAT(AvailableDeviceBackends(), ::testing::Contains("host"));

  options.backend = "tpu";
  EXPECT_EQ(CreateDevice(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  // No GPU here (or no GPU flavour built): unavailable, never a crash.
  options.backend = "gpu";
  absl::StatusOr<std::unique_ptr<Device>> gpu = CreateDevice(options);
  if (!gpu.ok()) {
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kUnavailable)
        << gpu.status();
  }
  options.backend = "host";
  options.copy_threads = 0;
  EXPECT_EQ(CreateDevice(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace statecache

// The batched copy kernel and the GPU backend on a real device (HIP or CUDA
// flavour). Every test skips when the flavour's runtime sees no device.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/device/copy_plan.h"
#include "daemon/device/gpu_device.h"
#include "daemon/device/layout_presets.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/gpu_copier.h"
#include "kernels/gpu_runtime.h"

namespace statecache {

// Test names and skip lines say "slot_major", not "1-byte object <00>".
void PrintTo(Arrangement arrangement, std::ostream* os) {
  *os << ArrangementName(arrangement);
}

namespace {

constexpr char kChildEnv[] = "STATECACHE_GPU_IPC_CHILD";

#define ASSERT_HIP(expr) ASSERT_EQ((expr), hipSuccess) << #expr

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GpuDevice::DeviceCount() == 0) {
      GTEST_SKIP() << "no " STATECACHE_GPU_BACKEND_NAME " device";
    }
    ASSERT_HIP(hipSetDevice(0));
  }
};

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(bytes.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return bytes;
}

void Reference(absl::Span<const CopyDescriptor> table,
               std::vector<uint8_t>& region) {
  for (const CopyDescriptor& d : table) {
    std::memmove(region.data() + d.dst_offset, region.data() + d.src_offset,
                 d.bytes);
  }
}

TEST_F(GpuTest, KernelMatchesMemcpyOnRandomTables) {
  const uint64_t kRegion = 64 << 20;
  void* region = nullptr;
  ASSERT_HIP(hipMalloc(&region, kRegion));
  hipStream_t stream;
  ASSERT_HIP(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));
  absl::StatusOr<std::unique_ptr<GpuCopier>> copier = GpuCopier::Create();
  ASSERT_TRUE(copier.ok()) << copier.status();
  std::mt19937_64 rng(5);
  for (int round = 0; round < 24; ++round) {
    std::vector<uint8_t> host = RandomBytes(kRegion, round);
    ASSERT_HIP(hipMemcpy(region, host.data(), kRegion, hipMemcpyHostToDevice));
    // Disjoint segments: destinations in one half of a shuffled set, sources
    // in the other; unaligned offsets and odd sizes on odd rounds.
    const int count = 1 + static_cast<int>(rng() % 400);
    const uint64_t segment = kRegion / (2 * count);
    std::vector<uint64_t> segments(2 * count);
    for (size_t i = 0; i < segments.size(); ++i) segments[i] = i * segment;
    std::shuffle(segments.begin(), segments.end(), rng);
    std::vector<CopyDescriptor> table;
    for (int i = 0; i < count; ++i) {
      const bool aligned = round % 2 == 0;
      uint64_t bytes = 1 + rng() % (segment - 32);
      if (aligned) bytes = std::max<uint64_t>(16, bytes / 16 * 16);
      uint64_t src = segments[count + i] + rng() % (segment - bytes);
      uint64_t dst = segments[i] + rng() % (segment - bytes);
      if (aligned) {
        src = src / 16 * 16;
        dst = dst / 16 * 16;
      }
      table.push_back({src, dst, bytes});
    }
    ASSERT_TRUE(ValidateCopyTable(table, kRegion, kRegion, true).ok());
    Reference(table, host);
    absl::Status run = (*copier)->Run(table, region, region, stream);
    ASSERT_TRUE(run.ok()) << run;
    std::vector<uint8_t> got(kRegion);
    ASSERT_HIP(hipMemcpy(got.data(), region, kRegion, hipMemcpyDeviceToHost));
    ASSERT_TRUE(got == host) << "round " << round;
  }
  ASSERT_HIP(hipStreamDestroy(stream));
  ASSERT_HIP(hipFree(region));
}

class GpuDeviceTest : public GpuTest,
                      public ::testing::WithParamInterface<Arrangement> {};

TEST_P(GpuDeviceTest, CopiesQwen3NextSlots) {
  GpuDeviceOptions options;
  options.layout = *LayoutPreset("qwen3-next-80b-a3b", 1, GetParam());
  options.num_slots = 12;
  options.max_slots = 16;
  absl::StatusOr<std::unique_ptr<GpuDevice>> device =
      GpuDevice::Create(options);
  ASSERT_TRUE(device.ok()) << device.status();
  const uint64_t bytes = options.layout.RegionBytes(16);
  std::vector<uint8_t> host = RandomBytes(bytes, 99);
  ASSERT_HIP(
      hipMemcpy((*device)->base(), host.data(), bytes, hipMemcpyHostToDevice));
  const std::vector<SlotPair> pairs = {
      {0, 8}, {1, 9}, {2, 10}, {5, 11}, {5, 7}};
  absl::StatusOr<CopyTable> table =
      BuildCopyTable(options.layout, 16, 12, pairs);
  ASSERT_TRUE(table.ok());
  Reference(table->descriptors, host);
  absl::StatusOr<CopyResult> copied = (*device)->Copy(pairs);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->bytes, 5 * options.layout.bytes_per_slot());
  std::vector<uint8_t> got(bytes);
  ASSERT_HIP(
      hipMemcpy(got.data(), (*device)->base(), bytes, hipMemcpyDeviceToHost));
  EXPECT_TRUE(got == host);

  EXPECT_EQ((*device)->Copy({{{1, 12}}}).status().code(),
            absl::StatusCode::kInvalidArgument);  // slot 12 not in use
  EXPECT_EQ((*device)->Resize(17).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE((*device)->Resize(16).ok());
  EXPECT_TRUE((*device)->Copy({{{1, 12}}}).ok());
  EXPECT_EQ((*device)->CommittedBytes(), bytes);
  const RegionExport region = (*device)->Export();
  EXPECT_EQ(region.backend, STATECACHE_GPU_BACKEND_NAME);
  EXPECT_EQ(region.handle.size(), sizeof(hipIpcMemHandle_t));
  EXPECT_EQ(region.capacity_slots, 16);
  EXPECT_EQ(region.placements, options.layout.Placements(16));
}

// The host tier's copies: slot images out to pinned staging memory and back
// onto other slots, in one launch each, byte for byte (an image is the
// slot's pieces in [layer][tensor] order, as BuildImageCopyTable lays it).
TEST_P(GpuDeviceTest, SlotImagesRoundTripThroughPinnedStaging) {
  GpuDeviceOptions options;
  options.layout = *LayoutPreset("qwen3-next-80b-a3b", 1, GetParam());
  options.num_slots = 12;
  options.max_slots = 12;
  absl::StatusOr<std::unique_ptr<GpuDevice>> device =
      GpuDevice::Create(options);
  ASSERT_TRUE(device.ok()) << device.status();
  const uint64_t region_bytes = options.layout.RegionBytes(12);
  const uint64_t image = options.layout.bytes_per_slot();
  std::vector<uint8_t> host = RandomBytes(region_bytes, 7);
  ASSERT_HIP(hipMemcpy((*device)->base(), host.data(), region_bytes,
                       hipMemcpyHostToDevice));
  absl::StatusOr<std::unique_ptr<HostStaging>> staging =
      (*device)->AllocateStaging(3 * image);
  ASSERT_TRUE(staging.ok()) << staging.status();
  const std::vector<SlotImage> out = {{2, 0}, {5, image}, {9, 2 * image}};
  absl::StatusOr<CopyResult> read = (*device)->ReadSlots(**staging, out);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->bytes, 3 * image);
  // The staging bytes are what the table says they are.
  std::vector<uint8_t> want(3 * image);
  absl::StatusOr<CopyTable> table = BuildImageCopyTable(
      options.layout, 12, 12, 3 * image, out, /*to_region=*/false);
  ASSERT_TRUE(table.ok());
  for (const CopyDescriptor& d : table->descriptors) {
    std::memcpy(want.data() + d.dst_offset, host.data() + d.src_offset,
                d.bytes);
  }
  EXPECT_EQ(std::memcmp((*staging)->data(), want.data(), want.size()), 0);
  // Back onto slots 0, 1 and 3: they now hold slots 2, 5 and 9.
  const std::vector<SlotImage> in = {{0, 0}, {1, image}, {3, 2 * image}};
  ASSERT_TRUE((*device)->WriteSlots(**staging, in).ok());
  std::vector<uint8_t> got(region_bytes);
  ASSERT_HIP(hipMemcpy(got.data(), (*device)->base(), region_bytes,
                       hipMemcpyDeviceToHost));
  const std::vector<SlotPair> same = {{2, 0}, {5, 1}, {9, 3}};
  absl::StatusOr<CopyTable> moved =
      BuildCopyTable(options.layout, 12, 12, same);
  ASSERT_TRUE(moved.ok());
  Reference(moved->descriptors, host);
  EXPECT_TRUE(got == host);
  EXPECT_EQ((*device)->ReadSlots(**staging, {{{12, 0}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Arrangements, GpuDeviceTest,
                         ::testing::Values(Arrangement::kSlotMajor,
                                           Arrangement::kLayerMajor),
                         [](const auto& param) {
                           return std::string(ArrangementName(param.param));
                         });

StateLayout IpcLayout() {
  return *StateLayout::Create("ipc", {{"s", {1000}, DType::kF32}}, 3);
}

// The child half of IpcHandleOpensInAnotherProcess, run by exec'ing this
// binary with kChildEnv set: opens the handle, checks slot 1 holds 0x11
// bytes, fills slot 2 with 0x22.
TEST_F(GpuTest, IpcChild) {
  const char* hex = std::getenv(kChildEnv);
  if (hex == nullptr) GTEST_SKIP() << "run by IpcHandleOpensInAnotherProcess";
  const std::string raw = absl::HexStringToBytes(hex);
  hipIpcMemHandle_t handle;
  ASSERT_EQ(raw.size(), sizeof(handle));
  std::memcpy(&handle, raw.data(), sizeof(handle));
  void* base = nullptr;
  ASSERT_HIP(hipIpcOpenMemHandle(&base, handle, hipIpcMemLazyEnablePeerAccess));
  const StateLayout layout = IpcLayout();
  const uint64_t slot = layout.bytes_per_slot();
  std::vector<uint8_t> got(slot);
  ASSERT_HIP(hipMemcpy(got.data(), static_cast<char*>(base) + slot, slot,
                       hipMemcpyDeviceToHost));
  EXPECT_EQ(got, std::vector<uint8_t>(slot, 0x11));
  ASSERT_HIP(hipMemset(static_cast<char*>(base) + 2 * slot, 0x22, slot));
  ASSERT_HIP(hipDeviceSynchronize());
  ASSERT_HIP(hipIpcCloseMemHandle(base));
}

TEST_F(GpuTest, IpcHandleOpensInAnotherProcess) {
  if (std::getenv(kChildEnv) != nullptr) GTEST_SKIP() << "in the child";
  GpuDeviceOptions options;
  options.layout = IpcLayout();
  options.num_slots = 4;
  absl::StatusOr<std::unique_ptr<GpuDevice>> device =
      GpuDevice::Create(options);
  ASSERT_TRUE(device.ok()) << device.status();
  const uint64_t slot = options.layout.bytes_per_slot();
  char* base = static_cast<char*>((*device)->base());
  ASSERT_HIP(hipMemset(base + slot, 0x11, slot));
  ASSERT_HIP(hipDeviceSynchronize());
  const std::string hex = absl::BytesToHexString((*device)->Export().handle);

  // fork + exec at once: the child must not use the inherited GPU context,
  // and only async-signal-safe calls run between the two, so the argument
  // and environment vectors are built before.
  std::string entry = absl::StrCat(kChildEnv, "=", hex);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string arg0 = "gpu_tests", filter = "--gtest_filter=*GpuTest.IpcChild";
  char* argv[] = {arg0.data(), filter.data(), nullptr};
  const pid_t pid = fork();
  if (pid == 0) {
    execve("/proc/self/exe", argv, envp.data());
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child failed (see its output)";
  std::vector<uint8_t> got(slot);
  ASSERT_HIP(
      hipMemcpy(got.data(), base + 2 * slot, slot, hipMemcpyDeviceToHost));
  EXPECT_EQ(got, std::vector<uint8_t>(slot, 0x22));
}

}  // namespace
}  // namespace statecache

// copy_bench: the daemon's batched slot copy against the baselines it must
// beat, measured in the same run.
//
//   copy_bench [--reps N] [--threads N] [--small_pairs N] [--large_pairs N]
//              [--gpu_small_pairs N] [--gpu_large_pairs N] [--gpu=false]
//
// Host (a HostDevice region in /dev/shm, pairs (2i -> 2i+1), so no two
// pairs coalesce): for a small layout (per-layer pieces of 2 and 6 KiB) and
// a large one (Qwen3-Next-80B-A3B, 37.7 MiB slots), each slot-major and
// layer-major, prints GB/s of
//   memcpy     one memcpy of the same total bytes (first half of the region
//              onto the second)
//   per-piece  one memcpy call per (pair, layer, tensor) piece
//   batched/1  the copy table on a HostCopier with one thread
//   batched    Device::Copy(pairs): table build + HostCopier (--threads)
// and the ratios batched/memcpy and batched/per-piece. Then what zeroing a
// cold admit's slot would cost the daemon (cold slots hold their
// last holder's bytes): one memset per piece of one slot, in microseconds
// per slot, against one memcpy of the same bytes (a slot's relocation).
//
// GPU (when the build has a GPU flavour and a device is present), the same
// cases on the device: the kernel (one launch of the prepared table) against
// one device-to-device hipMemcpyAsync of the same bytes and against one
// hipMemcpyAsync per piece, plus the kernel with its table upload.
//
// Every figure is the median of --reps runs after one warm-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/copy_bench_common.h"
#include "daemon/device/copy_plan.h"
#include "daemon/device/host_device.h"
#include "daemon/device/layout_presets.h"
#include "kernels/host_copy.h"

#if defined(STATECACHE_COPY_BENCH_GPU)
#include "bench/copy_bench_gpu.h"
#endif

ABSL_FLAG(int, reps, 7, "runs per measurement (median reported)");
ABSL_FLAG(int, threads, 4,
          "HostCopier threads for 'batched' (caller included)");
ABSL_FLAG(int, small_pairs, 512, "slot pairs per batch, small layout (host)");
ABSL_FLAG(int, large_pairs, 12, "slot pairs per batch, Qwen3-Next (host)");
ABSL_FLAG(int, gpu_small_pairs, 2048, "slot pairs per batch, small (GPU)");
ABSL_FLAG(int, gpu_large_pairs, 64, "slot pairs per batch, Qwen3-Next (GPU)");
ABSL_FLAG(bool, gpu, true, "run the GPU part when built and a device exists");

namespace statecache {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

struct HostResult {
  double memcpy_s, per_piece_s, batched1_s, batched_s;
  // One slot: its pieces memset to 0; its bytes memcpy'd onto another slot.
  double zero_slot_s, copy_slot_s;
};

HostResult RunHostCase(const BenchCase& c, int reps, int threads) {
  HostDeviceOptions options;
  options.layout = c.layout;
  options.num_slots = 2 * c.pairs;
  options.max_slots = 2 * c.pairs;
  options.epoch =
      static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  options.prefix = "statecache_bench";
  options.copier.num_threads = threads;
  absl::StatusOr<std::unique_ptr<HostDevice>> device =
      HostDevice::Create(options);
  if (!device.ok()) {
    std::fprintf(stderr, "HostDevice: %s\n",
                 std::string(device.status().message()).c_str());
    std::exit(1);
  }
  char* base = (*device)->base();
  const uint64_t total = c.layout.RegionBytes(c.pairs);
  std::memset(base, 1, 2 * total);  // every page touched before timing

  const std::vector<SlotPair> pairs = BenchPairs(c.pairs);
  const int64_t capacity = 2 * c.pairs;
  absl::StatusOr<CopyTable> table =
      BuildCopyTable(c.layout, capacity, capacity, pairs);
  HostCopier single({.num_threads = 1});

  // Calls f(tensor, layer) for each piece of a slot.
  auto each_piece = [&c](auto&& f) {
    for (int64_t layer = 0; layer < c.layout.num_layers(); ++layer) {
      for (int t = 0; t < c.layout.num_tensors(); ++t) f(t, layer);
    }
  };
  auto copy_slot = [&](int64_t src, int64_t dst) {
    each_piece([&](int t, int64_t layer) {
      std::memcpy(base + c.layout.PieceOffset(t, layer, dst, capacity),
                  base + c.layout.PieceOffset(t, layer, src, capacity),
                  c.layout.padded_piece_bytes(t));
    });
  };
  std::vector<double> memcpy_s, piece_s, batched1_s, batched_s, zero_s, copy_s;
  for (int rep = -1; rep < reps; ++rep) {  // rep -1: warm-up
    // A different pair each rep, so a small slot is not left in cache.
    const auto [from, to] = pairs[(rep + 1) % pairs.size()];
    auto zero_start = Clock::now();
    each_piece([&](int t, int64_t layer) {
      std::memset(base + c.layout.PieceOffset(t, layer, to, capacity), 0,
                  c.layout.padded_piece_bytes(t));
    });
    const double t_zero = Seconds(zero_start);
    zero_start = Clock::now();
    copy_slot(from, to);
    const double t_copy = Seconds(zero_start);

    auto start = Clock::now();
    std::memcpy(base + total, base, total);
    const double t_memcpy = Seconds(start);

    start = Clock::now();
    for (const auto& [src, dst] : pairs) copy_slot(src, dst);
    const double t_piece = Seconds(start);

    start = Clock::now();
    single.Run(table->descriptors, base, base);
    const double t_batched1 = Seconds(start);

    start = Clock::now();
    if (!(*device)->Copy(pairs).ok()) std::exit(1);
    const double t_batched = Seconds(start);

    if (rep >= 0) {
      memcpy_s.push_back(t_memcpy);
      piece_s.push_back(t_piece);
      batched1_s.push_back(t_batched1);
      batched_s.push_back(t_batched);
      zero_s.push_back(t_zero);
      copy_s.push_back(t_copy);
    }
  }
  return {Median(memcpy_s),  Median(piece_s), Median(batched1_s),
          Median(batched_s), Median(zero_s),  Median(copy_s)};
}

void RunHost(int reps, int threads) {
  struct Zeroing {
    std::string name;
    uint64_t bytes_per_slot;
    HostResult result;
  };
  std::vector<Zeroing> zeroing;
  std::printf(
      "host: %d threads for batched; GB/s = bytes copied / time, median of %d"
      "\n%-24s %9s %6s %9s %9s %9s %9s %9s %9s\n",
      threads, reps, "case", "MiB", "descr", "memcpy", "per-piece", "batched/1",
      "batched", "b/memcpy", "b/piece");
  for (const BenchCase& c : BenchCases(absl::GetFlag(FLAGS_small_pairs),
                                       absl::GetFlag(FLAGS_large_pairs))) {
    const HostResult r = RunHostCase(c, reps, threads);
    zeroing.push_back({c.name, c.layout.bytes_per_slot(), r});
    const double bytes = static_cast<double>(c.layout.RegionBytes(c.pairs));
    const std::vector<SlotPair> pairs = BenchPairs(c.pairs);
    const int64_t descriptors =
        BuildCopyTable(c.layout, 2 * c.pairs, 2 * c.pairs, pairs)
            ->descriptors.size();
    std::printf("%-24s %9.1f %6lld %9.2f %9.2f %9.2f %9.2f %8.2fx %8.2fx\n",
                c.name.c_str(), bytes / (1 << 20),
                static_cast<long long>(descriptors), bytes / r.memcpy_s / 1e9,
                bytes / r.per_piece_s / 1e9, bytes / r.batched1_s / 1e9,
                bytes / r.batched_s / 1e9, r.memcpy_s / r.batched_s,
                r.per_piece_s / r.batched_s);
  }
  std::printf(
      "\nzeroing a cold slot (host, one thread), us per slot, median of %d\n"
      "%-24s %9s %9s %9s %9s\n",
      reps, "case", "KiB/slot", "zero", "copy", "zero/copy");
  for (const Zeroing& z : zeroing) {
    std::printf("%-24s %9.1f %9.1f %9.1f %8.2fx\n", z.name.c_str(),
                static_cast<double>(z.bytes_per_slot) / 1024,
                z.result.zero_slot_s * 1e6, z.result.copy_slot_s * 1e6,
                z.result.zero_slot_s / z.result.copy_slot_s);
  }
}

}  // namespace
}  // namespace statecache

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  statecache::RunHost(reps, std::max(1, absl::GetFlag(FLAGS_threads)));
#if defined(STATECACHE_COPY_BENCH_GPU)
  if (absl::GetFlag(FLAGS_gpu)) {
    statecache::RunGpuCopyBench(
        statecache::BenchCases(absl::GetFlag(FLAGS_gpu_small_pairs),
                               absl::GetFlag(FLAGS_gpu_large_pairs)),
        reps);
  }
#else
  std::printf("gpu: not built (no GPU flavour in this build)\n");
#endif
  return 0;
}

#include "bench/copy_bench_gpu.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "daemon/device/gpu_device.h"
#include "kernels/gpu_copier.h"
#include "kernels/gpu_runtime.h"

namespace statecache {
namespace {

void Check(hipError_t err, const char* what) {
  if (err != hipSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, hipGetErrorString(err));
    std::exit(1);
  }
}

// Seconds of GPU time between two events around `enqueue`.
template <typename F>
double Timed(hipStream_t stream, hipEvent_t start, hipEvent_t stop,
             F&& enqueue) {
  Check(hipEventRecord(start, stream), "hipEventRecord");
  enqueue();
  Check(hipEventRecord(stop, stream), "hipEventRecord");
  Check(hipEventSynchronize(stop), "hipEventSynchronize");
  float ms = 0;
  Check(hipEventElapsedTime(&ms, start, stop), "hipEventElapsedTime");
  return ms / 1e3;
}

}  // namespace

void RunGpuCopyBench(const std::vector<BenchCase>& cases, int reps) {
  if (GpuDevice::DeviceCount() == 0) {
    std::printf("gpu (%s): no device, skipped\n", STATECACHE_GPU_BACKEND_NAME);
    return;
  }
  Check(hipSetDevice(0), "hipSetDevice");
  hipStream_t stream;
  Check(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking), "stream");
  hipEvent_t start, stop;
  Check(hipEventCreate(&start), "event");
  Check(hipEventCreate(&stop), "event");
  absl::StatusOr<std::unique_ptr<GpuCopier>> copier = GpuCopier::Create();
  if (!copier.ok()) std::exit(1);

  std::printf(
      "gpu (%s, device 0): GB/s, median of %d\n"
      "%-24s %9s %7s %9s %9s %9s %9s %9s %9s\n",
      STATECACHE_GPU_BACKEND_NAME, reps, "case", "MiB", "chunks", "d2d",
      "per-piece", "kernel", "k+upload", "k/d2d", "k/piece");
  for (const BenchCase& c : cases) {
    const int64_t capacity = 2 * c.pairs;
    const uint64_t total = c.layout.RegionBytes(c.pairs);
    char* base = nullptr;
    Check(hipMalloc(reinterpret_cast<void**>(&base), 2 * total), "hipMalloc");
    Check(hipMemset(base, 1, 2 * total), "hipMemset");
    const std::vector<SlotPair> pairs = BenchPairs(c.pairs);
    absl::StatusOr<CopyTable> table =
        BuildCopyTable(c.layout, capacity, capacity, pairs);
    if (!table.ok() || !(*copier)->Prepare(table->descriptors, stream).ok()) {
      std::exit(1);
    }
    std::vector<double> d2d_s, piece_s, kernel_s, run_s;
    for (int rep = -1; rep < reps; ++rep) {
      const double t_d2d = Timed(stream, start, stop, [&] {
        Check(hipMemcpyAsync(base + total, base, total, hipMemcpyDeviceToDevice,
                             stream),
              "hipMemcpyAsync");
      });
      const double t_piece = Timed(stream, start, stop, [&] {
        for (const auto& [src, dst] : pairs) {
          for (int64_t layer = 0; layer < c.layout.num_layers(); ++layer) {
            for (int t = 0; t < c.layout.num_tensors(); ++t) {
              Check(hipMemcpyAsync(
                        base + c.layout.PieceOffset(t, layer, dst, capacity),
                        base + c.layout.PieceOffset(t, layer, src, capacity),
                        c.layout.padded_piece_bytes(t), hipMemcpyDeviceToDevice,
                        stream),
                    "hipMemcpyAsync");
            }
          }
        }
      });
      const double t_kernel = Timed(stream, start, stop, [&] {
        if (!(*copier)->Launch(base, base, stream).ok()) std::exit(1);
      });
      // The daemon's path: split, upload, launch, synchronise (wall clock).
      const auto wall = std::chrono::steady_clock::now();
      if (!(*copier)->Run(table->descriptors, base, base, stream).ok()) {
        std::exit(1);
      }
      const double t_run =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - wall)
              .count();
      if (rep >= 0) {
        d2d_s.push_back(t_d2d);
        piece_s.push_back(t_piece);
        kernel_s.push_back(t_kernel);
        run_s.push_back(t_run);
      }
    }
    const double bytes = static_cast<double>(total);
    const double d2d = Median(d2d_s), piece = Median(piece_s),
                 kernel = Median(kernel_s), run = Median(run_s);
    std::printf("%-24s %9.1f %7lld %9.1f %9.1f %9.1f %9.1f %8.2fx %8.2fx\n",
                c.name.c_str(), bytes / (1 << 20),
                static_cast<long long>((*copier)->prepared_descriptors()),
                bytes / d2d / 1e9, bytes / piece / 1e9, bytes / kernel / 1e9,
                bytes / run / 1e9, d2d / kernel, piece / kernel);
    Check(hipFree(base), "hipFree");
  }
  Check(hipEventDestroy(start), "event");
  Check(hipEventDestroy(stop), "event");
  Check(hipStreamDestroy(stream), "stream");
}

}  // namespace statecache

// What copy_bench's host and GPU parts share: the cases, the pairs, medians.
#ifndef STATECACHE_BENCH_COPY_BENCH_COMMON_H_
#define STATECACHE_BENCH_COPY_BENCH_COMMON_H_

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/device/copy_plan.h"
#include "daemon/device/layout_presets.h"
#include "vocabulary/layout.h"

namespace statecache {

struct BenchCase {
  std::string name;
  StateLayout layout;
  int pairs = 0;
};

// Small pieces: 6 KiB conv + 2 KiB ssm per layer, 24 layers (192 KiB
// slots).
inline StateLayout SmallBenchLayout(Arrangement arrangement) {
  return *StateLayout::Create(
      "small",
      {{"conv", {3, 1024}, DType::kBF16}, {"ssm", {16, 64}, DType::kBF16}}, 24,
      arrangement);
}

inline std::vector<BenchCase> BenchCases(int small_pairs, int large_pairs) {
  std::vector<BenchCase> cases;
  for (Arrangement a : {Arrangement::kSlotMajor, Arrangement::kLayerMajor}) {
    cases.push_back({absl::StrCat("small/", std::string(ArrangementName(a))),
                     SmallBenchLayout(a), small_pairs});
  }
  for (Arrangement a : {Arrangement::kSlotMajor, Arrangement::kLayerMajor}) {
    cases.push_back(
        {absl::StrCat("qwen3-next/", std::string(ArrangementName(a))),
         *LayoutPreset("qwen3-next-80b-a3b", 0, a), large_pairs});
  }
  return cases;
}

// (2i -> 2i+1): every pair separate, so none coalesces with another; the
// sources are the even slots, the destinations the odd ones.
inline std::vector<SlotPair> BenchPairs(int pairs) {
  std::vector<SlotPair> out;
  for (int i = 0; i < pairs; ++i) out.push_back({2 * i, 2 * i + 1});
  return out;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace statecache

#endif  // STATECACHE_BENCH_COPY_BENCH_COMMON_H_

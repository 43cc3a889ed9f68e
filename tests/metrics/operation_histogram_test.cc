// Metrics::OnOperations folds a Step's timed operations into the
// per-operation histograms with one ObserveMultiple per kind; the buckets,
// counts and sums must be exactly what one Histogram::Observe per timed
// operation would give, boundaries and +Inf included. Its counts go to
// statecache_step_operations_total.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "daemon/metrics/metrics.h"
#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"
#include "prometheus/histogram.h"

namespace statecache {
namespace {

// The latency buckets metrics.cc uses for operations.
const prometheus::Histogram::BucketBoundaries kBounds = {
    1e-6, 2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5,   1e-4, 2.5e-4,
    5e-4, 1e-3,   2.5e-3, 5e-3, 1e-2,   2.5e-2, 0.1,  1.0};

std::unique_ptr<StateCache> NewCache() {
  StateCacheOptions options;
  options.identity.set_model_id("m");
  options.identity.set_hash_block_size(64);
  options.num_slots = 8;
  options.max_slots = 64;
  options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
  return *StateCache::Create(std::move(options));
}

// The exposition lines of one op's series, e.g. `..._bucket{le="1e-06",
// op="admit"} 3`, as "suffix le value" strings in order.
std::vector<std::string> Series(const std::string& text, absl::string_view op) {
  std::vector<std::string> out;
  const std::string label = "op=\"" + std::string(op) + "\"";
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, "statecache_step_operation_duration_seconds"))
      continue;
    if (line.find(label) == absl::string_view::npos) continue;
    out.emplace_back(line);
  }
  return out;
}

TEST(OperationHistogram, BatchedEqualsOneObservePerSample) {
  auto cache = NewCache();
  Metrics metrics(cache.get(), Metrics::Options{.version = "test"});
  // Values on, just below and just above boundaries, zero, and past the
  // last bound (+Inf); two kinds interleaved, one refused sample.
  std::vector<double> admit_values = {
      0, 1e-6, 1e-6 * 1.0000001, 2.4e-6, 2.5e-6, 5e-3, 0.1, 1.0, 2.0, 1e-4};
  std::vector<double> checkpoint_values = {3e-7, 7e-5, 7e-5, 0.3};
  StepOperations step;
  for (size_t i = 0; i < admit_values.size(); ++i) {
    step.timed.push_back(
        {v1::Operation::kAdmit,
         i == 3 ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kOk,
         admit_values[i]});
    if (i == 3) step.refused.push_back(step.timed.back());
    if (i < checkpoint_values.size()) {
      step.timed.push_back({v1::Operation::kCheckpoint, absl::StatusCode::kOk,
                            checkpoint_values[i]});
    }
  }
  // Operations that ran but were not timed are counted, not observed.
  step.counts[v1::Operation::kAdmit] = 25;
  step.counts[v1::Operation::kCheckpoint] = 7;
  // Two Steps: the scratch must be reset between them.
  metrics.OnOperations(step);
  metrics.OnOperations(step);

  for (const auto& [op, values] :
       {std::pair<std::string, std::vector<double>>{"admit", admit_values},
        {"checkpoint", checkpoint_values}}) {
    SCOPED_TRACE(op);
    prometheus::Histogram reference(kBounds);
    for (int rep = 0; rep < 2; ++rep) {
      for (double v : values) reference.Observe(v);
    }
    const prometheus::ClientMetric want = reference.Collect();
    const std::vector<std::string> got = Series(metrics.Render(), op);
    // Buckets (16 bounds + Inf, in order), _sum and _count.
    ASSERT_EQ(got.size(), want.histogram.bucket.size() + 2);
    std::vector<std::string> buckets;
    for (const std::string& line : got) {
      if (line.find("_bucket") != std::string::npos) buckets.push_back(line);
    }
    ASSERT_EQ(buckets.size(), want.histogram.bucket.size());
    for (size_t b = 0; b < want.histogram.bucket.size(); ++b) {
      const std::string& line = buckets[b];
      uint64_t count = 0;
      ASSERT_TRUE(absl::SimpleAtoi(line.substr(line.rfind(' ') + 1), &count))
          << line;
      EXPECT_EQ(count, want.histogram.bucket[b].cumulative_count) << line;
    }
    double sum = 0;
    uint64_t count = 0;
    for (const std::string& line : got) {
      const std::string value = line.substr(line.rfind(' ') + 1);
      if (line.find("_sum") != std::string::npos) {
        ASSERT_TRUE(absl::SimpleAtod(value, &sum));
      }
      if (line.find("_count") != std::string::npos) {
        ASSERT_TRUE(absl::SimpleAtoi(value, &count));
      }
    }
    EXPECT_DOUBLE_EQ(sum, want.histogram.sample_sum);
    EXPECT_EQ(count, want.histogram.sample_count);
  }
  // The refused admit counted once per Step.
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("statecache_step_operation_refusals_total{code="
                      "\"RESOURCE_EXHAUSTED\",op=\"admit\"} 2"),
            std::string::npos);
  // Every operation counted, timed or not.
  EXPECT_NE(text.find("statecache_step_operations_total{op=\"admit\"} 50"),
            std::string::npos);
  EXPECT_NE(text.find("statecache_step_operations_total{op=\"checkpoint\"} 14"),
            std::string::npos);
}

}  // namespace
}  // namespace statecache

// Every family Metrics exposes is built once, at start, in its registry,
// and a scrape only refreshes the values of the children it holds: the registry
// holds every family a scrape shows, scraping adds none, the children fetched
// before any scrape are the ones whose values the scrapes move, and a counter
// fed from a GetStats total grows by what the total grew, not by the total at
// each scrape.
//
// The held children are fetched the way prometheus-cpp hands out existing
// ones: a builder registering a name the registry already has returns that
// family (InsertBehavior::Merge), and Family::Add of labels it already has
// returns that child.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "daemon/metrics/metrics.h"
#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace statecache {
namespace {

constexpr int64_t kBlock = 64;

std::unique_ptr<StateCache> NewCache() {
  StateCacheOptions options;
  options.identity.set_model_id("m");
  options.identity.set_hash_block_size(kBlock);
  options.num_slots = 8;
  options.max_slots = 64;
  options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
  options.operation_timing_interval = 1;  // every operation observed
  return *StateCache::Create(std::move(options));
}

std::string Attach(StateCache& cache) {
  v1::AttachRequest req;
  req.mutable_identity()->set_model_id("m");
  req.mutable_identity()->set_hash_block_size(kBlock);
  v1::AttachResponse resp;
  EXPECT_TRUE(cache.Attach(req, &resp).ok());
  return resp.session_id();
}

// The family names of an exposition text (its TYPE lines), in order.
std::vector<std::string> ExposedFamilies(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, "# TYPE ")) continue;
    std::vector<std::string> words = absl::StrSplit(line, ' ');
    out.push_back(words[2]);
  }
  return out;
}

std::set<std::string> RegistryFamilies(const prometheus::Registry& registry) {
  std::set<std::string> out;
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    out.insert(f.name);
  }
  return out;
}

TEST(MetricsFamilies, BuiltOnceAndRefreshedThroughHeldChildren) {
  auto cache = NewCache();
  Metrics metrics(cache.get(), Metrics::Options{.version = "test"});
  cache->AddObserver(&metrics);
  prometheus::Registry& registry = metrics.registry_for_testing();

  // Before any scrape: the families are there already.
  const std::set<std::string> at_start = RegistryFamilies(registry);
  ASSERT_TRUE(at_start.contains("statecache_sessions"));
  ASSERT_TRUE(at_start.contains("statecache_checkpoints_kept_total"));
  ASSERT_TRUE(at_start.contains("statecache_step_operation_duration_seconds"));

  auto& sessions_family =
      prometheus::BuildGauge().Name("statecache_sessions").Register(registry);
  prometheus::Gauge& sessions = sessions_family.Add({});
  prometheus::Gauge& used = prometheus::BuildGauge()
                                .Name("statecache_slots")
                                .Register(registry)
                                .Add({{"state", "used"}});
  prometheus::Counter& kept = prometheus::BuildCounter()
                                  .Name("statecache_checkpoints_kept_total")
                                  .Register(registry)
                                  .Add({});
  prometheus::Counter& misses = prometheus::BuildCounter()
                                    .Name("statecache_resumes_total")
                                    .Register(registry)
                                    .Add({{"outcome", "miss"}});
  prometheus::Histogram& admit_seconds =
      prometheus::BuildHistogram()
          .Name("statecache_step_operation_duration_seconds")
          .Register(registry)
          .Add({{"op", "admit"}}, prometheus::Histogram::BucketBoundaries{});
  // Fetching them built nothing.
  ASSERT_EQ(RegistryFamilies(registry), at_start);

  // A scrape shows exactly the registry's families, and adds none.
  const std::vector<std::string> first = ExposedFamilies(metrics.Render());
  EXPECT_EQ(std::set<std::string>(first.begin(), first.end()), at_start);
  EXPECT_EQ(first.size(), at_start.size());  // no family twice
  EXPECT_EQ(RegistryFamilies(registry), at_start);
  EXPECT_EQ(sessions.Value(), 0);
  EXPECT_EQ(kept.Value(), 0);

  // Work: a session, an admission whose KV hit no checkpoint backs (a
  // miss), a kept checkpoint.
  const std::string s = Attach(*cache);
  v1::StepRequest step;
  step.set_session_id(s);
  step.add_operations()->mutable_begin_pass();
  v1::Admit* admit = step.add_operations()->mutable_admit();
  admit->set_request_id("a");
  admit->set_width(1);
  admit->set_num_tokens(200);
  admit->set_anchor_pos(192);
  for (int64_t h : {101, 102, 103}) admit->add_block_hashes(h);
  admit->set_kv_hit_blocks(2);
  v1::Checkpoint* checkpoint = step.add_operations()->mutable_checkpoint();
  checkpoint->set_request_id("a");
  checkpoint->set_boundary_blocks(3);
  checkpoint->set_hash(103);
  v1::StepResponse resp;
  ASSERT_TRUE(cache->Step(step, &resp).ok());
  for (const v1::OperationResult& r : resp.results()) {
    ASSERT_EQ(r.code(), 0) << r.message();
  }
  ASSERT_TRUE(resp.results(2).checkpoint().kept());
  v1::GetStatsResponse stats;
  cache->GetStats(&stats);
  ASSERT_EQ(stats.checkpoints_kept(), 1);
  ASSERT_EQ(stats.resumes_miss(), 1);

  // Not before a scrape: nothing on the hot path writes the GetStats series.
  EXPECT_EQ(sessions.Value(), 0);
  // Two scrapes: the held children carry the values, and the counters are
  // the totals, not twice them.
  for (int scrape = 0; scrape < 2; ++scrape) {
    SCOPED_TRACE(scrape);
    const std::string text = metrics.Render();
    EXPECT_EQ(sessions.Value(), 1);
    EXPECT_EQ(used.Value(), static_cast<double>(stats.slots_used()));
    EXPECT_EQ(kept.Value(), 1);
    EXPECT_EQ(misses.Value(), 1);
    EXPECT_EQ(admit_seconds.Collect().histogram.sample_count, 1u);
    EXPECT_TRUE(absl::StrContains(text, "\nstatecache_sessions 1\n")) << text;
    EXPECT_TRUE(
        absl::StrContains(text, "\nstatecache_checkpoints_kept_total 1\n"))
        << text;
    const std::vector<std::string> names = ExposedFamilies(text);
    EXPECT_EQ(names, first);
    EXPECT_EQ(RegistryFamilies(registry), at_start);
    // The same family object as before the scrapes.
    EXPECT_EQ(&prometheus::BuildGauge()
                   .Name("statecache_sessions")
                   .Register(registry),
              &sessions_family);
  }
}

}  // namespace
}  // namespace statecache

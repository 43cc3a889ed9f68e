// The host tier's copy failures reach /metrics by direction: a real daemon
// cannot be made to fail a copy, so this drives StateCache over a
// FaultInjectingDevice (real host state memory underneath) and reads the
// exposition Metrics renders.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/device/fault_injecting_device.h"
#include "daemon/device/host_device.h"
#include "daemon/metrics/metrics.h"
#include "daemon/service/state_cache.h"
#include "gtest/gtest.h"

namespace statecache {
namespace {

constexpr int64_t kBlock = 4;
constexpr int kSlots = 2;

v1::Operation Admit(const std::string& id, int64_t hash, int32_t kv_hit) {
  v1::Operation op;
  v1::Admit* a = op.mutable_admit();
  a->set_request_id(id);
  a->set_width(1);
  a->set_num_tokens(20);
  a->set_anchor_pos(8);
  a->add_block_hashes(hash - 1);
  a->add_block_hashes(hash);
  a->set_kv_hit_blocks(kv_hit);
  return op;
}

TEST(TierFailureMetrics, EachFailedDirectionIsCountedOnItsOwnSeries) {
  HostDeviceOptions host;
  host.layout = *StateLayout::Create("tierfail", {{"s", {4}, DType::kF32}}, 1);
  host.num_slots = kSlots;
  host.epoch = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  host.prefix = "statecache_tier_metrics_test";
  auto faults = std::make_shared<FaultInjectingDevice>(
      std::shared_ptr<Device>(*HostDevice::Create(host)));
  StateCacheOptions options;
  options.identity.set_model_id("m");
  options.identity.set_hash_block_size(kBlock);
  options.num_slots = kSlots;
  options.max_slots = 8;
  options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
  options.device = faults;
  options.host_tier_bytes = 4 * host.layout.bytes_per_slot();
  auto cache = *StateCache::Create(std::move(options));
  Metrics metrics(cache.get(), Metrics::Options{.version = "test"});

  v1::AttachRequest attach;
  attach.mutable_identity()->set_model_id("m");
  attach.mutable_identity()->set_hash_block_size(kBlock);
  v1::AttachResponse attached;
  ASSERT_TRUE(cache->Attach(attach, &attached).ok());
  auto step = [&](std::initializer_list<v1::Operation> ops) {
    v1::StepRequest request;
    request.set_session_id(attached.session_id());
    for (const v1::Operation& op : ops) *request.add_operations() = op;
    v1::StepResponse response;
    EXPECT_TRUE(cache->Step(request, &response).ok());
    for (const v1::OperationResult& r : response.results()) {
      EXPECT_EQ(r.code(), 0) << r.message();
    }
    return response;
  };
  auto checkpoint = [&](const std::string& id, int64_t hash) {
    v1::Operation c;
    c.mutable_checkpoint()->set_request_id(id);
    c.mutable_checkpoint()->set_boundary_blocks(2);
    c.mutable_checkpoint()->set_hash(hash);
    c.mutable_checkpoint()->set_anchor_pos(8);
    v1::Operation r;
    r.mutable_release()->set_request_id(id);
    v1::Operation pass;
    pass.mutable_begin_pass();
    step({pass, Admit(id, hash, 0), c, r});
    step({pass});
    step({pass});
  };
  auto release = [](const std::string& id) {
    v1::Operation r;
    r.mutable_release()->set_request_id(id);
    return r;
  };

  // A demotion fails: the checkpoint 11 the two admissions spend is lost.
  checkpoint("a", 11);
  faults->FailNthCopy(1);
  step({Admit("x", 100, 0), Admit("y", 200, 0)});
  step({release("x"), release("y")});
  // A demotion that works (12), then its promotion fails.
  checkpoint("b", 12);
  step({Admit("x", 100, 0), Admit("y", 200, 0)});
  step({release("x"), release("y")});
  faults->FailNthCopy(1);
  const v1::StepResponse missed = step({Admit("r", 12, 2)});
  EXPECT_FALSE(missed.results(0).admit().from_tier());
  EXPECT_EQ(missed.results(0).admit().blocks_resumed(), 0);

  const std::string text = metrics.Render();
  EXPECT_TRUE(absl::StrContains(
      text,
      "statecache_host_tier_copy_failures_total{direction=\"demotion\"} 1\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text,
      "statecache_host_tier_copy_failures_total{direction=\"promotion\"} 1\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, absl::StrCat("statecache_host_tier_bytes{state=\"capacity\"} ",
                         4 * host.layout.bytes_per_slot(), "\n")))
      << text;
}

}  // namespace
}  // namespace statecache

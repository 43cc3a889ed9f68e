#include "bench/rpc/in_process.h"

#include <google/protobuf/arena.h>

#include <cstdlib>
#include <utility>
#include <vector>

#include "proto/message_arena.h"

namespace statecache::bench {

InProcessCache::InProcessCache(int ops, int32_t timing_interval,
                               PoolCallObserver* pool_observer) {
  StateCacheOptions options;
  options.identity.set_model_id("bench");
  options.identity.set_hash_block_size(kBlock);
  options.num_slots = kSlots;
  options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
  options.operation_timing_interval = timing_interval;
  options.pool_observer = pool_observer;
  cache = *StateCache::Create(std::move(options));
  metrics = std::make_unique<Metrics>(cache.get(),
                                      Metrics::Options{.version = "bench"});
  cache->AddObserver(metrics.get());
  v1::AttachRequest attach;
  attach.mutable_identity()->set_model_id("bench");
  attach.mutable_identity()->set_hash_block_size(kBlock);
  v1::AttachResponse attached;
  (void)cache->Attach(attach, &attached);
  sched = std::make_unique<Scheduler>(attached.session_id(), ops, 7);
  for (int i = 0; i < 50; ++i) {
    v1::StepResponse resp;
    (void)cache->Step(sched->NextPass(), &resp);
  }
}

Latency InProcessStepLatency(int ops, int n, int32_t timing_interval, bool wire,
                             bool packed) {
  InProcessCache in(ops, timing_interval);
  StateCache* cache = in.cache.get();
  Scheduler& sched = *in.sched;
  std::vector<double> us;
  us.reserve(n);
  for (int i = 0; i < n; ++i) {
    const v1::StepRequest req = sched.NextPass(packed);
    // Request and response on a per-call arena, as the daemon's
    // ArenaMessageAllocator gives them.
    google::protobuf::Arena arena(MessageArenaOptions());
    auto* server_req =
        google::protobuf::Arena::CreateMessage<v1::StepRequest>(&arena);
    auto* resp =
        google::protobuf::Arena::CreateMessage<v1::StepResponse>(&arena);
    v1::StepResponse client_resp;
    const auto t0 = Clock::now();
    if (wire) {
      if (!server_req->ParseFromString(req.SerializeAsString())) std::exit(1);
      (void)cache->Step(*server_req, resp);
      if (!client_resp.ParseFromString(resp->SerializeAsString())) {
        std::exit(1);
      }
    } else {
      (void)cache->Step(req, resp);
    }
    us.push_back(MicrosSince(t0));
    CheckStep(*resp);
  }
  return Summarise(us);
}

}  // namespace statecache::bench

// wire_breakdown: where a pass's time goes between two processes, stage by
// stage, measured in one: what each side pays to carry a pass through
// gRPC's own serialisation, next to the core's Step.
//
//   wire_breakdown [--iterations=N] [--evict_kb=32768]
//
// For passes of 64 and 256 operations, in the list and the packed form, it
// times each stage of the same passes rpc_bench sends, each on its own
// (p50 of --iterations): the client serialising the request
// (grpc::SerializationTraits into a ByteBuffer, the path a call takes), the
// daemon parsing it (onto a per-call arena, as the daemon's allocator gives
// it), StateCache::Step (the core, metrics on), the daemon serialising the
// response and the client parsing it; and their sum. With --evict_kb,
// other memory is written between passes first: in a hot loop every stage
// finds its data in cache, which a pass between two waits on a socket does
// not. What rpc_bench's unary Step costs beyond the sum is gRPC and the
// socket.
//
// Then the same packed passes through a step channel's stages
// (proto/step_channel.h): the client writing the request's columns into
// the request area, the daemon copying them out, Step, the daemon encoding
// the reply, the client copying it back into a StepResponse, and the C++
// client's conversion into StepResults (which the gRPC path pays too).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "bench/rpc/in_process.h"
#include "bench/rpc/passes.h"
#include "bench/rpc/platform.h"
#include "bench/rpc/timing.h"
#include "client/from_proto.h"
#include "proto/message_arena.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"
#include "proto/step_channel.h"

ABSL_FLAG(int, iterations, 3000, "passes timed per stage table");
ABSL_FLAG(int, evict_kb, 0,
          "write this many KiB of other memory between passes, so each stage "
          "starts with the caches a real pass finds (the rest of the process "
          "ran meanwhile); 0: warm");
ABSL_FLAG(int32_t, operation_timing_interval,
          statecache::StateCacheOptions{}.operation_timing_interval,
          "the core: time one operation in about this many for the metrics, "
          "as statecached's flag of that name (1: every one)");
ABSL_FLAG(std::string, client_cpus, "",
          "run on these CPUs (\"0\", \"0,2\", \"0-3\"); empty: wherever the "
          "scheduler puts it");

namespace statecache::bench {
namespace {

// The p50 of each of `count` stages' timings, named, and their sum.
void PrintStages(const char* const* names, std::vector<double>* t, int count) {
  double total = 0;
  for (int k = 0; k < count; ++k) {
    const double m = Summarise(t[k]).p50_us;
    total += m;
    std::printf("  %-28s %8.1f\n", names[k], m);
  }
  std::printf("  %-28s %8.1f\n", "sum", total);
}

// One table: `n` passes of `ops` operations taken apart stage by stage.
void WireBreakdown(int ops, int n, bool packed) {
  InProcessCache in(ops, absl::GetFlag(FLAGS_operation_timing_interval));
  StateCache* cache = in.cache.get();
  Scheduler& sched = *in.sched;
  std::vector<double> t[5];
  size_t req_bytes = 0, resp_bytes = 0;
  v1::StepResponse client_resp;
  const size_t evict_bytes =
      static_cast<size_t>(std::max(0, absl::GetFlag(FLAGS_evict_kb))) << 10;
  std::vector<char> other(evict_bytes);
  for (int i = 0; i < n; ++i) {
    const v1::StepRequest req = sched.NextPass(packed);
    // One write per line.
    for (size_t k = 0; k < evict_bytes; k += 64) ++other[k];
    google::protobuf::Arena arena(MessageArenaOptions());
    auto* server_req =
        google::protobuf::Arena::CreateMessage<v1::StepRequest>(&arena);
    auto* resp =
        google::protobuf::Arena::CreateMessage<v1::StepResponse>(&arena);
    grpc::ByteBuffer req_buf, resp_buf;
    bool own = false;
    auto t0 = Clock::now();
    (void)grpc::SerializationTraits<v1::StepRequest>::Serialize(req, &req_buf,
                                                                &own);
    t[0].push_back(MicrosSince(t0));
    req_bytes = req_buf.Length();
    t0 = Clock::now();
    if (!grpc::SerializationTraits<v1::StepRequest>::Deserialize(&req_buf,
                                                                 server_req)
             .ok()) {
      std::exit(1);
    }
    t[1].push_back(MicrosSince(t0));
    t0 = Clock::now();
    (void)cache->Step(*server_req, resp);
    t[2].push_back(MicrosSince(t0));
    t0 = Clock::now();
    (void)grpc::SerializationTraits<v1::StepResponse>::Serialize(
        *resp, &resp_buf, &own);
    t[3].push_back(MicrosSince(t0));
    resp_bytes = resp_buf.Length();
    client_resp.Clear();
    t0 = Clock::now();
    if (!grpc::SerializationTraits<v1::StepResponse>::Deserialize(&resp_buf,
                                                                  &client_resp)
             .ok()) {
      std::exit(1);
    }
    t[4].push_back(MicrosSince(t0));
    CheckStep(*resp);
  }
  const char* names[] = {"client: serialise request", "daemon: parse request",
                         "daemon: Step (core)", "daemon: serialise response",
                         "client: parse response"};
  std::printf(
      "a %d-op pass%s stage by stage (request %zu bytes, response %zu "
      "bytes; %s), p50 us:\n",
      ops, packed ? ", packed," : "", req_bytes, resp_bytes,
      evict_bytes == 0
          ? "caches warm"
          : absl::StrCat(evict_bytes >> 10, " KiB written between passes")
                .c_str());
  PrintStages(names, t, 5);
}

// The step channel's stages for `n` packed passes of `ops` operations.
void ChannelBreakdown(int ops, int n) {
  namespace sc = step_channel;
  InProcessCache in(ops, absl::GetFlag(FLAGS_operation_timing_interval));
  StateCache* cache = in.cache.get();
  Scheduler& sched = *in.sched;
  std::vector<double> t[6];
  std::vector<char> area(size_t{4} << 20);
  v1::StepRequest server_req;
  v1::StepResponse resp, client_resp;
  std::string reply;
  for (int i = 0; i < n; ++i) {
    const v1::StepRequest req = sched.NextPass(/*packed=*/true);
    auto t0 = Clock::now();
    if (sc::WriteStepRequest(req.packed(), area.data(), area.size()) == 0) {
      std::exit(1);
    }
    t[0].push_back(MicrosSince(t0));
    t0 = Clock::now();
    server_req.set_session_id(req.session_id());
    if (!sc::ReadStepRequest(area.data(), area.size(),
                             server_req.mutable_packed())
             .ok()) {
      std::exit(1);
    }
    t[1].push_back(MicrosSince(t0));
    resp.Clear();
    t0 = Clock::now();
    const absl::Status status = cache->Step(server_req, &resp);
    t[2].push_back(MicrosSince(t0));
    t0 = Clock::now();
    sc::EncodeReply(status, resp, &reply);
    t[3].push_back(MicrosSince(t0));
    t0 = Clock::now();
    if (!sc::DecodeReply(reply, &client_resp).ok()) std::exit(1);
    t[4].push_back(MicrosSince(t0));
    t0 = Clock::now();
    if (!FromProto(client_resp, req.packed().kinds()).ok()) std::exit(1);
    t[5].push_back(MicrosSince(t0));
    CheckStep(resp);
  }
  const char* names[] = {
      "client: write request area", "daemon: read request area",
      "daemon: Step (core)",        "daemon: encode reply",
      "client: read reply",         "client: StepResults"};
  std::printf(
      "a %d-op packed pass through a step channel, stage by stage "
      "(caches warm), p50 us:\n",
      ops);
  PrintStages(names, t, 6);
}

}  // namespace
}  // namespace statecache::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  statecache::bench::PinTo(absl::GetFlag(FLAGS_client_cpus), "client_cpus");
  for (int ops : {64, 256}) {
    for (bool packed : {false, true}) {
      statecache::bench::WireBreakdown(ops, absl::GetFlag(FLAGS_iterations),
                                       packed);
    }
  }
  statecache::bench::ChannelBreakdown(256, absl::GetFlag(FLAGS_iterations));
  statecache::bench::ReportRefusals();
  return 0;
}

// rpc_calibrate: what a microsecond of handler time costs in round trip on
// this machine, so that rpc_bench's `- Ping` column can be read.
//
//   rpc_calibrate [--iterations=N] [--reps=N]
//   rpc_calibrate --client_cpus=0 --server_cpus=1   (pinned)
//   taskset -c 0 rpc_calibrate                      (everything on one vCPU)
//
// Times Pings to a bare gRPC callback server (the daemon's API and gRPC
// build, nothing of the daemon's: this program run again with
// --busy_server) whose handler busy-waits 5, 10, 20 us and as long as the
// 256-op packed pass's core takes in-process (StateCache::Step, measured
// here first), each paired (interleaved in blocks, as rpc_bench's paired
// table) with Pings whose handler returns at once, every call after its
// client built a 256-op packed pass as rpc_bench's Step row does. Where a
// round trip costs only the wire and the handler's time, `- Ping` equals
// the busy time; on a VM whose vCPUs halt while they wait it is a multiple
// of it, and about one when everything runs on one vCPU.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/rpc/in_process.h"
#include "bench/rpc/passes.h"
#include "bench/rpc/platform.h"
#include "bench/rpc/servers.h"
#include "bench/rpc/timing.h"
#include "bench/rpc/trips.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"

ABSL_FLAG(int, iterations, 3000, "round trips per latency measurement");
ABSL_FLAG(int, reps, 5, "repetitions (median reported)");
ABSL_FLAG(int32_t, operation_timing_interval,
          statecache::StateCacheOptions{}.operation_timing_interval,
          "the in-process core: time one operation in about this many for "
          "the metrics, as statecached's flag of that name (1: every one)");
ABSL_FLAG(std::string, client_cpus, "",
          "run the benchmark's client on these CPUs (\"0\", \"0,2\", \"0-3\"); "
          "empty: wherever the scheduler puts it");
ABSL_FLAG(std::string, server_cpus, "",
          "run the bare server on these CPUs; empty: as the client");
ABSL_FLAG(std::string, busy_server, "",
          "internal: serve BusyPingService on this address and exit");
ABSL_FLAG(int, busy_server_ready_fd, -1,
          "internal: with --busy_server, write \"ready\" to this fd");

namespace statecache::bench {
namespace {

// The bare server's Ping: busy-waits as long as the request asks
// (kBusyNanosField), then answers.
class BusyPingService final : public v1::StateCache::CallbackService {
 public:
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* context,
                                 const v1::PingRequest* request,
                                 v1::PingResponse*) override {
    int64_t nanos = 0;
    const google::protobuf::UnknownFieldSet& fields =
        request->GetReflection()->GetUnknownFields(*request);
    for (int i = 0; i < fields.field_count(); ++i) {
      if (fields.field(i).number() == kBusyNanosField &&
          fields.field(i).type() ==
              google::protobuf::UnknownField::TYPE_VARINT) {
        nanos = static_cast<int64_t>(fields.field(i).varint());
      }
    }
    const auto until = Clock::now() + std::chrono::nanoseconds(nanos);
    while (Clock::now() < until) {
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

int RunBusyPingServer(const std::string& address, int ready_fd) {
  BusyPingService service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return 1;
  if (write(ready_fd, "ready\n", 6) != 6) return 1;
  close(ready_fd);
  server->Wait();  // until the parent's SIGTERM
  return 0;
}

// This program again, as the bare server.
class BusyPingServer : public ServerProcess {
 public:
  explicit BusyPingServer(const std::string& server_cpus)
      : ServerProcess(
            [](const std::string& address, int ready_fd) {
              const std::string listen =
                  absl::StrCat("--busy_server=", address);
              const std::string ready =
                  absl::StrCat("--busy_server_ready_fd=", ready_fd);
              execl("/proc/self/exe", "rpc_calibrate", listen.c_str(),
                    ready.c_str(), static_cast<char*>(nullptr));
            },
            server_cpus) {}
};

int Run() {
  const int n = absl::GetFlag(FLAGS_iterations);
  const int reps = absl::GetFlag(FLAGS_reps);
  PrintPlatform(absl::GetFlag(FLAGS_server_cpus));
  std::vector<double> core_us;
  for (int r = 0; r < reps; ++r) {
    core_us.push_back(
        InProcessStepLatency(256, n,
                             absl::GetFlag(FLAGS_operation_timing_interval),
                             /*wire=*/false, /*packed=*/true)
            .p50_us);
  }
  const double core = Median(core_us);
  BusyPingServer server(absl::GetFlag(FLAGS_server_cpus));
  auto stub = v1::StateCache::NewStub(grpc::CreateChannel(
      server.address(), grpc::InsecureChannelCredentials()));
  {
    PingTrip warm(*stub);
    (void)Measure(warm, 200);
  }
  const std::vector<double> busy_us = {5, 10, 20, core};
  // [busy][rep] -> {busy Ping, its do-nothing Ping}
  std::vector<std::vector<std::pair<Latency, Latency>>> runs(busy_us.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < busy_us.size(); ++i) {
      PingTrip busy(*stub, 256, PassForm::kPacked,
                    static_cast<int64_t>(busy_us[i] * 1000));
      PingTrip ping(*stub, 256, PassForm::kPacked);
      runs[i].push_back(MeasurePaired(busy, ping, n));
    }
  }
  std::printf(
      "handler calibration: Pings to a bare callback server (%s) whose "
      "handler busy-waits, each run alternating blocks of them with Pings "
      "whose handler returns at once (%d of each timed), every call after "
      "its client built a 256-op packed pass; the last row waits as long as "
      "the 256-op packed pass's core takes in-process (p50, median of %d "
      "runs); `- Ping` / busy: round-trip microseconds per microsecond of "
      "handler time\n",
      server.address().c_str(), n, reps);
  std::printf("  %-22s %10s %10s %10s %12s %12s\n", "handler busy", "p50 us",
              "Ping p50", "- Ping", "p50/Ping", "- Ping/busy");
  for (size_t i = 0; i < busy_us.size(); ++i) {
    const std::string name =
        i + 1 < busy_us.size()
            ? absl::StrCat(busy_us[i], " us")
            : absl::StrFormat("%.1f us (256-op core)", busy_us[i]);
    PrintPairedRow(name, runs[i], [&](const Latency& l, const Latency& ping) {
      return (l.p50_us - ping.p50_us) / busy_us[i];
    });
  }
  ReportRefusals();
  return 0;
}

}  // namespace
}  // namespace statecache::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (!absl::GetFlag(FLAGS_busy_server).empty()) {
    return statecache::bench::RunBusyPingServer(
        absl::GetFlag(FLAGS_busy_server),
        absl::GetFlag(FLAGS_busy_server_ready_fd));
  }
  // Before any thread or server process starts: both inherit it.
  statecache::bench::PinTo(absl::GetFlag(FLAGS_client_cpus), "client_cpus");
  return statecache::bench::Run();
}

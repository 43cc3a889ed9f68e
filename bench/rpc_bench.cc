// rpc_bench: what a scheduler pass costs over the daemon's socket, against
// an empty call (Ping) on the same socket in the same run.
//
//   rpc_bench [--statecached=PATH] [--iterations=N] [--reps=N]
//   rpc_bench --rows "256 ops, packed" --paired=false --throughput=false
//   rpc_bench --in_process_only --rows="in-process, packed, 256"
//             (the core pass alone, for profiling it; no daemon)
//   rpc_bench --client_cpus=0 --server_cpus=1   (pinned; the first line of
//                                 the output says where each side ran)
//
// Starts its own statecached on a Unix socket in a temporary directory and
// measures, on that socket in the same run:
//   * round-trip latency (p50, p99) of Ping (the baseline), of a
//     one-operation Step, and of Steps of 64 and 256 realistic operations
//     (a scheduler pass: begin_pass, admissions that resume from earlier
//     turns, checkpoints, releases), unary and over StepStream, each printed
//     as a ratio to Ping's; the same passes in the packed form (`packed`
//     rows: PackedOperations, the list written as columns by the codec,
//     proto/packed_codec.h) and through the C++ client library (which sends
//     the packed form); to take the 256-op Step apart, a Ping carrying as
//     many bytes (one field it does not know) and the 256-op request refused
//     whole (unknown session); and the same passes through StateCache::Step
//     in this process, with and without protobuf both ways;
//   * (--paired) each Step row against a Ping made under the same
//     conditions: interleaved with it in blocks, and with the client
//     building a pass of the row's size before every Ping as it does before
//     every Step. In the first table Ping runs back to back with nothing
//     between calls, which on a VM whose vCPUs halt when idle is the
//     cheapest a call ever gets (rows `Ping, 30 us after` and `Ping, 1 ms
//     after` show how much more a spaced call costs), while every Step row's
//     client builds its next pass between calls. Row `packed, 1 ms apart`
//     spaces its calls (and its paired Pings) as a scheduler's passes are
//     spaced by the forward between them, so each call finds the daemon idle;
//   * (--throughput) steps/s with 1, 4 and 16 concurrent sessions (one
//     thread each, 64-op steps over StepStream).
// Every figure is the median over --reps runs, each run going through every
// row in turn; a ratio is the median of the runs' ratios to their own Ping.
// It exits 0 after printing a WARNING if any steady-state operation was
// refused (the smoke test rejects that line).
//
// The other RPC tools: rpc_calibrate (what handler time costs in round trip
// here), reference_bench (the same 256-op pass against the reference pool
// in Python) and wire_breakdown (a pass's stages in-process).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench/rpc/in_process.h"
#include "bench/rpc/passes.h"
#include "bench/rpc/platform.h"
#include "bench/rpc/servers.h"
#include "bench/rpc/timing.h"
#include "bench/rpc/trips.h"
#include "client/statecache_client.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"

ABSL_FLAG(std::string, statecached, STATECACHED_PATH_DEFAULT,
          "the daemon binary to start");
ABSL_FLAG(int, iterations, 3000, "round trips per latency measurement");
ABSL_FLAG(int, reps, 5, "repetitions (median reported)");
ABSL_FLAG(double, seconds, 2.0, "duration of each throughput run");
ABSL_FLAG(std::string, rows, "",
          "only the latency rows whose name contains this (Ping always runs: "
          "it is the baseline; with --in_process_only, only those in-process "
          "rows); empty: all");
ABSL_FLAG(bool, paired, true,
          "also time each Step row paired with Ping (see MeasurePaired)");
ABSL_FLAG(bool, throughput, true, "also measure steps/s by session count");
ABSL_FLAG(int32_t, operation_timing_interval,
          statecache::StateCacheOptions{}.operation_timing_interval,
          "in-process rows: time one operation in about this many for the "
          "metrics, as statecached's flag of that name (1: every one)");
ABSL_FLAG(bool, in_process_only, false,
          "time only StateCache::Step in-process (for profiling the core)");
ABSL_FLAG(std::string, client_cpus, "",
          "run the benchmark's client on these CPUs (\"0\", \"0,2\", \"0-3\"); "
          "empty: wherever the scheduler puts it");
ABSL_FLAG(std::string, server_cpus, "",
          "run statecached on these CPUs; empty: as the client");

namespace statecache::bench {
namespace {

// Ping carrying as many bytes as the same passes' requests, as one field it
// does not know (a blob the daemon keeps unparsed): what moving the
// request's bytes through the socket and gRPC costs, without its operations
// to serialise and parse. (Carrying the pass's own bytes instead, as 257
// unknown fields, would time protobuf's unknown-field handling as well.)
class PingWithPassBytesTrip final : public RoundTrip {
 public:
  PingWithPassBytesTrip(v1::StateCache::Stub& stub, int ops)
      : stub_(stub), sched_("unused", ops, 7) {
    for (int i = 0; i < 50; ++i) (void)sched_.NextPass();  // a full batch
  }
  void Prepare() override {
    req_.Clear();
    req_.GetReflection()->MutableUnknownFields(&req_)->AddLengthDelimited(
        1000, std::string(sched_.NextPass().ByteSizeLong(), 'x'));
  }
  void Call() override {
    grpc::ClientContext ctx;
    grpc::Status s = stub_.Ping(&ctx, req_, &resp_);
    if (!s.ok()) {
      std::fprintf(stderr, "ping with bytes: %s\n", s.error_message().c_str());
      std::exit(1);
    }
  }

 private:
  v1::StateCache::Stub& stub_;
  Scheduler sched_;
  v1::PingRequest req_;
  v1::PingResponse resp_;
};

// Steps/s of `sessions` sessions, one thread and one channel each, 64-op
// steps over StepStream for `seconds`.
double Throughput(const std::string& address, int sessions, double seconds) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> steps{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < sessions; ++t) {
    threads.emplace_back([&, t] {
      // One channel per session, as separate engines would have.
      grpc::ChannelArguments args;
      args.SetInt("grpc.channel_id", t);  // distinct subchannels
      auto channel = grpc::CreateCustomChannel(
          address, grpc::InsecureChannelCredentials(), args);
      auto stub = v1::StateCache::NewStub(channel);
      Scheduler sched(Attach(*stub), 64, 100 + t);
      grpc::ClientContext ctx;
      auto stream = stub->StepStream(&ctx);
      v1::StepResponse resp;
      while (!stop.load(std::memory_order_relaxed)) {
        if (!stream->Write(sched.NextPass()) || !stream->Read(&resp)) break;
        steps.fetch_add(1, std::memory_order_relaxed);
      }
      stream->WritesDone();
      (void)stream->Finish();
      Detach(*stub, sched.session());
    });
  }
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto& th : threads) th.join();
  return steps.load() / elapsed;
}

// The in-process rows alone (--in_process_only).
int InProcessOnly(int n, int32_t timing_interval) {
  for (int ops : {64, 256}) {
    for (bool packed : {false, true}) {
      for (bool wire : {false, true}) {
        const std::string name = absl::StrCat(
            "in-process", packed ? ", packed" : "",
            wire ? " + protobuf both ways" : "", ", ", ops, " ops");
        if (!absl::StrContains(name, absl::GetFlag(FLAGS_rows))) continue;
        const Latency l =
            InProcessStepLatency(ops, n, timing_interval, wire, packed);
        std::printf("%s: p50 %.1f us, p99 %.1f us\n", name.c_str(), l.p50_us,
                    l.p99_us);
      }
    }
  }
  return 0;
}

// A latency row: a round trip over the socket (`trip`), or, for the
// in-process rows, a measurement of its own (`run`). `paired` rows are
// also timed against a Ping whose client first builds a pass of `ops`
// operations in the same form.
struct Row {
  const char* name = "";
  std::function<std::unique_ptr<RoundTrip>()> trip = nullptr;
  std::function<Latency()> run = nullptr;
  bool paired = false;
  int ops = 0;
  PassForm form = PassForm::kList;
  // Measure's gap, also the paired Ping's.
  std::chrono::microseconds gap{};
};

int Run() {
  const int n = absl::GetFlag(FLAGS_iterations);
  const int reps = absl::GetFlag(FLAGS_reps);
  const int32_t interval = absl::GetFlag(FLAGS_operation_timing_interval);
  if (absl::GetFlag(FLAGS_in_process_only)) return InProcessOnly(n, interval);
  PrintPlatform(absl::GetFlag(FLAGS_server_cpus));
  Daemon daemon(absl::GetFlag(FLAGS_statecached),
                absl::GetFlag(FLAGS_server_cpus));
  auto channel =
      grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials());
  auto stub = v1::StateCache::NewStub(channel);
  {
    PingTrip warm(*stub);  // warm the channel
    (void)Measure(warm, 200);
  }

  auto unary_row = [&](const char* name, int ops, bool packed) {
    return Row{.name = name,
               .trip =
                   [&stub, ops, packed] {
                     return std::make_unique<UnaryStepTrip>(*stub, ops, false,
                                                            packed);
                   },
               .paired = true,
               .ops = ops,
               .form = packed ? PassForm::kPacked : PassForm::kList};
  };
  auto stream_row = [&](const char* name, int ops, bool packed) {
    return Row{.name = name,
               .trip =
                   [&stub, ops, packed] {
                     return std::make_unique<StreamStepTrip>(*stub, ops,
                                                             packed);
                   },
               .paired = true,
               .ops = ops,
               .form = packed ? PassForm::kPacked : PassForm::kList};
  };
  auto client_row = [&](const char* name, bool streamed,
                        AttachOptions::Transport transport =
                            AttachOptions::Transport::kGrpc) {
    return Row{.name = name,
               .trip =
                   [&daemon, streamed, transport] {
                     return std::make_unique<ClientStepTrip>(
                         daemon.address(), 256, streamed, transport);
                   },
               .paired = true,
               .ops = 256,
               .form = PassForm::kBuilder};
  };
  const std::vector<Row> rows = {
      {.name = "Ping (baseline)",
       .trip = [&] { return std::make_unique<PingTrip>(*stub); }},
      {.name = "  Ping, 30 us after",
       .trip = [&] { return std::make_unique<PingTrip>(*stub); },
       .gap = std::chrono::microseconds(30)},
      {.name = "  Ping, 1 ms after",
       .trip = [&] { return std::make_unique<PingTrip>(*stub); },
       .gap = std::chrono::microseconds(1000)},
      unary_row("Step, 1 op", 1, false),
      unary_row("Step, 64 ops", 64, false),
      unary_row("Step, 256 ops", 256, false),
      {.name = "  Ping + 256 ops' bytes",
       .trip =
           [&] { return std::make_unique<PingWithPassBytesTrip>(*stub, 256); }},
      {.name = "  256 ops, refused",
       .trip =
           [&] {
             return std::make_unique<UnaryStepTrip>(*stub, 256,
                                                    /*refused=*/true);
           }},
      unary_row("Step, 64 ops, packed", 64, true),
      unary_row("Step, 256 ops, packed", 256, true),
      {.name = "  packed, 1 ms apart",
       .trip =
           [&] {
             return std::make_unique<UnaryStepTrip>(*stub, 256, false, true);
           },
       .paired = true,
       .ops = 256,
       .form = PassForm::kPacked,
       .gap = std::chrono::microseconds(1000)},
      stream_row("StepStream, 1 op", 1, false),
      stream_row("StepStream, 64 ops", 64, false),
      stream_row("StepStream, 256 ops", 256, false),
      stream_row("StepStream, 256 ops, packed", 256, true),
      client_row("Client::Step, 256 ops", false),
      client_row("Client stream, 256 ops", true),
      client_row("Client::Step, channel, 256", false,
                 AttachOptions::Transport::kChannel),
      {.name = "  channel bare round trip",
       .trip =
           [&daemon] {
             return std::make_unique<ChannelPingTrip>(daemon.address());
           }},
      {.name = "in-process, 256 ops",
       .run = [&] { return InProcessStepLatency(256, n, interval); }},
      {.name = "  + protobuf both ways",
       .run =
           [&] {
             return InProcessStepLatency(256, n, interval, /*wire=*/true);
           }},
      {.name = "in-process, packed, 256 ops",
       .run =
           [&] {
             return InProcessStepLatency(256, n, interval, /*wire=*/false,
                                         /*packed=*/true);
           }},
  };
  // Each repetition runs every selected row in turn, so the machine's drift
  // falls on all rows alike; a row's ratio is the median of its
  // repetitions' ratios to that repetition's Ping.
  const std::string only = absl::GetFlag(FLAGS_rows);
  std::vector<const Row*> selected;
  for (const Row& row : rows) {
    if (selected.empty() || absl::StrContains(row.name, only)) {
      selected.push_back(&row);
    }
  }
  std::vector<std::vector<Latency>> runs(selected.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < selected.size(); ++i) {
      const Row& row = *selected[i];
      if (row.trip) {
        std::unique_ptr<RoundTrip> trip = row.trip();
        runs[i].push_back(Measure(*trip, n, row.gap));
      } else {
        runs[i].push_back(row.run());
      }
    }
  }
  std::printf(
      "round trips over %s, %d per run, median of %d runs (each run goes "
      "through every row in turn)\n",
      daemon.address().c_str(), n, reps);
  std::printf("  %-22s %10s %10s %12s %12s\n", "call", "p50 us", "p99 us",
              "p50/Ping", "p99/Ping");
  for (size_t i = 0; i < selected.size(); ++i) {
    std::vector<double> p50, p99, r50, r99;
    for (int r = 0; r < reps; ++r) {
      const Latency& l = runs[i][r];
      const Latency& ping = runs[0][r];
      p50.push_back(l.p50_us);
      p99.push_back(l.p99_us);
      r50.push_back(l.p50_us / ping.p50_us);
      r99.push_back(l.p99_us / ping.p99_us);
    }
    std::printf("  %-22s %10.1f %10.1f %11.2fx %11.2fx\n", selected[i]->name,
                Median(p50), Median(p99), Median(r50), Median(r99));
  }

  // The same rows paired with Ping (see MeasurePaired). In the table above
  // Ping runs in a loop of its own, back to back: the client does nothing
  // between calls, so the daemon's thread and both vCPUs stay hot, while
  // every Step row's client builds a pass between calls. Here each call,
  // Ping included, follows the same work.
  if (absl::GetFlag(FLAGS_paired)) {
    std::vector<const Row*> paired;
    for (const Row* row : selected) {
      if (row->paired) paired.push_back(row);
    }
    // [row][rep] -> {row, its Ping}
    std::vector<std::vector<std::pair<Latency, Latency>>> pruns(paired.size());
    for (int r = 0; r < reps; ++r) {
      for (size_t i = 0; i < paired.size(); ++i) {
        std::unique_ptr<RoundTrip> trip = paired[i]->trip();
        PingTrip ping(*stub, paired[i]->ops, paired[i]->form);
        pruns[i].push_back(MeasurePaired(*trip, ping, n, paired[i]->gap));
      }
    }
    std::printf(
        "\npaired with Ping: each run alternates blocks of the row's calls "
        "and of Pings (%d of each timed), every call after its client built "
        "a pass of the row's size (the Ping's is dropped) and, in a row "
        "`apart`, that long after the last call returned; `- Ping`: what "
        "the row's call costs over its Ping; median of %d runs\n",
        n, reps);
    std::printf("  %-22s %10s %10s %10s %12s %12s\n", "call", "p50 us",
                "Ping p50", "- Ping", "p50/Ping", "p99/Ping");
    for (size_t i = 0; i < paired.size(); ++i) {
      PrintPairedRow(paired[i]->name, pruns[i],
                     [](const Latency& l, const Latency& ping) {
                       return l.p99_us / ping.p99_us;
                     });
    }
  }
  ReportRefusals();
  if (!absl::GetFlag(FLAGS_throughput)) return 0;
  std::printf(
      "\nthroughput: 64-op steps over StepStream, one session per thread\n");
  for (int sessions : {1, 4, 16}) {
    std::vector<double> rates;
    for (int r = 0; r < reps; ++r) {
      rates.push_back(
          Throughput(daemon.address(), sessions, absl::GetFlag(FLAGS_seconds)));
    }
    std::printf("  %2d sessions  %10.0f steps/s  (%.0f ops/s)\n", sessions,
                Median(rates), Median(rates) * 64);
  }
  return 0;
}

}  // namespace
}  // namespace statecache::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // Before any thread or server process starts: both inherit it.
  statecache::bench::PinTo(absl::GetFlag(FLAGS_client_cpus), "client_cpus");
  return statecache::bench::Run();
}

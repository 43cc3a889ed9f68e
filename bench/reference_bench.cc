// reference_bench: what a scheduler's 256-op pass costs this project (the
// pool alone, the core in-process, and over the daemon's socket) against
// what the same pass's pool calls cost on the in-process pool a Python
// scheduler has today: the reference pool (shared/reference/
// state_slot_pool.py).
//
//   reference_bench [--statecached=PATH] [--iterations=N] [--reps=N]
//                   [--reference_passes=N]
//   reference_bench --pool_trace=/tmp/pass.jsonl   (keeps the trace, and
//                   where its timed passes start in PATH.passes.json)
//
// Before anything is timed, it runs the passes through a StateCache in this
// process with a replay::TraceRecorder handed to its pool
// (StateCacheOptions::pool_observer): 50 untimed passes, then
// --reference_passes timed ones (at most --iterations), their pool calls
// written as a pool trace (docs/trace_format.md) by the core itself, each
// line checked as it is written to replay as the core's pool answered, the
// last a dump of the whole pool. The run stops if the recorder cannot vouch
// for the trace, and prints a WARNING if the reference's run_trace.py gives
// any result other than the core's (the table's heading says they were
// identical). Then each run times, in turn:
//   * `reference pool (Python)`: those calls on the reference pool in a
//     Python process (--python; bench/reference_timing.py --paced
//     --passes), arguments converted before the clock, each pass timed as
//     one;
//   * `SlotPool`: the same calls on this project's pool alone
//     (replay::Invoke, as statecache-replay runs a trace);
//   * the same passes through StateCache::Step in-process (the core pass,
//     metrics on, at the daemon's default --operation_timing_interval), and
//     over the socket of a statecached it starts, unary and over
//     StepStream, all in the packed form;
// and prints p50 and p99 of one pass and the p50's ratio to the
// reference's (the median of the runs' ratios). With no run_trace.py in
// --reference_dir (a clone has no ../shared beside it), one line says
// `reference rows not run: ` and why, and the rest runs without the ratio.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/paced_reference.h"
#include "bench/rpc/in_process.h"
#include "bench/rpc/passes.h"
#include "bench/rpc/platform.h"
#include "bench/rpc/servers.h"
#include "bench/rpc/timing.h"
#include "bench/rpc/trips.h"
#include "daemon/core/slot_pool.h"
#include "daemon/replay/trace.h"
#include "daemon/replay/trace_recorder.h"
#include "proto/statecache/v1/statecache.grpc.pb.h"

ABSL_FLAG(std::string, statecached, STATECACHED_PATH_DEFAULT,
          "the daemon binary to start");
ABSL_FLAG(int, iterations, 3000,
          "passes per measurement of the in-process and round-trip rows");
ABSL_FLAG(int, reps, 5, "repetitions (median reported)");
ABSL_FLAG(int, reference_passes, 300,
          "timed passes per run of the pool rows (at most --iterations), "
          "after 50 untimed ones");
ABSL_FLAG(std::string, reference_dir, STATECACHE_REFERENCE_DIR_DEFAULT,
          "directory of the reference's run_trace.py");
ABSL_FLAG(std::string, source_dir, STATECACHE_SOURCE_DIR_DEFAULT,
          "the repository (for bench/reference_timing.py)");
ABSL_FLAG(std::string, python, "/usr/bin/python3",
          "the Python that runs the reference");
ABSL_FLAG(std::string, pool_trace, "",
          "keep the recorded trace here (and where its passes start in "
          "PATH.passes.json); empty: a temporary file, removed");
ABSL_FLAG(int32_t, operation_timing_interval,
          statecache::StateCacheOptions{}.operation_timing_interval,
          "the in-process core: time one operation in about this many for "
          "the metrics, as statecached's flag of that name (1: every one)");
ABSL_FLAG(std::string, client_cpus, "",
          "run the benchmark's client on these CPUs (\"0\", \"0,2\", \"0-3\"); "
          "empty: wherever the scheduler puts it");
ABSL_FLAG(std::string, server_cpus, "",
          "run statecached on these CPUs; empty: as the client");

namespace statecache::bench {
namespace {

constexpr int kOps = 256;
constexpr int kUntimedPasses = 50;

// The pool calls of the untimed and `passes` timed passes of the in-process
// rows' scheduler (seed 7), as the core made them, and where each timed
// pass's calls start and end.
struct RecordedPasses {
  replay::TraceRecorder recorder;
  int64_t untimed_calls = 0;        // the warm-up passes'
  std::vector<int64_t> pass_calls;  // one per timed pass
};

std::unique_ptr<RecordedPasses> RecordPasses(int passes) {
  auto out = std::make_unique<RecordedPasses>();
  // Its first kUntimedPasses passes run in the constructor.
  InProcessCache in(kOps, absl::GetFlag(FLAGS_operation_timing_interval),
                    &out->recorder);
  out->untimed_calls = static_cast<int64_t>(out->recorder.calls().size());
  for (int i = 0; i < passes; ++i) {
    const size_t before = out->recorder.calls().size();
    v1::StepResponse resp;
    (void)in.cache->Step(in.sched->NextPass(/*packed=*/true), &resp);
    CheckStep(resp);
    out->pass_calls.push_back(
        static_cast<int64_t>(out->recorder.calls().size() - before));
  }
  // The whole pool as the trace's last line: a replay must end in it.
  (void)in.cache->DumpPool();
  if (absl::Status st = out->recorder.status(); !st.ok()) {
    std::fprintf(stderr, "reference_bench: the core's pool calls: %s\n",
                 st.ToString().c_str());
    std::exit(1);
  }
  return out;
}

bool Readable(const std::string& path) {
  return access(path.c_str(), R_OK) == 0;
}

void WriteLines(const std::string& path,
                const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) absl::StrAppend(&text, line, "\n");
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr ||
      std::fwrite(text.data(), 1, text.size(), f) != text.size() ||
      std::fclose(f) != 0) {
    std::fprintf(stderr, "reference_bench: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// The recorded trace, written out, and what runs on it: the reference
// (reference_timing.py --paced --passes, a child process) when it is
// there, and SlotPool.
class PassTrace {
 public:
  explicit PassTrace(int passes) : recorded_(RecordPasses(passes)) {
    const std::string kept = absl::GetFlag(FLAGS_pool_trace);
    if (kept.empty()) {
      std::string tmpl = "/tmp/reference_bench.XXXXXX";
      if (mkdtemp(tmpl.data()) == nullptr) std::abort();
      dir_ = tmpl;
      trace_ = dir_ + "/pass.jsonl";
    } else {
      trace_ = kept;
    }
    passes_ = trace_ + ".passes.json";
    WriteLines(trace_, recorded_->recorder.lines());
    WriteLines(passes_,
               {absl::StrCat("{\"untimed_calls\":", recorded_->untimed_calls,
                             ",\"pass_calls\":[",
                             absl::StrJoin(recorded_->pass_calls, ","), "]}")});
  }
  ~PassTrace() {
    reference_.reset();
    if (!dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }

  // Checks the trace on the reference and starts its timing script; false,
  // with `why` set, when the reference is not there.
  bool StartReference(std::string* why) {
    const std::string ref = absl::GetFlag(FLAGS_reference_dir);
    const std::string python = absl::GetFlag(FLAGS_python);
    const std::string script = absl::StrCat(absl::GetFlag(FLAGS_source_dir),
                                            "/bench/reference_timing.py");
    if (!Readable(absl::StrCat(ref, "/run_trace.py"))) {
      *why = absl::StrCat("no run_trace.py in --reference_dir=", ref,
                          " (a clone has no ../shared/reference beside it)");
      return false;
    }
    if (access(python.c_str(), X_OK) != 0 || !Readable(script)) {
      *why = absl::StrCat("cannot run ", python, " ", script);
      return false;
    }
    // The reference must give, line for line, the results the core's pool
    // gave: the same calls accepted, the same slots handed out, the same
    // pool at the end.
    const std::vector<std::string>& expected = recorded_->recorder.results();
    const std::string got = trace_ + ".reference.jsonl";
    const std::string cmd =
        absl::StrCat(python, " ", ref, "/run_trace.py ", trace_, " -o ", got);
    if (std::system(cmd.c_str()) != 0) {
      std::printf("WARNING: the reference failed on the recorded trace (%s)\n",
                  cmd.c_str());
    } else {
      std::ifstream in(got);
      size_t line_no = 0, differ = 0;
      for (std::string line; std::getline(in, line); ++line_no) {
        if (line_no >= expected.size() || line != expected[line_no]) {
          if (differ++ == 0) {
            std::printf(
                "WARNING: the reference's result of trace line %zu differs "
                "from the core's: %s vs %s\n",
                line_no + 1, line.c_str(),
                line_no < expected.size() ? expected[line_no].c_str()
                                          : "(none)");
          }
        }
      }
      if (line_no != expected.size() && differ == 0) {
        std::printf("WARNING: the reference gave %zu results for %zu lines\n",
                    line_no, expected.size());
      }
      identical_ = differ == 0 && line_no == expected.size();
    }
    std::remove(got.c_str());
    reference_ = std::make_unique<PacedReference>(
        absl::StrCat(python, " ", script, " --paced --reference-dir ", ref,
                     " --passes ", passes_, " ", trace_));
    return true;
  }

  // One run of the reference on the timed passes: p50 and p99 of a pass.
  Latency Reference() {
    const std::string line = reference_->RunOnce();
    long long calls = 0, ns = 0, passes = 0, p50 = 0, p99 = 0;
    if (std::sscanf(line.c_str(),
                    "calls=%lld ns=%lld passes=%lld p50_ns=%lld p99_ns=%lld",
                    &calls, &ns, &passes, &p50, &p99) != 5 ||
        passes != static_cast<long long>(recorded_->pass_calls.size())) {
      std::fprintf(stderr,
                   "reference_bench: the reference's timing script failed\n");
      std::exit(1);
    }
    return {p50 / 1e3, p99 / 1e3};
  }

  // The same on SlotPool: a fresh pool, the untimed calls, then pass by
  // pass through replay::Invoke (as statecache-replay runs a trace).
  Latency SlotPoolPass() const {
    const RecordedPasses& rec = *recorded_;
    const std::vector<replay::Call>& calls = rec.recorder.calls();
    SlotPool pool = *replay::MakePool(rec.recorder.config());
    size_t at = 0;
    for (; at < static_cast<size_t>(rec.untimed_calls); ++at) {
      (void)replay::Invoke(pool, calls[at]);
    }
    std::vector<double> us;
    for (int64_t n : rec.pass_calls) {
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < n; ++i, ++at) {
        (void)replay::Invoke(pool, calls[at]);
      }
      us.push_back(MicrosSince(t0));
    }
    return Summarise(us);
  }

  // "N passes of M calls (median)", where the trace is, and whether the
  // reference agreed with the core on every result.
  std::string Describe() const {
    std::vector<int64_t> sizes = recorded_->pass_calls;
    std::sort(sizes.begin(), sizes.end());
    return absl::StrCat(
        sizes.size(), " timed passes after ", kUntimedPasses, " untimed, ",
        sizes[sizes.size() / 2], " pool calls per pass (median; ",
        sizes.front(), "-", sizes.back(), "); trace ",
        dir_.empty() ? trace_ : "in a temporary file",
        reference_ == nullptr ? ""
        : identical_ ? "; run_trace.py's results identical to the core's"
                     : "; run_trace.py's results DIFFER from the core's");
  }

 private:
  std::unique_ptr<RecordedPasses> recorded_;
  std::string dir_;  // temporary, removed; empty with --pool_trace
  std::string trace_;
  std::string passes_;
  bool identical_ = false;
  std::unique_ptr<PacedReference> reference_;
};

int Run() {
  const int n = absl::GetFlag(FLAGS_iterations);
  const int reps = absl::GetFlag(FLAGS_reps);
  const int32_t interval = absl::GetFlag(FLAGS_operation_timing_interval);
  PrintPlatform(absl::GetFlag(FLAGS_server_cpus));
  // Recorded and checked before anything is timed.
  PassTrace trace(
      std::max(1, std::min(n, absl::GetFlag(FLAGS_reference_passes))));
  std::string why;
  const bool reference = trace.StartReference(&why);
  if (!reference) std::printf("reference rows not run: %s\n", why.c_str());

  Daemon daemon(absl::GetFlag(FLAGS_statecached),
                absl::GetFlag(FLAGS_server_cpus));
  auto stub = v1::StateCache::NewStub(grpc::CreateChannel(
      daemon.address(), grpc::InsecureChannelCredentials()));
  {
    PingTrip warm(*stub);  // warm the channel
    (void)Measure(warm, 200);
  }
  struct Row {
    const char* label;
    std::function<Latency()> run;
  };
  std::vector<Row> rows;
  if (reference) {
    rows.push_back({"reference pool (Python, in-process), its pool calls",
                    [&] { return trace.Reference(); }});
  }
  rows.push_back({"statecache SlotPool, the same calls (replay::Invoke)",
                  [&] { return trace.SlotPoolPass(); }});
  rows.push_back({"statecache in-process core pass (StateCache::Step)", [&] {
                    return InProcessStepLatency(kOps, n, interval,
                                                /*wire=*/false,
                                                /*packed=*/true);
                  }});
  rows.push_back({"unary Step round trip", [&] {
                    UnaryStepTrip trip(*stub, kOps, /*refused=*/false,
                                       /*packed=*/true);
                    return Measure(trip, n);
                  }});
  rows.push_back({"StepStream round trip", [&] {
                    StreamStepTrip trip(*stub, kOps, /*packed=*/true);
                    return Measure(trip, n);
                  }});
  rows.push_back({"C++ client, Step over gRPC", [&] {
                    ClientStepTrip trip(daemon.address(), kOps,
                                        /*streamed=*/false,
                                        AttachOptions::Transport::kGrpc);
                    return Measure(trip, n);
                  }});
  rows.push_back({"C++ client, Step over the step channel", [&] {
                    ClientStepTrip trip(daemon.address(), kOps,
                                        /*streamed=*/false,
                                        AttachOptions::Transport::kChannel);
                    return Measure(trip, n);
                  }});
  rows.push_back({"step channel bare round trip (empty)", [&] {
                    ChannelPingTrip trip(daemon.address());
                    return Measure(trip, n);
                  }});
  // Each repetition runs every row in turn, so the machine's drift falls on
  // all rows alike.
  std::vector<std::vector<Latency>> runs(rows.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < rows.size(); ++i) runs[i].push_back(rows[i].run());
  }
  std::printf(
      "reference: one 256-op pass's pool calls (%s) on the reference pool "
      "in Python in-process (%s), against the same pass through this "
      "project (the in-process and round-trip rows %d passes a run); p50 "
      "and p99 of a pass, median of %d runs; ratio: p50 / the reference's "
      "p50\n",
      trace.Describe().c_str(),
      reference ? absl::GetFlag(FLAGS_python).c_str() : "not run", n, reps);
  std::printf("  %-53s %10s %10s %12s\n", "256-op pass (packed)", "p50 us",
              "p99 us", "p50/ref");
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<double> p50, p99, ratio;
    for (int r = 0; r < reps; ++r) {
      p50.push_back(runs[i][r].p50_us);
      p99.push_back(runs[i][r].p99_us);
      if (reference) ratio.push_back(runs[i][r].p50_us / runs[0][r].p50_us);
    }
    const std::string ratio_text =
        reference ? absl::StrFormat("%11.3fx", Median(ratio)) : "-";
    std::printf("  %-53s %10.1f %10.1f %12s\n", rows[i].label, Median(p50),
                Median(p99), ratio_text.c_str());
  }
  ReportRefusals();
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

// statecache-loadgen: a simulated inference scheduler that replays a
// workload (bench/workload/gen_workload.py) against a running
// statecached, one Step per scheduler pass, and then the same workload
// through the daemon's core in this process (no RPC): the two must make
// the same decisions, so their hit ratios are identical and the latency
// ratio is the price of the hop.
//
//   statecache-loadgen --workload=FILE [--address=ADDR] [--policy=statecache]
//       [--concurrency=16] [--chunk_tokens=2048] [--ladder_blocks=16]
//       [--kv_blocks=8192] [--kv_cache_decode=true] [--json]
//   statecache-loadgen --workload=FILE --daemon=false --num_slots=N ...
//       (in-process only, with the pool described by flags)
//   statecache-loadgen --workload=FILE ... --record=PASSES.jsonl
//       (also writes every pass the daemon run sends, with its result codes
//       and time: record.h has the format)
//   statecache-loadgen --replay=PASSES.jsonl [--address=ADDR] [--json]
//       (sends recorded passes again through the client library, one Step
//       each, times them and checks every result code against the record)
//
// bench/loadgen/README.md has the model, every flag and the output.
//
// Exit codes: 0 ok; 1 an operation was refused unexpectedly, an RPC failed
// or the simulation found the daemon inconsistent with itself; 2 usage (bad
// flags or workload); 3 the daemon and the in-process core decided
// differently (--replay: a result differs from the record's); 4 the
// daemon is unreachable.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/loadgen/daemon_target.h"
#include "bench/loadgen/in_process_target.h"
#include "bench/loadgen/record.h"
#include "bench/loadgen/report.h"
#include "bench/loadgen/scheduler.h"
#include "bench/loadgen/workload.h"
#include "client/statecache_client.h"
#include "vocabulary/default_address.h"

ABSL_FLAG(std::string, workload, "",
          "the workload file (bench/workload/gen_workload.py's output)");
ABSL_FLAG(std::string, address, "",
          "the daemon's address (empty: the daemon's default socket)");
ABSL_FLAG(std::string, policy, "statecache",
          "statecache (follow the daemon's placement advice: branch points "
          "and the continuation through each reply), ladder (prompt ends "
          "and every --ladder_blocks blocks, midstep), prompt-end (one "
          "checkpoint at each prompt's end), junction (prompt ends and where "
          "a prompt stops matching the KV cache), every-block (every block "
          "boundary of the prompt) or none (never resume)");
ABSL_FLAG(int32_t, concurrency, 16, "agent sessions active at once");
ABSL_FLAG(int64_t, chunk_tokens, 2048,
          "prefill chunk per request per pass (a multiple of the block size)");
ABSL_FLAG(int64_t, max_batch_tokens, 8192, "tokens one forward may carry");
ABSL_FLAG(int64_t, ladder_blocks, 16,
          "policy ladder: a checkpoint every this many blocks of prefill "
          "(0: none)");
ABSL_FLAG(int64_t, kv_blocks, 8192, "the simulated KV cache's blocks");
ABSL_FLAG(bool, kv_cache_decode, true,
          "the simulated KV cache keeps full blocks of decode output, as "
          "engines do (a later prompt holding the reply hits through it); "
          "false: prompt blocks only");
ABSL_FLAG(int64_t, prefill_tokens_per_s, 20000,
          "simulated prefill speed of a forward");
ABSL_FLAG(double, decode_ms_per_token, 25,
          "simulated time a forward with decoding requests adds");
ABSL_FLAG(int32_t, num_spec, 0,
          "speculative tokens (the identity's num_spec; slots per request "
          "are 1 + num_spec)");
ABSL_FLAG(std::string, model_id, "", "the identity's model_id");
ABSL_FLAG(std::string, hash_namespace, "", "the identity's hash_namespace");
ABSL_FLAG(bool, daemon, true, "run against the daemon at --address");
ABSL_FLAG(bool, in_process, true,
          "also run the same workload through the daemon's core in this "
          "process, with the daemon's pool size and transfer");
ABSL_FLAG(bool, in_process_metrics, true,
          "observe the in-process core with the daemon's metrics, as a "
          "daemon serving metrics (its default) does");
ABSL_FLAG(int64_t, num_slots, 1024, "--daemon=false: the pool's slots");
ABSL_FLAG(std::string, transfer, "fork",
          "--daemon=false: fork, none or replay");
ABSL_FLAG(int64_t, fork_tokens, 1,
          "--daemon=false: the transfer's fork_tokens");
ABSL_FLAG(bool, readable_midstep, true,
          "--daemon=false: the transfer's readable_midstep");
ABSL_FLAG(bool, stream, false, "send each pass on StepStream, not unary Step");
ABSL_FLAG(bool, realtime, false,
          "sleep so that wall time follows the simulated time (daemon run)");
ABSL_FLAG(bool, clear_index, true,
          "start each run with clear_index, so a daemon that served earlier "
          "runs decides as a fresh pool (as the in-process core) does");
ABSL_FLAG(bool, json, false, "print one JSON object instead of the table");
ABSL_FLAG(std::string, record, "",
          "write every pass the daemon run (else the in-process run) sends, "
          "with its result codes and Step time, to this file (JSON Lines; "
          "bench/loadgen/record.h has the format); with --replay, the "
          "replayed passes");
ABSL_FLAG(std::string, replay, "",
          "instead of simulating: send the passes recorded in this file "
          "(--record's format) to the daemon at --address through the client "
          "library, one Step each, time them and check each result code "
          "and result against the record's");
ABSL_FLAG(int32_t, replay_gap_us, 0,
          "--replay: busy-wait this long before each Step (off its clock), "
          "as a client that takes that long to build its pass does (on a VM "
          "whose idle vCPUs halt, the gap itself slows the call)");
ABSL_FLAG(int32_t, replay_warmup, 0,
          "--replay: leave the first this many passes out of the latency "
          "figures (they are sent and checked all the same)");

namespace statecache::loadgen {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitMismatch = 3;
constexpr int kExitUnreachable = 4;

int Fail(int code, const absl::Status& status, const std::string& what) {
  std::fprintf(stderr, "statecache-loadgen: %s: %s\n", what.c_str(),
               status.ToString().c_str());
  return code;
}

absl::StatusOr<SchedulerOptions> OptionsFromFlags() {
  SchedulerOptions o;
  absl::StatusOr<Policy> policy = ParsePolicy(absl::GetFlag(FLAGS_policy));
  if (!policy.ok()) return policy.status();
  o.policy = *policy;
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.chunk_tokens = absl::GetFlag(FLAGS_chunk_tokens);
  o.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  o.ladder_blocks = absl::GetFlag(FLAGS_ladder_blocks);
  o.kv_blocks = absl::GetFlag(FLAGS_kv_blocks);
  o.kv_cache_decode = absl::GetFlag(FLAGS_kv_cache_decode);
  o.prefill_tokens_per_s = absl::GetFlag(FLAGS_prefill_tokens_per_s);
  o.decode_ms_per_token = absl::GetFlag(FLAGS_decode_ms_per_token);
  if (absl::GetFlag(FLAGS_num_spec) < 0) {
    return absl::InvalidArgumentError("--num_spec must be >= 0");
  }
  o.width = 1 + absl::GetFlag(FLAGS_num_spec);
  o.realtime = absl::GetFlag(FLAGS_realtime);
  o.clear_index = absl::GetFlag(FLAGS_clear_index);
  return o;
}

// Opens `path` for --record (empty: none). Errors: the file cannot be
// created.
absl::StatusOr<std::FILE*> OpenRecord(const std::string& path) {
  if (path.empty()) return nullptr;
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return f;
}

absl::Status CloseRecord(std::FILE* f, const RecordingTarget* recorder) {
  if (f == nullptr) return absl::OkStatus();
  const bool ok =
      (recorder == nullptr || recorder->ok()) && std::fflush(f) == 0;
  if (std::fclose(f) != 0 || !ok) {
    return absl::DataLossError("writing the --record file failed");
  }
  return absl::OkStatus();
}

// The workload on `target`, with the pool's counters before and after.
// Records every pass into `record_file` when it is open (`header` first),
// and closes it whatever happens.
absl::StatusOr<TargetRun> RunOn(StepTarget& target, std::string name,
                                const Workload& workload,
                                const SchedulerOptions& options,
                                const PoolConfig& pool, std::FILE* record_file,
                                nlohmann::json header) {
  std::optional<RecordingTarget> recorder;
  if (record_file != nullptr) {
    recorder.emplace(target, record_file, std::move(header));
  }
  absl::StatusOr<DaemonStats> before = target.Stats();
  absl::StatusOr<RunResult> result =
      !before.ok() ? absl::StatusOr<RunResult>(before.status())
      : recorder   ? Simulate(workload, options, pool, *recorder)
                   : Simulate(workload, options, pool, target);
  const absl::Status closed =
      CloseRecord(record_file, recorder ? &*recorder : nullptr);
  if (!result.ok()) return result.status();
  if (!closed.ok()) return closed;
  absl::StatusOr<DaemonStats> after = target.Stats();
  if (!after.ok()) return after.status();
  return TargetRun{.name = std::move(name),
                   .run = *std::move(result),
                   .before = *before,
                   .after = *after};
}

// --replay: the recorded passes through the client library, one Step each.
int Replay(const std::string& path) {
  absl::StatusOr<RecordedPasses> recorded = ReadRecordedPasses(path);
  if (!recorded.ok()) return Fail(kExitUsage, recorded.status(), "--replay");
  std::string address = absl::GetFlag(FLAGS_address);
  if (address.empty()) address = DefaultAddress();
  absl::StatusOr<std::unique_ptr<DaemonTarget>> target = DaemonTarget::Create(
      address, recorded->identity, absl::GetFlag(FLAGS_stream),
      recorded->pool.placement_advised);
  if (!target.ok()) {
    return Fail(
        absl::IsUnavailable(target.status()) ? kExitUnreachable : kExitError,
        target.status(), absl::StrCat("attaching to ", address));
  }
  const SessionInfo& session = (*target)->session();
  const PoolConfig& want = recorded->pool;
  if (session.num_slots != want.num_slots ||
      session.transfer.kind != want.transfer.kind ||
      session.transfer.fork_tokens != want.transfer.fork_tokens ||
      session.transfer.readable_midstep != want.transfer.readable_midstep ||
      session.placement_advised != want.placement_advised) {
    std::fprintf(
        stderr,
        "statecache-loadgen: the daemon's pool (%lld slots, transfer "
        "%s, placement advice %s) is not the record's (%lld slots, "
        "transfer %s, placement advice %s)\n",
        static_cast<long long>(session.num_slots),
        session.transfer.kind.c_str(), session.placement_advised ? "on" : "off",
        static_cast<long long>(want.num_slots), want.transfer.kind.c_str(),
        want.placement_advised ? "on" : "off");
    return kExitUsage;
  }
  if ((*target)->stats_before_attach().requests > 0) {
    std::fprintf(stderr,
                 "statecache-loadgen: warning: the daemon holds requests of "
                 "other sessions; the recorded codes may not repeat\n");
  }
  absl::StatusOr<std::FILE*> record_file =
      OpenRecord(absl::GetFlag(FLAGS_record));
  if (!record_file.ok()) return Fail(kExitUsage, record_file.status(), "flags");
  std::optional<RecordingTarget> recorder;
  if (*record_file != nullptr) {
    nlohmann::json header = recorded->header;
    header["run"] = {{"replay_of", path}, {"address", address}};
    recorder.emplace(**target, *record_file, header);
  }

  // The passes back to back, nothing but building the next one between
  // Steps; the results are checked (and recorded) after the last.
  const size_t n = recorded->passes.size();
  const size_t warmup =
      static_cast<size_t>(std::max(0, absl::GetFlag(FLAGS_replay_warmup)));
  std::vector<StepResults> got;
  std::vector<double> all_us;
  got.reserve(n);
  all_us.reserve(n);
  const auto wall_start = std::chrono::steady_clock::now();
  const auto gap =
      std::chrono::microseconds(absl::GetFlag(FLAGS_replay_gap_us));
  for (size_t i = 0; i < n; ++i) {
    if (gap.count() > 0) {
      const auto until = std::chrono::steady_clock::now() + gap;
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    double seconds = 0;
    absl::StatusOr<StepResults> results =
        (*target)->Run(recorded->passes[i], &seconds);
    if (!results.ok()) {
      (void)CloseRecord(*record_file, recorder ? &*recorder : nullptr);
      return Fail(kExitError, results.status(),
                  absl::StrCat("replaying pass ", i));
    }
    got.push_back(*std::move(results));
    all_us.push_back(seconds * 1e6);
  }
  const double wall_s = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - wall_start)
                            .count();

  std::vector<double> timed;
  int64_t operations = 0;
  int64_t checked = 0;
  int64_t mismatches = 0;
  std::string first_mismatch;
  for (size_t i = 0; i < n; ++i) {
    const Pass& pass = recorded->passes[i];
    if (recorder) recorder->Write(pass, got[i], all_us[i] / 1e6);
    if (i >= warmup) {
      timed.push_back(all_us[i] / 1e6);
      operations += static_cast<int64_t>(pass.ops.size());
    }
    const std::vector<int32_t>& want_codes = recorded->codes[i];
    const nlohmann::json& want_results = recorded->results[i];
    if (want_codes.empty() && want_results.is_null()) continue;
    ++checked;
    const std::vector<int32_t> codes = ResultCodes(got[i]);
    std::string differs;
    if (codes.size() != pass.ops.size()) {
      differs = absl::StrCat(codes.size(), " results for ", pass.ops.size(),
                             " operations");
    }
    for (size_t k = 0; differs.empty() && k < codes.size(); ++k) {
      const std::string op = absl::StrCat(
          "operation ", k, " (", OpJson(pass.ops[k]).begin().key(), ")");
      if (!want_codes.empty() && codes[k] != want_codes[k]) {
        differs =
            absl::StrCat(op, ": code ", codes[k], ", recorded ", want_codes[k]);
      } else if (!want_results.is_null()) {
        const nlohmann::json result = ResultJson(got[i].results[k]);
        if (result != want_results[k]) {
          differs = absl::StrCat(op, ": ", result.dump(), ", recorded ",
                                 want_results[k].dump());
        }
      }
    }
    if (!differs.empty()) {
      ++mismatches;
      if (first_mismatch.empty()) {
        first_mismatch = absl::StrCat("pass ", i, " ", differs);
      }
    }
  }
  if (absl::Status st =
          CloseRecord(*record_file, recorder ? &*recorder : nullptr);
      !st.ok()) {
    return Fail(kExitError, st, "--record");
  }
  if (absl::Status st = (*target)->Detach(); !st.ok()) {
    return Fail(kExitError, st, "Detach");
  }
  double sum = 0;
  for (double x : timed) sum += x;
  const double p50 = Percentile(timed, 0.5) * 1e6;
  const double p99 = Percentile(timed, 0.99) * 1e6;
  const double mean = timed.empty() ? 0 : sum / timed.size() * 1e6;
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json out = {
        {"replay",
         {{"path", path},
          {"address", address},
          {"streamed", absl::GetFlag(FLAGS_stream)},
          {"gap_us", absl::GetFlag(FLAGS_replay_gap_us)},
          {"passes", static_cast<int64_t>(recorded->passes.size())},
          {"warmup", static_cast<int64_t>(warmup)},
          {"timed", static_cast<int64_t>(timed.size())},
          {"operations", operations},
          {"step_latency_us",
           {{"p50", p50},
            {"p99", p99},
            {"mean", mean},
            {"max", Percentile(timed, 1.0) * 1e6}}},
          {"wall_seconds", wall_s},
          {"passes_checked", checked},
          {"mismatches", mismatches},
          {"first_mismatch", first_mismatch},
          {"step_us", all_us}}},
        {"pool",
         {{"num_slots", session.num_slots},
          {"transfer", session.transfer.kind},
          {"max_operations_per_step", session.max_operations_per_step}}},
    };
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf(
        "replayed %zu passes of %s (%zu timed, %lld operations) in %.2f s\n"
        "step latency p50 %.1f us, p99 %.1f us, mean %.1f us\n"
        "results: %lld passes checked against the record, %lld "
        "differ%s%s\n",
        recorded->passes.size(), path.c_str(), timed.size(),
        static_cast<long long>(operations), wall_s, p50, p99, mean,
        static_cast<long long>(checked), static_cast<long long>(mismatches),
        first_mismatch.empty() ? "" : "; first: ", first_mismatch.c_str());
  }
  std::fflush(stdout);
  if (mismatches > 0) {
    std::fprintf(stderr,
                 "statecache-loadgen: %lld replayed passes got other results "
                 "than recorded (%s)\n",
                 static_cast<long long>(mismatches), first_mismatch.c_str());
    return kExitMismatch;
  }
  return kExitOk;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "statecache-loadgen --workload=FILE [--address=ADDR] "
      "[--policy=statecache|prompt-end|junction|every-block|none] "
      "[--concurrency=N] [--json]\n"
      "Replays a workload against statecached as a simulated "
      "scheduler, then through the daemon's core in-process; "
      "bench/loadgen/README.md has the details.");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "statecache-loadgen: unexpected argument '%s'\n",
                 rest[1]);
    return kExitUsage;
  }
  if (const std::string replay = absl::GetFlag(FLAGS_replay); !replay.empty()) {
    return Replay(replay);
  }
  const std::string path = absl::GetFlag(FLAGS_workload);
  if (path.empty()) {
    std::fprintf(stderr, "statecache-loadgen: --workload is required\n");
    return kExitUsage;
  }
  absl::StatusOr<SchedulerOptions> options = OptionsFromFlags();
  if (!options.ok()) return Fail(kExitUsage, options.status(), "flags");
  const bool daemon = absl::GetFlag(FLAGS_daemon);
  const bool in_process = absl::GetFlag(FLAGS_in_process);
  if (!daemon && !in_process) {
    std::fprintf(stderr,
                 "statecache-loadgen: --daemon=false and --in_process=false "
                 "leave nothing to run\n");
    return kExitUsage;
  }
  absl::StatusOr<Workload> workload = ReadWorkload(path);
  if (!workload.ok()) return Fail(kExitUsage, workload.status(), "workload");
  if (absl::Status st = ValidateOptions(*options, workload->hash_block_size);
      !st.ok()) {
    return Fail(kExitUsage, st, "flags");
  }
  if (options->kv_cache_decode && workload->lines_without_output_blocks > 0) {
    return Fail(kExitUsage,
                absl::InvalidArgumentError(absl::StrCat(
                    workload->lines_without_output_blocks,
                    " request lines have no output_blocks (the file predates "
                    "them): regenerate it, or pass --kv_cache_decode=false")),
                "workload");
  }

  const ModelIdentity identity{
      .model_id = absl::GetFlag(FLAGS_model_id),
      .hash_block_size = workload->hash_block_size,
      .hash_namespace = absl::GetFlag(FLAGS_hash_namespace),
      .num_spec = absl::GetFlag(FLAGS_num_spec)};
  Report report;
  report.workload_path = path;
  report.workload = &*workload;
  report.options = *options;
  report.pool = PoolConfig{
      .num_slots = absl::GetFlag(FLAGS_num_slots),
      .transfer =
          TransferConfig{
              .kind = absl::GetFlag(FLAGS_transfer),
              .fork_tokens = absl::GetFlag(FLAGS_fork_tokens),
              .readable_midstep = absl::GetFlag(FLAGS_readable_midstep)},
      .max_operations_per_step = 4096,
      .placement_advised = options->policy == Policy::kStateCache};

  absl::StatusOr<std::FILE*> record_file =
      OpenRecord(absl::GetFlag(FLAGS_record));
  if (!record_file.ok()) return Fail(kExitUsage, record_file.status(), "flags");
  // The record's `run`: what produced it.
  auto record_run = [&](const std::string& target) {
    return nlohmann::json{{"target", target},
                          {"workload", path},
                          {"policy", std::string(PolicyName(options->policy))},
                          {"concurrency", options->concurrency},
                          {"chunk_tokens", options->chunk_tokens},
                          {"max_batch_tokens", options->max_batch_tokens},
                          {"ladder_blocks", options->ladder_blocks},
                          {"kv_blocks", options->kv_blocks},
                          {"kv_cache_decode", options->kv_cache_decode},
                          {"clear_index", options->clear_index}};
  };

  if (daemon) {
    std::string address = absl::GetFlag(FLAGS_address);
    if (address.empty()) address = DefaultAddress();
    report.address = address;
    const bool advise = options->policy == Policy::kStateCache;
    absl::StatusOr<std::unique_ptr<DaemonTarget>> target = DaemonTarget::Create(
        address, identity, absl::GetFlag(FLAGS_stream), advise);
    if (!target.ok()) {
      return Fail(
          absl::IsUnavailable(target.status()) ? kExitUnreachable : kExitError,
          target.status(), absl::StrCat("attaching to ", address));
    }
    const SessionInfo& session = (*target)->session();
    report.pool =
        PoolConfig{.num_slots = session.num_slots,
                   .transfer = session.transfer,
                   .max_operations_per_step = session.max_operations_per_step,
                   .placement_advised = session.placement_advised};
    if (advise && !session.placement_advised) {
      return Fail(kExitError,
                  absl::FailedPreconditionError(
                      "policy statecache follows the daemon's placement "
                      "advice, which this daemon does not give (it runs "
                      "with --advise_placement=false)"),
                  absl::StrCat("attaching to ", address));
    }
    if ((*target)->stats_before_attach().requests > 0) {
      std::fprintf(
          stderr,
          "statecache-loadgen: warning: the daemon holds %lld "
          "requests of other sessions; its decisions may differ "
          "from the in-process core's\n",
          static_cast<long long>((*target)->stats_before_attach().requests));
    }
    absl::StatusOr<TargetRun> run = RunOn(
        **target, "daemon", *workload, *options, report.pool, *record_file,
        RecordHeader(identity, report.pool, record_run("daemon " + address)));
    *record_file = nullptr;  // RunOn closed it
    if (!run.ok()) return Fail(kExitError, run.status(), "the daemon run");
    if (absl::Status st = (*target)->Detach(); !st.ok()) {
      return Fail(kExitError, st, "Detach");
    }
    report.runs.push_back(*std::move(run));
  }

  if (in_process) {
    SchedulerOptions in_options = *options;
    in_options.realtime = false;
    absl::StatusOr<std::unique_ptr<InProcessTarget>> target =
        InProcessTarget::Create(identity, report.pool.num_slots,
                                report.pool.transfer,
                                report.pool.max_operations_per_step,
                                absl::GetFlag(FLAGS_in_process_metrics),
                                options->policy == Policy::kStateCache);
    if (!target.ok()) {
      return Fail(kExitUsage, target.status(), "the in-process core");
    }
    absl::StatusOr<TargetRun> run =
        RunOn(**target, "in_process", *workload, in_options, report.pool,
              *record_file,
              RecordHeader(identity, report.pool, record_run("in_process")));
    *record_file = nullptr;  // RunOn closed it
    if (!run.ok()) {
      return Fail(kExitError, run.status(), "the in-process run");
    }
    report.runs.push_back(*std::move(run));
  }

  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", ReportJson(report).dump().c_str());
  } else {
    PrintTable(report, stdout);
  }
  std::fflush(stdout);
  if (!SameHitRatio(report) || !SameDecisions(report)) {
    std::fprintf(stderr,
                 "statecache-loadgen: the daemon and the in-process core "
                 "decided differently (hit ratio %s, decisions %s)\n",
                 SameHitRatio(report) ? "identical" : "differs",
                 SameDecisions(report) ? "identical" : "differ");
    return kExitMismatch;
  }
  return kExitOk;
}

}  // namespace
}  // namespace statecache::loadgen

int main(int argc, char** argv) {
  return statecache::loadgen::Main(argc, argv);
}

#include "bench/loadgen/report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"

namespace statecache::loadgen {
namespace {

using nlohmann::json;

double Ratio(double a, double b) { return b == 0 ? 0.0 : a / b; }

double StepSeconds(const RunResult& r) {
  double s = 0;
  for (double x : r.step_seconds) s += x;
  return s;
}

struct Fates {
  int64_t kept, dropped, evicted, orphaned;
};

Fates FatesOf(const TargetRun& t) {
  return Fates{t.after.checkpoints_kept - t.before.checkpoints_kept,
               t.after.checkpoints_dropped - t.before.checkpoints_dropped,
               t.after.checkpoints_evicted - t.before.checkpoints_evicted,
               t.after.checkpoints_orphaned - t.before.checkpoints_orphaned};
}

// The daemon's own resume counters over the run: blocks resumed / wanted.
double DaemonHitRatio(const TargetRun& t) {
  return Ratio(static_cast<double>(t.after.resume_blocks_resumed -
                                   t.before.resume_blocks_resumed),
               static_cast<double>(t.after.resume_blocks_wanted -
                                   t.before.resume_blocks_wanted));
}

// Every counter of GetStats (as the proto marks them) over the run: after
// minus before, named as the proto names them.
json CountersOverRun(const TargetRun& t) {
  const std::vector<StatsField> before = StatsFields(t.before);
  const std::vector<StatsField> after = StatsFields(t.after);
  json out = json::object();
  for (size_t i = 0; i < after.size(); ++i) {
    if (after[i].kind != StatsFieldKind::kCounter) continue;
    // Both lists come from one generated function: same order.
    out[std::string(after[i].name)] =
        static_cast<int64_t>(NumericValue(after[i]) - NumericValue(before[i]));
  }
  return out;
}

json RunJson(const TargetRun& t) {
  const RunResult& r = t.run;
  const double step_s = StepSeconds(r);
  return json{
      {"hit_ratio", r.hit_ratio()},
      {"tokens",
       {{"prompt", r.prompt_tokens},
        {"asked", r.kv_hit_tokens},
        {"resumed", r.resumed_tokens},
        {"saved_share", Ratio(static_cast<double>(r.resumed_tokens),
                              static_cast<double>(r.prompt_tokens))},
        {"prefilled", r.prefill_tokens},
        {"output", r.output_tokens}}},
      {"requests", r.requests},
      {"admit_retries", r.admit_retries},
      {"resumes", {{"fork", r.resumes_fork}, {"adopt", r.resumes_adopt}}},
      {"resumable_hit_blocks", r.query_blocks},
      {"resumed_blocks", r.resumed_blocks},
      {"checkpoints",
       {{"sent", r.checkpoints_sent}, {"kept", r.checkpoints_kept}}},
      {"midstep",
       {{"positions", r.reserve_positions},
        {"reserved", r.reservations},
        {"published", r.published}}},
      {"unindex", {{"hashes", r.unindexed}, {"orphaned", r.orphaned}}},
      {"daemon_counters", CountersOverRun(t)},
      {"daemon_hit_ratio", DaemonHitRatio(t)},
      {"kv",
       {{"evictions", r.kv_evictions}, {"over_capacity", r.kv_over_capacity}}},
      {"passes", r.passes},
      {"steps", static_cast<int64_t>(r.step_seconds.size())},
      {"operations", r.operations},
      {"step_latency_us",
       {{"p50", Percentile(r.step_seconds, 0.5) * 1e6},
        {"p99", Percentile(r.step_seconds, 0.99) * 1e6},
        {"mean",
         Ratio(step_s, static_cast<double>(r.step_seconds.size())) * 1e6},
        {"max", Percentile(r.step_seconds, 1.0) * 1e6}}},
      {"operations_per_s", Ratio(static_cast<double>(r.operations), step_s)},
      {"step_seconds", step_s},
      {"wall_seconds", r.wall_seconds},
      {"simulated_seconds", static_cast<double>(r.simulated_us) / 1e6},
      {"digest", absl::StrFormat("%016x", r.digest)},
  };
}

const TargetRun* Find(const Report& report, const std::string& name) {
  for (const TargetRun& t : report.runs) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace

double Percentile(absl::Span<const double> values, double q) {
  if (values.empty()) return 0;
  std::vector<double> v(values.begin(), values.end());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
  rank = std::clamp<size_t>(rank, 1, n);
  return v[rank - 1];
}

bool SameHitRatio(const Report& report) {
  for (const TargetRun& t : report.runs) {
    if (t.run.resumed_tokens != report.runs[0].run.resumed_tokens ||
        t.run.kv_hit_tokens != report.runs[0].run.kv_hit_tokens) {
      return false;
    }
  }
  return true;
}

bool SameDecisions(const Report& report) {
  for (const TargetRun& t : report.runs) {
    if (t.run.digest != report.runs[0].run.digest) return false;
  }
  return true;
}

json ReportJson(const Report& report) {
  const SchedulerOptions& o = report.options;
  const Workload& w = *report.workload;
  json out = {
      {"workload",
       {{"path", report.workload_path},
        {"hash_block_size", w.hash_block_size},
        {"sessions", static_cast<int64_t>(w.sessions.size())},
        {"requests", w.requests()},
        {"prompt_tokens", w.prompt_tokens()},
        {"output_tokens", w.output_tokens()},
        {"params", json::parse(w.params_json, nullptr, false)}}},
      {"config",
       {{"policy", std::string(PolicyName(o.policy))},
        {"concurrency", o.concurrency},
        {"chunk_tokens", o.chunk_tokens},
        {"max_batch_tokens", o.max_batch_tokens},
        {"ladder_blocks", o.ladder_blocks},
        {"kv_blocks", o.kv_blocks},
        {"kv_cache_decode", o.kv_cache_decode},
        {"prefill_tokens_per_s", o.prefill_tokens_per_s},
        {"decode_ms_per_token", o.decode_ms_per_token},
        {"width", o.width},
        {"realtime", o.realtime}}},
      {"pool",
       {{"address", report.address},
        {"num_slots", report.pool.num_slots},
        {"transfer",
         {{"kind", report.pool.transfer.kind},
          {"fork_tokens", report.pool.transfer.fork_tokens},
          {"readable_midstep", report.pool.transfer.readable_midstep}}},
        {"max_operations_per_step", report.pool.max_operations_per_step}}},
  };
  for (const TargetRun& t : report.runs) out[t.name] = RunJson(t);
  out["identical"] = {{"hit_ratio", SameHitRatio(report)},
                      {"decisions", SameDecisions(report)}};
  const TargetRun* d = Find(report, "daemon");
  const TargetRun* p = Find(report, "in_process");
  if (d != nullptr && p != nullptr) {
    out["latency_ratio"] = {
        {"p50", Ratio(Percentile(d->run.step_seconds, 0.5),
                      Percentile(p->run.step_seconds, 0.5))},
        {"p99", Ratio(Percentile(d->run.step_seconds, 0.99),
                      Percentile(p->run.step_seconds, 0.99))}};
  }
  return out;
}

void PrintTable(const Report& report, std::FILE* out) {
  const Workload& w = *report.workload;
  const SchedulerOptions& o = report.options;
  const PoolConfig& pool = report.pool;
  absl::FPrintF(out,
                "workload   %s: %d sessions, %d requests, %d prompt tokens, "
                "%d output tokens\n",
                report.workload_path, w.sessions.size(), w.requests(),
                w.prompt_tokens(), w.output_tokens());
  absl::FPrintF(out,
                "pool       %d slots, transfer %s (fork_tokens %d, "
                "readable_midstep %s)%s\n",
                pool.num_slots, pool.transfer.kind, pool.transfer.fork_tokens,
                pool.transfer.readable_midstep ? "true" : "false",
                report.address.empty() ? "" : " at " + report.address);
  absl::FPrintF(out,
                "scheduler  policy %s, concurrency %d, chunk %d tokens, "
                "batch %d tokens, ladder %d blocks, KV %d blocks (%s), "
                "prefill %d tok/s, decode %.1f ms/token\n\n",
                PolicyName(o.policy), o.concurrency, o.chunk_tokens,
                o.max_batch_tokens, o.ladder_blocks, o.kv_blocks,
                o.kv_cache_decode ? "prompt and decode" : "prompt only",
                o.prefill_tokens_per_s, o.decode_ms_per_token);

  absl::FPrintF(out, "%-34s", "");
  for (const TargetRun& t : report.runs) absl::FPrintF(out, "%18s", t.name);
  absl::FPrintF(out, "\n");
  auto row = [&](const char* label, auto cell) {
    absl::FPrintF(out, "%-34s", label);
    for (const TargetRun& t : report.runs) {
      absl::FPrintF(out, "%18s", cell(t));
    }
    absl::FPrintF(out, "\n");
  };
  auto i64 = [](int64_t v) { return absl::StrFormat("%d", v); };
  auto f4 = [](double v) { return absl::StrFormat("%.4f", v); };
  auto f1 = [](double v) { return absl::StrFormat("%.1f", v); };
  row("hit ratio (resumed / asked)",
      [&](const TargetRun& t) { return f4(t.run.hit_ratio()); });
  row("tokens asked for (KV hits)",
      [&](const TargetRun& t) { return i64(t.run.kv_hit_tokens); });
  row("tokens resumed (saved)",
      [&](const TargetRun& t) { return i64(t.run.resumed_tokens); });
  row("saved / prompt tokens", [&](const TargetRun& t) {
    return f4(Ratio(static_cast<double>(t.run.resumed_tokens),
                    static_cast<double>(t.run.prompt_tokens)));
  });
  row("tokens prefilled",
      [&](const TargetRun& t) { return i64(t.run.prefill_tokens); });
  row("resumes fork / adopt", [&](const TargetRun& t) {
    return absl::StrFormat("%d / %d", t.run.resumes_fork, t.run.resumes_adopt);
  });
  row("admits retried (no free slot)",
      [&](const TargetRun& t) { return i64(t.run.admit_retries); });
  row("fork checkpoints sent / kept", [&](const TargetRun& t) {
    return absl::StrFormat("%d / %d", t.run.checkpoints_sent,
                           t.run.checkpoints_kept);
  });
  row("midstep asked / reserved / publ.", [&](const TargetRun& t) {
    return absl::StrFormat("%d/%d/%d", t.run.reserve_positions,
                           t.run.reservations, t.run.published);
  });
  row("KV evictions unindexed / orphaned", [&](const TargetRun& t) {
    return absl::StrFormat("%d / %d", t.run.unindexed, t.run.orphaned);
  });
  row("fates kept", [&](const TargetRun& t) { return i64(FatesOf(t).kept); });
  row("fates dropped",
      [&](const TargetRun& t) { return i64(FatesOf(t).dropped); });
  row("fates evicted",
      [&](const TargetRun& t) { return i64(FatesOf(t).evicted); });
  row("fates orphaned",
      [&](const TargetRun& t) { return i64(FatesOf(t).orphaned); });
  row("daemon's hit ratio (GetStats)",
      [&](const TargetRun& t) { return f4(DaemonHitRatio(t)); });
  row("passes", [&](const TargetRun& t) { return i64(t.run.passes); });
  row("operations", [&](const TargetRun& t) { return i64(t.run.operations); });
  row("step latency p50 (us)", [&](const TargetRun& t) {
    return f1(Percentile(t.run.step_seconds, 0.5) * 1e6);
  });
  row("step latency p99 (us)", [&](const TargetRun& t) {
    return f1(Percentile(t.run.step_seconds, 0.99) * 1e6);
  });
  row("operations/s (in Steps)", [&](const TargetRun& t) {
    return absl::StrFormat("%.0f", Ratio(static_cast<double>(t.run.operations),
                                         StepSeconds(t.run)));
  });
  row("wall s / simulated s", [&](const TargetRun& t) {
    return absl::StrFormat("%.2f / %.0f", t.run.wall_seconds,
                           static_cast<double>(t.run.simulated_us) / 1e6);
  });
  row("decision digest", [&](const TargetRun& t) {
    return absl::StrFormat("%016x", t.run.digest);
  });
  if (report.runs.size() >= 2) {
    absl::FPrintF(out, "\nidentical hit ratio: %s; identical decisions: %s\n",
                  SameHitRatio(report) ? "yes" : "NO",
                  SameDecisions(report) ? "yes" : "NO");
  }
  const TargetRun* d = Find(report, "daemon");
  const TargetRun* p = Find(report, "in_process");
  if (d != nullptr && p != nullptr) {
    absl::FPrintF(out,
                  "step latency daemon / in-process: p50 %.1fx, p99 %.1fx\n",
                  Ratio(Percentile(d->run.step_seconds, 0.5),
                        Percentile(p->run.step_seconds, 0.5)),
                  Ratio(Percentile(d->run.step_seconds, 0.99),
                        Percentile(p->run.step_seconds, 0.99)));
  }
}

}  // namespace statecache::loadgen

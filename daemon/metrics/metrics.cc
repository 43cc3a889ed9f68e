#include "daemon/metrics/metrics.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace statecache {
namespace {

using prometheus::MetricFamily;

// Microsecond work: 1 us to 1 s.
constexpr std::array<double, 16> kLatencyBounds = {
    1e-6, 2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5,   1e-4, 2.5e-4,
    5e-4, 1e-3,   2.5e-3, 5e-3, 1e-2,   2.5e-2, 0.1,  1.0};

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries(
      kLatencyBounds.begin(), kLatencyBounds.end());
  return *buckets;
}

const char* OperationName(int kind) {
  switch (static_cast<v1::Operation::KindCase>(kind)) {
    case v1::Operation::kBeginPass:
      return "begin_pass";
    case v1::Operation::kAdmit:
      return "admit";
    case v1::Operation::kResumableHit:
      return "resumable_hit";
    case v1::Operation::kLookup:
      return "lookup";
    case v1::Operation::kReserve:
      return "reserve";
    case v1::Operation::kPublish:
      return "publish";
    case v1::Operation::kCancel:
      return "cancel";
    case v1::Operation::kCheckpoint:
      return "checkpoint";
    case v1::Operation::kConsumeFork:
      return "consume_fork";
    case v1::Operation::kAdoptForkSource:
      return "adopt_fork_source";
    case v1::Operation::kRelease:
      return "release";
    case v1::Operation::kUnindex:
      return "unindex";
    case v1::Operation::kClearIndex:
      return "clear_index";
    case v1::Operation::kCopy:
      return "copy";
    case v1::Operation::kSnapshot:
      return "snapshot";
    case v1::Operation::KIND_NOT_SET:
      break;
  }
  return nullptr;
}

// The codes the API documents as refusals; other codes are folded into
// "OTHER" rather than given series of their own.
constexpr absl::StatusCode kRefusalCodes[] = {
    absl::StatusCode::kCancelled,          absl::StatusCode::kInvalidArgument,
    absl::StatusCode::kDeadlineExceeded,   absl::StatusCode::kNotFound,
    absl::StatusCode::kAlreadyExists,      absl::StatusCode::kResourceExhausted,
    absl::StatusCode::kFailedPrecondition, absl::StatusCode::kAborted,
    absl::StatusCode::kUnavailable,        absl::StatusCode::kInternal,
};

std::string CodeName(absl::StatusCode code) {
  // "RESOURCE_EXHAUSTED", as gRPC and absl::Status print it.
  return absl::StatusCodeToString(code);
}

// A counter's total read from GetStats: the held counter is brought up to
// it by what it grew since the last scrape (prometheus-cpp's Counter only
// increments). The totals only grow; one that did not is left as it was.
void CatchUp(prometheus::Counter* counter, int64_t total) {
  const double grew = static_cast<double>(total) - counter->Value();
  if (grew > 0) counter->Increment(grew);
}

}  // namespace

// The children of the families whose values come from GetStats, each built
// once in the constructor.
struct Metrics::StatsSeries {
  prometheus::Counter* checkpoints_kept = nullptr;
  prometheus::Counter* checkpoints_dropped = nullptr;
  prometheus::Counter* checkpoints_evicted = nullptr;
  prometheus::Counter* checkpoints_orphaned = nullptr;
  prometheus::Gauge* slots_used = nullptr;
  prometheus::Gauge* slots_held = nullptr;
  prometheus::Gauge* slots_vacant = nullptr;
  prometheus::Gauge* slots_capacity = nullptr;
  prometheus::Gauge* slots_quarantined = nullptr;
  prometheus::Gauge* indexed_checkpoints = nullptr;
  prometheus::Counter* resumes_fork = nullptr;
  prometheus::Counter* resumes_adopt = nullptr;
  prometheus::Counter* resumes_miss = nullptr;
  prometheus::Counter* resume_blocks_wanted = nullptr;
  prometheus::Counter* resume_blocks_resumed = nullptr;
  prometheus::Gauge* sessions = nullptr;
  prometheus::Gauge* requests = nullptr;
  prometheus::Counter* lease_expiries = nullptr;
  prometheus::Counter* session_evictions = nullptr;
  prometheus::Gauge* draining = nullptr;
  prometheus::Counter* resumes_tier = nullptr;
  prometheus::Counter* checkpoints_demoted = nullptr;
  prometheus::Counter* tier_evicted = nullptr;
  prometheus::Counter* tier_demotions_failed = nullptr;
  prometheus::Counter* tier_promotions_failed = nullptr;
  prometheus::Gauge* tier_capacity_bytes = nullptr;
  prometheus::Gauge* tier_held_bytes = nullptr;
  prometheus::Gauge* tier_entries = nullptr;
  // Warm restart: one child per outcome (1 for this start's), one per fate.
  std::array<prometheus::Gauge*, 5> restart_outcome{};
  prometheus::Gauge* restored = nullptr;
  prometheus::Gauge* restored_tier = nullptr;
  prometheus::Gauge* restore_bad_checksum = nullptr;
  prometheus::Gauge* restore_unreadable = nullptr;
  prometheus::Gauge* restore_no_room = nullptr;
  prometheus::Gauge* restore_seconds = nullptr;
  prometheus::Counter* state_saves = nullptr;
  prometheus::Counter* state_save_failures = nullptr;
  prometheus::Gauge* state_saved_checkpoints = nullptr;
  prometheus::Gauge* state_last_save = nullptr;
};

// WarmRestartStats.outcome's values, in restart_outcome's order.
constexpr std::array<const char*, 5> kRestartOutcomes = {
    "off", "cold", "restored", "mismatch", "unreadable"};

// What the exposer collects: the values refreshed, then the registry's
// families (the same ones every time).
class Metrics::Scrape final : public prometheus::Collectable {
 public:
  explicit Scrape(const Metrics* metrics) : metrics_(metrics) {}
  std::vector<MetricFamily> Collect() const override {
    metrics_->Refresh();
    return metrics_->registry_->Collect();
  }

 private:
  const Metrics* const metrics_;
};

// The Step operations' counts and sampled latencies. A Step's are counted
// into plain arrays under one lock (per Step, not per operation), and moved
// into the held histograms and counters at scrape time (Take, then one
// ObserveMultiple and one Increment per kind). prometheus::Histogram::Observe
// would cost a lock and an atomic read-modify-write per bucket for every
// operation timed.
class Metrics::OperationLatencies {
 public:
  static constexpr size_t kBuckets = kLatencyBounds.size() + 1;  // + Inf
  struct Kind {
    std::array<uint64_t, kBuckets> counts{};  // of the operations timed
    double sum = 0;
    uint64_t operations = 0;  // every one that ran
  };

  void Add(const StepOperations& step) {
    const prometheus::Histogram::BucketBoundaries& bounds = LatencyBuckets();
    absl::MutexLock lock(&mu_);
    for (int k = 1; k < kOps; ++k) {
      kinds_[k].operations += static_cast<uint64_t>(step.counts[k]);
    }
    for (const OperationSample& s : step.timed) {
      const int k = static_cast<int>(s.kind);
      if (k <= 0 || k >= kOps) continue;
      // The first bound >= the value (le semantics); past the last: +Inf.
      // Scanned from the bottom rather than bisected: nearly every operation
      // takes under the first bound, so this is one comparison, where a
      // bisection's four mispredict.
      size_t b = 0;
      while (b < bounds.size() && s.seconds > bounds[b]) ++b;
      Kind& kind = kinds_[k];
      ++kind.counts[b];
      kind.sum += s.seconds;
    }
  }

  // What was counted since the last Take, by kind; the arrays start again
  // from zero.
  std::array<Kind, kOps> Take() {
    absl::MutexLock lock(&mu_);
    std::array<Kind, kOps> out = kinds_;
    kinds_ = {};
    return out;
  }

 private:
  absl::Mutex mu_;
  std::array<Kind, kOps> kinds_ ABSL_GUARDED_BY(mu_);
};

Metrics::Metrics(StateCache* cache, Options options)
    : cache_(cache),
      registry_(std::make_shared<prometheus::Registry>()),
      scrape_(std::make_shared<Scrape>(this)),
      stats_(std::make_unique<StatsSeries>()),
      op_seconds_(std::make_unique<OperationLatencies>()) {
  // The series read from GetStats at scrape time.
  auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(
        *registry_);
  };
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
  };
  StatsSeries& st = *stats_;
  st.checkpoints_kept =
      &counter(
           "statecache_checkpoints_kept_total",
           "Checkpoints the pool filed (fork checkpoints and published midstep "
           "ones). The capacity reading: evicted tracking kept minus capacity "
           "means every checkpoint but the resident set was destroyed to make "
           "room, so more slots buy hit rate directly.")
           ->Add({});
  st.checkpoints_dropped =
      &counter("statecache_checkpoints_dropped_total",
               "Checkpoints not kept because no slot was free at that moment "
               "(every slot live, pinned or reserved): a checkpoint or "
               "snapshot that found none, a reserve that stopped short. "
               "Small pools under load drop many.")
           ->Add({});
  st.checkpoints_evicted =
      &counter("statecache_checkpoints_evicted_total",
               "Checkpoints spent on an allocation (or on shrinking). When its "
               "rate tracks the rate of kept minus capacity the pool is "
               "thrashing: too small for how long a checkpoint has to last.")
           ->Add({});
  st.checkpoints_orphaned =
      &counter("statecache_checkpoints_orphaned_total",
               "Checkpoints dropped because their prefix left the KV index "
               "first: nothing could ever resume from them. Rising orphans "
               "mean the KV pool, not this one, is too small.")
           ->Add({});
  st.checkpoints_demoted =
      &counter("statecache_checkpoints_demoted_total",
               "Checkpoints the pool spent that the host tier took instead of "
               "losing them (--host_tier_bytes).")
           ->Add({});
  st.tier_evicted =
      &counter("statecache_host_tier_evicted_total",
               "Host tier entries spent to make room for newer ones: when its "
               "rate tracks demotions, the tier is too small for how long a "
               "prefix has to last.")
           ->Add({});
  auto* tier_failures = counter(
      "statecache_host_tier_copy_failures_total",
      "Images the state memory failed to copy: a failed demotion drops the "
      "checkpoint, a failed promotion admits as a miss. Any is a device "
      "fault.");
  st.tier_demotions_failed = &tier_failures->Add({{"direction", "demotion"}});
  st.tier_promotions_failed = &tier_failures->Add({{"direction", "promotion"}});
  auto* tier_bytes = gauge(
      "statecache_host_tier_bytes",
      "The host tier's room (capacity) and the images it holds (held), in "
      "bytes; 0 while it is off.");
  st.tier_capacity_bytes = &tier_bytes->Add({{"state", "capacity"}});
  st.tier_held_bytes = &tier_bytes->Add({{"state", "held"}});
  st.tier_entries = &gauge("statecache_host_tier_entries",
                           "Checkpoint images the host tier holds.")
                         ->Add({});
  auto* outcome =
      gauge("statecache_warm_restart_info",
            "1 for how this start went with --state_dir: off, cold (no index "
            "yet), restored, mismatch (the index was made under another "
            "identity, transfer or layout: not read) or unreadable (a torn or "
            "corrupt index, or its bytes gone); the log says why.");
  for (size_t i = 0; i < kRestartOutcomes.size(); ++i) {
    st.restart_outcome[i] = &outcome->Add({{"outcome", kRestartOutcomes[i]}});
  }
  auto* fates = gauge(
      "statecache_warm_restart_checkpoints",
      "What this start's warm restart did with the checkpoints it found: "
      "restored (device), restored_tier, and dropped: bad_checksum (bytes "
      "that changed since they were published: never served), unreadable "
      "(their region or file gone), no_room (past the pool's or the tier's "
      "size).");
  st.restored = &fates->Add({{"fate", "restored"}});
  st.restored_tier = &fates->Add({{"fate", "restored_tier"}});
  st.restore_bad_checksum = &fates->Add({{"fate", "bad_checksum"}});
  st.restore_unreadable = &fates->Add({{"fate", "unreadable"}});
  st.restore_no_room = &fates->Add({{"fate", "no_room"}});
  st.restore_seconds =
      &gauge("statecache_warm_restart_seconds",
             "How long this start took to verify and bring back the "
             "checkpoints of --state_dir.")
           ->Add({});
  st.state_saves = &counter("statecache_state_dir_saves_total",
                            "Checkpoint index writes to --state_dir.")
                        ->Add({});
  st.state_save_failures =
      &counter("statecache_state_dir_save_failures_total",
               "Checkpoint index writes that failed (the log says why): a "
               "restart would come back with the last index written.")
           ->Add({});
  st.state_saved_checkpoints =
      &gauge("statecache_state_dir_saved_checkpoints",
             "Checkpoints (device and tier) the last index written names.")
           ->Add({});
  st.state_last_save =
      &gauge("statecache_state_dir_last_save_timestamp_seconds",
             "When the last index was written (Unix time); a crash loses "
             "what was published since.")
           ->Add({});
  auto* slots = gauge(
      "statecache_slots",
      "Slots by state: used (held by live requests, pins and reservations), "
      "held (free but carrying a checkpoint), vacant (free and empty). vacant "
      "at 0 is not a shortage: all held, none vacant is the pool working.");
  st.slots_used = &slots->Add({{"state", "used"}});
  st.slots_held = &slots->Add({{"state", "held"}});
  st.slots_vacant = &slots->Add({{"state", "vacant"}});
  st.slots_capacity =
      &gauge("statecache_slots_capacity",
             "Slots in the pool (num_slots); moves with resizes, and while a "
             "shrink is giving slots up.")
           ->Add({});
  st.slots_quarantined =
      &gauge("statecache_slots_quarantined",
             "Used slots fenced now: held by requests of sessions whose lease "
             "lapsed or that were evicted, until --quarantine passes. Stuck "
             "above 0 with no lapses is a leak.")
           ->Add({});
  st.indexed_checkpoints =
      &gauge("statecache_indexed_checkpoints",
             "Checkpoints currently filed under a block hash.")
           ->Add({});
  auto* resumes = counter(
      "statecache_resumes_total",
      "Admissions with a KV-side prefix hit, by what the state side did: fork "
      "(resumed from a checkpoint into a fresh slot), adopt (resumed in the "
      "checkpoint's own slot: the pool was short), tier (resumed from the "
      "host tier: the checkpoint had left the device), miss (no usable "
      "checkpoint: recomputed from scratch).");
  st.resumes_fork = &resumes->Add({{"outcome", "fork"}});
  st.resumes_adopt = &resumes->Add({{"outcome", "adopt"}});
  st.resumes_tier = &resumes->Add({{"outcome", "tier"}});
  st.resumes_miss = &resumes->Add({{"outcome", "miss"}});
  st.resume_blocks_wanted =
      &counter("statecache_resume_blocks_wanted_total",
               "Prefix blocks admissions could have resumed (their KV hit). "
               "The hit ratio is rate(resumed) / rate(wanted).")
           ->Add({});
  st.resume_blocks_resumed =
      &counter("statecache_resume_blocks_resumed_total",
               "Prefix blocks admissions actually resumed from a checkpoint.")
           ->Add({});
  st.sessions =
      &gauge("statecache_sessions", "Attached scheduler sessions.")->Add({});
  st.requests =
      &gauge("statecache_requests", "Requests admitted and not yet released.")
           ->Add({});
  st.lease_expiries =
      &counter("statecache_lease_expiries_total",
               "Sessions whose lease lapsed (a scheduler crashed or lost its "
               "connection); their requests were released.")
           ->Add({});
  st.session_evictions =
      &counter("statecache_session_evictions_total",
               "Sessions ended by an operator (EvictSession).")
           ->Add({});
  st.draining = &gauge("statecache_draining",
                       "1 while the daemon is draining (not admitting).")
                     ->Add({});
  // Fixed for the process's life: set once here.
  gauge("statecache_build_info", "Always 1; labels say what is running.")
      ->Add({{"backend", options.backend}, {"version", options.version}})
      .Set(1.0);
  gauge("statecache_start_time_seconds",
        "When the daemon started, in seconds since the Unix epoch.")
      ->Add({})
      .Set(absl::ToDoubleSeconds(options.start_time - absl::UnixEpoch()));

  // The series recorded at the edges.
  auto& rpc_seconds =
      prometheus::BuildHistogram()
          .Name("statecache_rpc_duration_seconds")
          .Help(
              "Time to serve one RPC (one message for StepStream), by method, "
              "in the daemon. Compare Step with Ping: Ping is the transport "
              "alone.")
          .Register(*registry_);
  auto& rpc_refusals =
      prometheus::BuildCounter()
          .Name("statecache_rpc_refusals_total")
          .Help(
              "RPCs refused as a whole, by method and status code (e.g. "
              "NOT_FOUND: a session unknown or expired).")
          .Register(*registry_);
  for (int m = 0; m < static_cast<int>(RpcMethod::kCount); ++m) {
    const char* name = RpcMethodName(static_cast<RpcMethod>(m));
    rpc_seconds_[m] = &rpc_seconds.Add({{"method", name}}, LatencyBuckets());
    for (absl::StatusCode code : kRefusalCodes) {
      rpc_refusals_[m][static_cast<int>(code)] =
          &rpc_refusals.Add({{"method", name}, {"code", CodeName(code)}});
    }
  }
  auto& op_seconds =
      prometheus::BuildHistogram()
          .Name("statecache_step_operation_duration_seconds")
          .Help(
              "Time one Step operation spends in the daemon's core, by "
              "operation: a random sample of the operations, about one in "
              "--operation_timing_interval (statecache_step_operations_total "
              "counts them all).")
          .Register(*registry_);
  auto& op_counts =
      prometheus::BuildCounter()
          .Name("statecache_step_operations_total")
          .Help("Step operations run, refused ones included, by operation.")
          .Register(*registry_);
  auto& op_refusals =
      prometheus::BuildCounter()
          .Name("statecache_step_operation_refusals_total")
          .Help(
              "Step operations refused, by operation and status code. "
              "op=admit code=RESOURCE_EXHAUSTED counts admissions turned "
              "away for lack of free slots.")
          .Register(*registry_);
  for (int k = 1; k < kOps; ++k) {
    const char* name = OperationName(k);
    if (name == nullptr) continue;
    op_histograms_[k] = &op_seconds.Add({{"op", name}}, LatencyBuckets());
    op_counts_[k] = &op_counts.Add({{"op", name}});
    for (absl::StatusCode code : kRefusalCodes) {
      op_refusals_[k][static_cast<int>(code)] =
          &op_refusals.Add({{"op", name}, {"code", CodeName(code)}});
    }
  }
  auto& resizes = prometheus::BuildCounter()
                      .Name("statecache_resizes_total")
                      .Help(
                          "Pool size changes, by direction, counted when "
                          "they finish: a grow at once, a shrink once it "
                          "reached its target (or its deadline, having "
                          "given some slots up). Read with "
                          "statecache_slots_capacity.")
                      .Register(*registry_);
  resizes_grow_ = &resizes.Add({{"direction", "grow"}});
  resizes_shrink_ = &resizes.Add({{"direction", "shrink"}});
  auto& copy_bytes = prometheus::BuildCounter()
                         .Name("statecache_copy_bytes_total")
                         .Help(
                             "Bytes of slot content the daemon copied, by "
                             "reason (relocation when shrinking, copy "
                             "between a request's slots, snapshot "
                             "checkpoints, demotion into and promotion "
                             "out of the host tier).")
                         .Register(*registry_);
  auto& copy_seconds = prometheus::BuildCounter()
                           .Name("statecache_copy_seconds_total")
                           .Help(
                               "Time spent copying slot content, by reason; "
                               "bytes over seconds is the copy throughput.")
                           .Register(*registry_);
  for (int r = 0; r < static_cast<int>(CopyReason::kCount); ++r) {
    const char* name = CopyReasonName(static_cast<CopyReason>(r));
    copy_bytes_[r] = &copy_bytes.Add({{"reason", name}});
    copy_seconds_[r] = &copy_seconds.Add({{"reason", name}});
  }
  state_bytes_ = &prometheus::BuildGauge()
                      .Name("statecache_state_bytes")
                      .Help("Bytes of state memory committed for the pool.")
                      .Register(*registry_)
                      .Add({});
}

// HTTP workers of the exporter, and how long one request may take to
// arrive and be answered.
constexpr int kScrapeWorkers = 4;
constexpr absl::Duration kScrapeTimeout = absl::Seconds(5);

// The exposer first: no scrape may run while the rest goes.
Metrics::~Metrics() { exposer_.reset(); }

absl::Status Metrics::Serve(const std::string& address) {
  try {
    // Several workers and a deadline per request, so an idle or slow
    // scraper (a half-sent request, a stalled reader) holds up one worker
    // for a bounded time rather than every scrape.
    exposer_ = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", address, "num_threads",
        std::to_string(kScrapeWorkers), "request_timeout_ms",
        std::to_string(absl::ToInt64Milliseconds(kScrapeTimeout))});
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", address, ": ", e.what()));
  }
  // One collectable: the values refreshed, then the registry serialised.
  exposer_->RegisterCollectable(scrape_);
  return absl::OkStatus();
}

std::vector<int> Metrics::ListeningPorts() const {
  return exposer_ ? exposer_->GetListeningPorts() : std::vector<int>{};
}

std::string Metrics::Render() const {
  return prometheus::TextSerializer().Serialize(scrape_->Collect());
}

void Metrics::Refresh() const {
  v1::GetStatsResponse s;
  absl::MutexLock lock(&refresh_mu_);
  cache_->GetStats(&s);
  StatsSeries& st = *stats_;
  CatchUp(st.checkpoints_kept, s.checkpoints_kept());
  CatchUp(st.checkpoints_dropped, s.checkpoints_dropped());
  CatchUp(st.checkpoints_evicted, s.checkpoints_evicted());
  CatchUp(st.checkpoints_orphaned, s.checkpoints_orphaned());
  st.slots_used->Set(static_cast<double>(s.slots_used()));
  st.slots_held->Set(static_cast<double>(s.slots_held()));
  st.slots_vacant->Set(static_cast<double>(s.slots_vacant()));
  st.slots_capacity->Set(static_cast<double>(s.slots_total()));
  st.slots_quarantined->Set(static_cast<double>(s.slots_quarantined()));
  st.indexed_checkpoints->Set(static_cast<double>(s.indexed_hashes()));
  CatchUp(st.resumes_fork, s.resumes_fork());
  CatchUp(st.resumes_adopt, s.resumes_adopt());
  CatchUp(st.resumes_miss, s.resumes_miss());
  CatchUp(st.resume_blocks_wanted, s.resume_blocks_wanted());
  CatchUp(st.resume_blocks_resumed, s.resume_blocks_resumed());
  st.sessions->Set(static_cast<double>(s.sessions()));
  st.requests->Set(static_cast<double>(s.requests()));
  CatchUp(st.lease_expiries, s.lease_expiries());
  CatchUp(st.session_evictions, s.sessions_evicted());
  st.draining->Set(s.draining() ? 1.0 : 0.0);
  CatchUp(st.resumes_tier, s.resumes_tier());
  CatchUp(st.checkpoints_demoted, s.host_tier_demotions());
  CatchUp(st.tier_evicted, s.host_tier_evictions());
  CatchUp(st.tier_demotions_failed, s.host_tier_demotions_failed());
  CatchUp(st.tier_promotions_failed, s.host_tier_promotions_failed());
  st.tier_capacity_bytes->Set(
      static_cast<double>(s.host_tier_capacity_bytes()));
  st.tier_held_bytes->Set(static_cast<double>(s.host_tier_bytes()));
  st.tier_entries->Set(static_cast<double>(s.host_tier_entries()));
  const v1::WarmRestartStats& w = s.warm_restart();
  for (size_t i = 0; i < kRestartOutcomes.size(); ++i) {
    st.restart_outcome[i]->Set(w.outcome() == kRestartOutcomes[i] ? 1 : 0);
  }
  st.restored->Set(static_cast<double>(w.restored_checkpoints()));
  st.restored_tier->Set(static_cast<double>(w.restored_tier_entries()));
  st.restore_bad_checksum->Set(static_cast<double>(w.dropped_bad_checksum()));
  st.restore_unreadable->Set(static_cast<double>(w.dropped_unreadable()));
  st.restore_no_room->Set(static_cast<double>(w.dropped_no_room()));
  st.restore_seconds->Set(w.restore_seconds());
  CatchUp(st.state_saves, w.saves());
  CatchUp(st.state_save_failures, w.save_failures());
  st.state_saved_checkpoints->Set(static_cast<double>(w.saved_checkpoints()));
  st.state_last_save->Set(w.last_save_unix_seconds());
  // The operations' latencies since the last scrape, one ObserveMultiple
  // per kind that ran (after GetStats: the core's lock is not held here).
  const std::array<OperationLatencies::Kind, kOps> taken = op_seconds_->Take();
  std::vector<double> increments(OperationLatencies::kBuckets);
  for (int k = 1; k < kOps; ++k) {
    if (op_histograms_[k] == nullptr) continue;
    uint64_t n = 0;
    for (size_t b = 0; b < OperationLatencies::kBuckets; ++b) {
      increments[b] = static_cast<double>(taken[k].counts[b]);
      n += taken[k].counts[b];
    }
    if (n > 0) op_histograms_[k]->ObserveMultiple(increments, taken[k].sum);
    if (taken[k].operations > 0) {
      op_counts_[k]->Increment(static_cast<double>(taken[k].operations));
    }
  }
}

void Metrics::OnRpc(RpcMethod method, absl::StatusCode code, double seconds) {
  const int m = static_cast<int>(method);
  if (m < 0 || m >= static_cast<int>(RpcMethod::kCount)) return;
  rpc_seconds_[m]->Observe(seconds);
  const int c = static_cast<int>(code);
  if (code != absl::StatusCode::kOk && c >= 0 && c < kCodes &&
      rpc_refusals_[m][c] != nullptr) {
    rpc_refusals_[m][c]->Increment();
  }
}

void Metrics::OnOperations(const StepOperations& step) {
  op_seconds_->Add(step);
  for (const OperationSample& s : step.refused) {
    const int k = static_cast<int>(s.kind);
    const int c = static_cast<int>(s.code);
    if (k > 0 && k < kOps && c >= 0 && c < kCodes &&
        op_refusals_[k][c] != nullptr) {
      op_refusals_[k][c]->Increment();
    }
  }
}

void Metrics::OnResize(int64_t from_slots, int64_t to_slots) {
  if (to_slots > from_slots) {
    resizes_grow_->Increment();
  } else if (to_slots < from_slots) {
    resizes_shrink_->Increment();
  }
}

void Metrics::OnCopy(CopyReason reason, int64_t bytes, double seconds) {
  const int r = static_cast<int>(reason);
  if (r < 0 || r >= static_cast<int>(CopyReason::kCount)) return;
  copy_bytes_[r]->Increment(static_cast<double>(bytes));
  copy_seconds_[r]->Increment(seconds);
}

void Metrics::OnStateBytes(int64_t bytes) {
  state_bytes_->Set(static_cast<double>(bytes));
}

}  // namespace statecache

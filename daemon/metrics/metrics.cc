#include "daemon/metrics/metrics.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace statecache {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

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

const char* ReasonName(CopyReason reason) {
  switch (reason) {
    case CopyReason::kRelocation:
      return "relocation";
    case CopyReason::kCopy:
      return "copy";
    case CopyReason::kSnapshot:
      return "snapshot";
    case CopyReason::kCount:
      break;
  }
  return "unknown";
}

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

ClientMetric Value(MetricType type, double v,
                   std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  if (type == MetricType::Counter) {
    m.counter.value = v;
  } else {
    m.gauge.value = v;
  }
  return m;
}

}  // namespace

// Reads StateCache's own counters at scrape time.
class Metrics::StatsCollector final : public prometheus::Collectable {
 public:
  StatsCollector(StateCache* cache, Options options)
      : cache_(cache), options_(std::move(options)) {}

  std::vector<MetricFamily> Collect() const override {
    v1::GetStatsResponse s;
    cache_->GetStats(&s);
    std::vector<MetricFamily> out;
    auto one = [&](const char* name, const char* help, MetricType type,
                   double v) {
      MetricFamily f = Family(name, help, type);
      f.metric.push_back(Value(type, v));
      out.push_back(std::move(f));
    };
    const MetricType C = MetricType::Counter;
    const MetricType G = MetricType::Gauge;
    one("statecache_checkpoints_kept_total",
        "Checkpoints the pool filed (fork checkpoints and published midstep "
        "ones). The capacity reading: evicted tracking kept minus capacity "
        "means every checkpoint but the resident set was destroyed to make "
        "room, so more slots buy hit rate directly.",
        C, static_cast<double>(s.checkpoints_kept()));
    one("statecache_checkpoints_dropped_total",
        "Checkpoints not kept because no slot was free at the moment (the pool "
        "overwrites rather than refuses, so this is rare; not the capacity "
        "signal).",
        C, static_cast<double>(s.checkpoints_dropped()));
    one("statecache_checkpoints_evicted_total",
        "Checkpoints spent on an allocation (or on shrinking). When its rate "
        "tracks the rate of kept minus capacity the pool is thrashing: too "
        "small for how long a checkpoint has to last.",
        C, static_cast<double>(s.checkpoints_evicted()));
    one("statecache_checkpoints_orphaned_total",
        "Checkpoints dropped because their prefix left the KV index first: "
        "nothing could ever resume from them. Rising orphans mean the KV pool, "
        "not this one, is too small.",
        C, static_cast<double>(s.checkpoints_orphaned()));
    {
      MetricFamily f = Family(
          "statecache_slots",
          "Slots by state: used (held by live requests, pins and "
          "reservations), held (free but carrying a checkpoint), vacant (free "
          "and empty). vacant at 0 is not a shortage: all held, none vacant is "
          "the pool working.",
          G);
      f.metric.push_back(
          Value(G, static_cast<double>(s.slots_used()), {{"state", "used"}}));
      f.metric.push_back(
          Value(G, static_cast<double>(s.slots_held()), {{"state", "held"}}));
      f.metric.push_back(Value(G, static_cast<double>(s.slots_vacant()),
                               {{"state", "vacant"}}));
      out.push_back(std::move(f));
    }
    one("statecache_slots_capacity",
        "Slots in the pool (num_slots); moves with resizes, and while a "
        "shrink is giving slots up.",
        G, static_cast<double>(s.slots_total()));
    one("statecache_indexed_checkpoints",
        "Checkpoints currently filed under a block hash.", G,
        static_cast<double>(s.indexed_hashes()));
    {
      MetricFamily f = Family(
          "statecache_resumes_total",
          "Admissions with a KV-side prefix hit, by what the state side did: "
          "fork (resumed from a checkpoint into a fresh slot), adopt (resumed "
          "in the checkpoint's own slot: the pool was short), miss (no usable "
          "checkpoint: recomputed from scratch).",
          C);
      f.metric.push_back(Value(C, static_cast<double>(s.resumes_fork()),
                               {{"outcome", "fork"}}));
      f.metric.push_back(Value(C, static_cast<double>(s.resumes_adopt()),
                               {{"outcome", "adopt"}}));
      f.metric.push_back(Value(C, static_cast<double>(s.resumes_miss()),
                               {{"outcome", "miss"}}));
      out.push_back(std::move(f));
    }
    one("statecache_resume_blocks_wanted_total",
        "Prefix blocks admissions could have resumed (their KV hit). The hit "
        "ratio is rate(resumed) / rate(wanted).",
        C, static_cast<double>(s.resume_blocks_wanted()));
    one("statecache_resume_blocks_resumed_total",
        "Prefix blocks admissions actually resumed from a checkpoint.", C,
        static_cast<double>(s.resume_blocks_resumed()));
    one("statecache_sessions", "Attached scheduler sessions.", G,
        static_cast<double>(s.sessions()));
    one("statecache_requests", "Requests admitted and not yet released.", G,
        static_cast<double>(s.requests()));
    one("statecache_lease_expiries_total",
        "Sessions whose lease lapsed (a scheduler crashed or lost its "
        "connection); their requests were released.",
        C, static_cast<double>(s.lease_expiries()));
    one("statecache_session_evictions_total",
        "Sessions ended by an operator (EvictSession).", C,
        static_cast<double>(s.sessions_evicted()));
    one("statecache_draining",
        "1 while the daemon is draining (not admitting).", G,
        s.draining() ? 1.0 : 0.0);
    {
      MetricFamily f = Family("statecache_build_info",
                              "Always 1; labels say what is running.", G);
      f.metric.push_back(Value(
          G, 1.0,
          {{"backend", options_.backend}, {"version", options_.version}}));
      out.push_back(std::move(f));
    }
    one("statecache_start_time_seconds",
        "When the daemon started, in seconds since the Unix epoch.", G,
        absl::ToDoubleSeconds(options_.start_time - absl::UnixEpoch()));
    return out;
  }

 private:
  StateCache* const cache_;
  const Options options_;
};

// The Step operations' latency histograms. A Step's samples are counted
// into plain arrays under one lock (per Step, not per operation), and the
// histogram family is made from them at scrape time. prometheus::Histogram
// would cost a lock and an atomic read-modify-write per bucket for every
// kind a Step used: with 17 buckets, a sixth of a 256-operation Step's time
// in the core.
class Metrics::OperationLatencies final : public prometheus::Collectable {
 public:
  void Add(absl::Span<const OperationSample> samples) {
    const prometheus::Histogram::BucketBoundaries& bounds = LatencyBuckets();
    absl::MutexLock lock(&mu_);
    for (const OperationSample& s : samples) {
      const int k = static_cast<int>(s.kind);
      if (k <= 0 || k >= kOps) continue;
      // The first bound >= the value (le semantics); past the last: +Inf.
      // Scanned from the bottom rather than bisected: nearly every operation
      // takes under the first bound (1 us), so this is one comparison, where
      // a bisection's four mispredict.
      size_t b = 0;
      while (b < bounds.size() && s.seconds > bounds[b]) ++b;
      Kind& kind = kinds_[k];
      ++kind.counts[b];
      kind.sum += s.seconds;
    }
  }

  std::vector<MetricFamily> Collect() const override {
    const prometheus::Histogram::BucketBoundaries& bounds = LatencyBuckets();
    MetricFamily f =
        Family("statecache_step_operation_duration_seconds",
               "Time one Step operation spends in the daemon's core, by "
               "operation.",
               MetricType::Histogram);
    absl::MutexLock lock(&mu_);
    for (int k = 1; k < kOps; ++k) {
      const char* name = OperationName(k);
      if (name == nullptr) continue;
      ClientMetric m;
      m.label = {{"op", name}};
      uint64_t cumulative = 0;
      for (size_t b = 0; b <= bounds.size(); ++b) {
        cumulative += kinds_[k].counts[b];
        m.histogram.bucket.push_back(
            {cumulative, b < bounds.size()
                             ? bounds[b]
                             : std::numeric_limits<double>::infinity()});
      }
      m.histogram.sample_count = cumulative;
      m.histogram.sample_sum = kinds_[k].sum;
      f.metric.push_back(std::move(m));
    }
    return {std::move(f)};
  }

 private:
  static constexpr size_t kBuckets = kLatencyBounds.size() + 1;  // + Inf
  struct Kind {
    std::array<uint64_t, kBuckets> counts{};
    double sum = 0;
  };
  mutable absl::Mutex mu_;
  std::array<Kind, kOps> kinds_ ABSL_GUARDED_BY(mu_);
};

Metrics::Metrics(StateCache* cache, Options options)
    : registry_(std::make_shared<prometheus::Registry>()),
      stats_(std::make_shared<StatsCollector>(cache, std::move(options))),
      op_seconds_(std::make_shared<OperationLatencies>()) {
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
                             "checkpoints).")
                         .Register(*registry_);
  auto& copy_seconds = prometheus::BuildCounter()
                           .Name("statecache_copy_seconds_total")
                           .Help(
                               "Time spent copying slot content, by reason; "
                               "bytes over seconds is the copy throughput.")
                           .Register(*registry_);
  for (int r = 0; r < static_cast<int>(CopyReason::kCount); ++r) {
    const char* name = ReasonName(static_cast<CopyReason>(r));
    copy_bytes_[r] = &copy_bytes.Add({{"reason", name}});
    copy_seconds_[r] = &copy_seconds.Add({{"reason", name}});
  }
  state_bytes_ = &prometheus::BuildGauge()
                      .Name("statecache_state_bytes")
                      .Help("Bytes of state memory committed for the pool.")
                      .Register(*registry_)
                      .Add({});
}

Metrics::~Metrics() = default;

absl::Status Metrics::Serve(const std::string& address) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", address, ": ", e.what()));
  }
  exposer_->RegisterCollectable(registry_);
  exposer_->RegisterCollectable(stats_);
  exposer_->RegisterCollectable(op_seconds_);
  return absl::OkStatus();
}

std::vector<int> Metrics::ListeningPorts() const {
  return exposer_ ? exposer_->GetListeningPorts() : std::vector<int>{};
}

std::string Metrics::Render() const {
  std::vector<MetricFamily> families = stats_->Collect();
  for (MetricFamily& f : registry_->Collect()) families.push_back(std::move(f));
  for (MetricFamily& f : op_seconds_->Collect()) {
    families.push_back(std::move(f));
  }
  return prometheus::TextSerializer().Serialize(families);
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

void Metrics::OnOperations(absl::Span<const OperationSample> samples) {
  op_seconds_->Add(samples);
  for (const OperationSample& s : samples) {
    const int k = static_cast<int>(s.kind);
    const int c = static_cast<int>(s.code);
    if (s.code != absl::StatusCode::kOk && k > 0 && k < kOps && c >= 0 &&
        c < kCodes && op_refusals_[k][c] != nullptr) {
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

#include "daemon/metrics/metrics.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
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

// The operation kind's name as statecache.proto spells Operation's field
// (nullptr for a number that is no kind): the op label's values.
const char* OperationName(int kind) {
  const google::protobuf::FieldDescriptor* field =
      v1::Operation::descriptor()->FindFieldByNumber(kind);
  return field != nullptr && field->containing_oneof() != nullptr
             ? field->name().c_str()
             : nullptr;
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

namespace {

// A child fed from a GetStats field, built once in the constructor from the
// field's MetricExport option (statecache.proto): the field's path from
// GetStatsResponse (the message fields it is inside, then it), and its
// counter or gauge, or for a string field one gauge per value it may hold.
struct StatsChild {
  std::vector<const google::protobuf::FieldDescriptor*> path;
  prometheus::Counter* counter = nullptr;
  prometheus::Gauge* gauge = nullptr;
  std::vector<std::pair<std::string, prometheus::Gauge*>> by_value;
};

// The families of the stats fields, by name, as they are built.
struct StatsFamilies {
  absl::flat_hash_map<std::string, prometheus::Family<prometheus::Counter>*>
      counters;
  absl::flat_hash_map<std::string, prometheus::Family<prometheus::Gauge>*>
      gauges;
};

prometheus::Labels LabelsOf(const v1::MetricExport& metric) {
  if (metric.label_name().empty()) return {};
  return {{metric.label_name(), metric.label_value()}};
}

// The family `metric` names, built (with its help) the first time.
template <typename Builder, typename Metric>
prometheus::Family<Metric>& FamilyFor(
    absl::flat_hash_map<std::string, prometheus::Family<Metric>*>& built,
    Builder builder, const v1::MetricExport& metric,
    prometheus::Registry& registry) {
  auto [it, added] = built.try_emplace(metric.family());
  if (added) {
    it->second =
        &builder.Name(metric.family()).Help(metric.help()).Register(registry);
  }
  return *it->second;
}

// Adds a child for each exported field of `message` to `children`,
// recursing into message fields that name no family of their own. A
// family is built at its first field (which carries its help).
void BuildStatsChildren(
    const google::protobuf::Descriptor& message,
    std::vector<const google::protobuf::FieldDescriptor*>& path,
    prometheus::Registry& registry, StatsFamilies& families,
    std::vector<StatsChild>& children) {
  for (int i = 0; i < message.field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = message.field(i);
    const v1::MetricExport& metric = field->options().GetExtension(v1::metric);
    if (!metric.not_exported().empty()) continue;
    path.push_back(field);
    if (metric.family().empty()) {
      // Only a message can name no family (stats_export_test holds every
      // scalar to one or to not_exported).
      if (field->message_type() != nullptr) {
        BuildStatsChildren(*field->message_type(), path, registry, families,
                           children);
      }
      path.pop_back();
      continue;
    }
    StatsChild child;
    child.path = path;
    path.pop_back();
    if (metric.kind() == v1::MetricExport::COUNTER) {
      child.counter = &FamilyFor(families.counters, prometheus::BuildCounter(),
                                 metric, registry)
                           .Add(LabelsOf(metric));
    } else {
      prometheus::Family<prometheus::Gauge>& family = FamilyFor(
          families.gauges, prometheus::BuildGauge(), metric, registry);
      for (const std::string& value : metric.label_values()) {
        child.by_value.emplace_back(
            value, &family.Add({{metric.label_name(), value}}));
      }
      if (metric.label_values_size() == 0) {
        child.gauge = &family.Add(LabelsOf(metric));
      }
    }
    children.push_back(std::move(child));
  }
}

// The message that holds the field `child.path` names.
const google::protobuf::Message& Holder(const google::protobuf::Message& stats,
                                        const StatsChild& child) {
  const google::protobuf::Message* message = &stats;
  for (size_t i = 0; i + 1 < child.path.size(); ++i) {
    message = &message->GetReflection()->GetMessage(*message, child.path[i]);
  }
  return *message;
}

// The value of the scalar field `child.path` names, as a double (bools as
// 0 or 1); 0 for a string.
double StatsValue(const google::protobuf::Message& stats,
                  const StatsChild& child) {
  const google::protobuf::Message* message = &Holder(stats, child);
  const google::protobuf::FieldDescriptor* field = child.path.back();
  const google::protobuf::Reflection& r = *message->GetReflection();
  using F = google::protobuf::FieldDescriptor;
  switch (field->cpp_type()) {
    case F::CPPTYPE_INT32:
      return r.GetInt32(*message, field);
    case F::CPPTYPE_INT64:
      return static_cast<double>(r.GetInt64(*message, field));
    case F::CPPTYPE_UINT32:
      return r.GetUInt32(*message, field);
    case F::CPPTYPE_UINT64:
      return static_cast<double>(r.GetUInt64(*message, field));
    case F::CPPTYPE_DOUBLE:
      return r.GetDouble(*message, field);
    case F::CPPTYPE_FLOAT:
      return r.GetFloat(*message, field);
    case F::CPPTYPE_BOOL:
      return r.GetBool(*message, field) ? 1.0 : 0.0;
    default:
      return 0;
  }
}

// The string field `child.path` names.
std::string StatsString(const google::protobuf::Message& stats,
                        const StatsChild& child) {
  const google::protobuf::Message& message = Holder(stats, child);
  return message.GetReflection()->GetString(message, child.path.back());
}

}  // namespace

struct Metrics::StatsSeries {
  std::vector<StatsChild> children;
};

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
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
  };
  // The series read from GetStats at scrape time: the fields' families, as
  // statecache.proto's MetricExport options say.
  std::vector<const google::protobuf::FieldDescriptor*> path;
  StatsFamilies stats_families;
  BuildStatsChildren(*v1::GetStatsResponse::descriptor(), path, *registry_,
                     stats_families, stats_->children);
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
  for (const StatsChild& child : stats_->children) {
    if (child.counter != nullptr) {
      CatchUp(child.counter, static_cast<int64_t>(StatsValue(s, child)));
    } else if (child.gauge != nullptr) {
      child.gauge->Set(StatsValue(s, child));
    } else {
      const std::string value = StatsString(s, child);
      for (const auto& [label, gauge] : child.by_value) {
        gauge->Set(label == value ? 1.0 : 0.0);
      }
    }
  }
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

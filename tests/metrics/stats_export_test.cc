// The GetStats fields drive the metrics: statecache.proto gives each field
// of GetStatsResponse (and of the messages inside it) a MetricExport option,
// a family or the reason it has none, and Metrics builds exactly those
// families at start. A field added to the proto without one fails here;
// so does a family the daemon stops exporting.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/metrics/metrics.h"
#include "daemon/service/operation_timing.h"
#include "daemon/service/state_cache.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "proto/statecache/v1/statecache.pb.h"

namespace statecache {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

struct Declared {
  v1::MetricExport::Kind kind = v1::MetricExport::KIND_UNSPECIFIED;
  int helps = 0;
  std::set<std::map<std::string, std::string>> children;
};

// Every field under `message`, each checked to say how it is exported;
// the families they declare, into `families`.
void Walk(const Descriptor& message, std::map<std::string, Declared>& families,
          int& exported) {
  for (int i = 0; i < message.field_count(); ++i) {
    const FieldDescriptor* field = message.field(i);
    SCOPED_TRACE(field->full_name());
    const v1::MetricExport& m = field->options().GetExtension(v1::metric);
    if (!m.not_exported().empty()) {
      EXPECT_TRUE(m.family().empty()) << "both a family and not_exported";
      continue;
    }
    if (m.family().empty()) {
      ASSERT_NE(field->message_type(), nullptr)
          << "a field with neither a (metric) family nor not_exported";
      Walk(*field->message_type(), families, exported);
      continue;
    }
    ++exported;
    EXPECT_FALSE(field->is_repeated());
    EXPECT_EQ(field->message_type(), nullptr);
    EXPECT_NE(m.kind(), v1::MetricExport::KIND_UNSPECIFIED);
    Declared& family = families[m.family()];
    if (family.kind != v1::MetricExport::KIND_UNSPECIFIED) {
      EXPECT_EQ(family.kind, m.kind()) << m.family() << ": kinds differ";
    }
    family.kind = m.kind();
    family.helps += m.help().empty() ? 0 : 1;
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      EXPECT_GT(m.label_values_size(), 0) << "a string needs label_values";
      for (const std::string& value : m.label_values()) {
        const std::map<std::string, std::string> labels = {
            {m.label_name(), value}};
        EXPECT_TRUE(family.children.insert(labels).second);
      }
      continue;
    }
    EXPECT_EQ(m.label_values_size(), 0);
    std::map<std::string, std::string> labels;
    if (!m.label_name().empty()) labels[m.label_name()] = m.label_value();
    EXPECT_TRUE(family.children.insert(labels).second)
        << m.family() << ": two fields feed one child";
  }
}

TEST(StatsExport, EveryStatsFieldSaysHowItIsExported) {
  std::map<std::string, Declared> families;
  int exported = 0;
  Walk(*v1::GetStatsResponse::descriptor(), families, exported);
  EXPECT_GE(exported, 30);
  for (const auto& [name, family] : families) {
    EXPECT_EQ(family.helps, 1) << name << ": its help, given once";
    const bool counter = family.kind == v1::MetricExport::COUNTER;
    EXPECT_EQ(name.size() > 6 && name.substr(name.size() - 6) == "_total",
              counter)
        << name << ": counters, and only they, end in _total";
  }
}

TEST(StatsExport, MetricsBuildsEveryDeclaredFamilyAndChild) {
  std::map<std::string, Declared> declared;
  int exported = 0;
  Walk(*v1::GetStatsResponse::descriptor(), declared, exported);

  StateCacheOptions options;
  options.identity.set_model_id("m");
  options.identity.set_hash_block_size(64);
  options.num_slots = 8;
  options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
  std::unique_ptr<StateCache> cache = *StateCache::Create(std::move(options));
  Metrics metrics(cache.get(), Metrics::Options{.version = "test"});
  std::map<std::string, prometheus::MetricFamily> built;
  for (prometheus::MetricFamily& f : metrics.registry_for_testing().Collect()) {
    built[f.name] = std::move(f);
  }
  for (const auto& [name, family] : declared) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(built.contains(name));
    const prometheus::MetricFamily& f = built[name];
    EXPECT_EQ(f.type, family.kind == v1::MetricExport::COUNTER
                          ? prometheus::MetricType::Counter
                          : prometheus::MetricType::Gauge);
    EXPECT_FALSE(f.help.empty());
    std::set<std::map<std::string, std::string>> children;
    for (const prometheus::ClientMetric& m : f.metric) {
      std::map<std::string, std::string> labels;
      for (const prometheus::ClientMetric::Label& l : m.label) {
        labels[l.name] = l.value;
      }
      children.insert(labels);
    }
    EXPECT_EQ(children, family.children);
  }
}

// The operation kinds are Operation's oneof: every kind's number fits the
// tables sized by kOperationKinds, and each gets its own op series.
TEST(StatsExport, EveryOperationKindHasItsSeries) {
  const google::protobuf::OneofDescriptor* kinds =
      v1::Operation::descriptor()->FindOneofByName("kind");
  ASSERT_NE(kinds, nullptr);
  std::set<std::string> names;
  for (int i = 0; i < kinds->field_count(); ++i) {
    EXPECT_LT(kinds->field(i)->number(), kOperationKinds)
        << kinds->field(i)->name();
    names.insert(kinds->field(i)->name());
  }
  StateCacheOptions options;
  options.identity.set_model_id("m");
  options.identity.set_hash_block_size(64);
  options.num_slots = 8;
  options.transfer = *StateTransfer::Create(TransferKind::kFork, 1, true);
  options.operation_timing_interval = 1;
  std::unique_ptr<StateCache> cache = *StateCache::Create(std::move(options));
  Metrics metrics(cache.get(), Metrics::Options{.version = "test"});
  for (prometheus::MetricFamily& f : metrics.registry_for_testing().Collect()) {
    if (f.name != "statecache_step_operations_total") continue;
    std::set<std::string> ops;
    for (const prometheus::ClientMetric& m : f.metric) {
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name == "op") ops.insert(l.value);
      }
    }
    EXPECT_EQ(ops, names);
    return;
  }
  FAIL() << "no statecache_step_operations_total";
}

}  // namespace
}  // namespace statecache

#include "client/ctl/stats_view.h"

#include <cstdint>
#include <type_traits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace statecache::ctl {
namespace {

nlohmann::json ValueJson(const StatsField& field) {
  return std::visit([](const auto& v) { return nlohmann::json(v); },
                    field.value);
}

}  // namespace

nlohmann::json StatsJson(const DaemonStats& stats) {
  nlohmann::json out = nlohmann::json::object();
  for (const StatsField& field : StatsFields(stats)) {
    nlohmann::json* at = &out;
    for (absl::string_view part : absl::StrSplit(
             absl::string_view(field.name.data(), field.name.size()), '.')) {
      at = &(*at)[std::string(part)];
    }
    *at = ValueJson(field);
  }
  return out;
}

std::string FieldText(const StatsField& field) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "yes" : "no";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return v.empty() ? "-" : v;
        } else {
          return absl::StrCat(v);
        }
      },
      field.value);
}

std::vector<CounterRate> CounterRates(const DaemonStats& now,
                                      const std::optional<DaemonStats>& prev,
                                      double elapsed_seconds) {
  const std::vector<StatsField> fields = StatsFields(now);
  std::vector<StatsField> before;
  if (prev.has_value() && elapsed_seconds > 0) before = StatsFields(*prev);
  std::vector<CounterRate> rates;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].kind != StatsFieldKind::kCounter) continue;
    CounterRate rate{.name = fields[i].name,
                     .total = NumericValue(fields[i]),
                     .per_second = {}};
    // Both readings come from the same generated StatsFields: same order.
    if (!before.empty()) {
      rate.per_second =
          (rate.total - NumericValue(before[i])) / elapsed_seconds;
    }
    rates.push_back(rate);
  }
  return rates;
}

StatsFieldSet::StatsFieldSet(const DaemonStats& stats)
    : fields_(StatsFields(stats)), shown_(fields_.size(), false) {}

void StatsFieldSet::Shown(std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) {
    bool found = false;
    for (size_t i = 0; i < fields_.size(); ++i) {
      const bool match = name.ends_with('.') ? fields_[i].name.starts_with(name)
                                             : fields_[i].name == name;
      if (match) shown_[i] = found = true;
    }
    // A name that matches nothing is a typo in this program: say so where
    // the tests see it rather than print a field twice.
    if (!found) unknown_.emplace_back(name);
  }
}

std::vector<StatsField> StatsFieldSet::Unshown() const {
  std::vector<StatsField> out;
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (!shown_[i]) out.push_back(fields_[i]);
  }
  for (const std::string& name : unknown_) {
    out.push_back({.name = "unknown field (a statecachectl bug)",
                   .kind = StatsFieldKind::kOther,
                   .value = name});
  }
  return out;
}

}  // namespace statecache::ctl

// GetStats' answer seen field by field, as the proto lists it: the JSON
// statecachectl prints, the counters' rates for stats --watch, and what the
// text tables did not print specially. Everything here walks StatsFields()
// (client/daemon_stats.h, written by the build from the proto), so a field
// added to GetStatsResponse reaches every view with no edit here.
//
// Thread-compatible.
#ifndef STATECACHE_CLIENT_CTL_STATS_VIEW_H_
#define STATECACHE_CLIENT_CTL_STATS_VIEW_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/statecache_client.h"
#include "nlohmann/json.hpp"

namespace statecache::ctl {

// Every field of `stats` as the proto's JSON mapping names it (field names
// kept; a nested message is a nested object), integers as JSON numbers.
nlohmann::json StatsJson(const DaemonStats& stats);

// A field's value as text ("12", "0.5", "yes", "fork").
std::string FieldText(const StatsField& field);

// Per-second rates of every counter between two readings of one daemon
// (same epoch), keyed by field path.
struct CounterRate {
  std::string_view name;
  double total = 0;
  // Absent without an earlier reading or elapsed time.
  std::optional<double> per_second;
};
std::vector<CounterRate> CounterRates(const DaemonStats& now,
                                      const std::optional<DaemonStats>& prev,
                                      double elapsed_seconds);

// The fields of one reading, for tables that print some fields their own
// way: each field a table shows is marked, and Unshown() returns the rest,
// which the command prints plainly, so that none goes missing.
class StatsFieldSet {
 public:
  explicit StatsFieldSet(const DaemonStats& stats);
  // Marks fields shown: each name is a field path ("slots_used") or a
  // nested message's prefix ending in '.' ("warm_restart.").
  void Shown(std::initializer_list<std::string_view> names);
  // The fields no Shown() call named, in the proto's order, then one entry
  // for each name Shown() was given that is no field (a typo here, shown
  // rather than hidden).
  std::vector<StatsField> Unshown() const;

 private:
  std::vector<StatsField> fields_;
  std::vector<bool> shown_;
  std::vector<std::string> unknown_;
};

}  // namespace statecache::ctl

#endif  // STATECACHE_CLIENT_CTL_STATS_VIEW_H_

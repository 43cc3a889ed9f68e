// statecachectl's formatting: durations, bytes, ratios and the stats'
// pieces, as text for people and as JSON.
//
// Thread-compatible (functions of their arguments).
#ifndef STATECACHE_CLIENT_CTL_FORMAT_H_
#define STATECACHE_CLIENT_CTL_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/statecache_client.h"
#include "nlohmann/json.hpp"

namespace statecache::ctl {

// A duration for people, to a tenth of a second: "3m12.5s".
std::string HumanDuration(absl::Duration d);

// For how long something took: "412us", "12ms", "1.5s".
std::string ElapsedText(absl::Duration d);

// Prints rows as columns padded to the widest cell. A column whose cells
// (below the header row, if any) are all numbers is right-aligned.
void PrintTable(const std::vector<std::vector<std::string>>& rows,
                absl::string_view indent = "", bool has_header = false);

// The transfer as text: "fork(1), readable midstep".
std::string TransferText(const TransferConfig& transfer);

// "85.0%", or "-" when there is nothing to divide by.
std::string Percent(int64_t part, int64_t whole);

// part / whole, or nullopt when there is nothing to divide by; as JSON,
// a number or null.
std::optional<double> Ratio(int64_t part, int64_t whole);
nlohmann::json OptionalJson(const std::optional<double>& v);

// "1.50 GiB": binary units, as memory is allocated.
std::string HumanBytes(uint64_t bytes);

// Whether the daemon has state memory (without it, it reports backend
// "none").
bool HasMemory(const DaemonStats& s);

// The state memory (backend, bytes committed, layout) as a line of text.
std::string MemoryText(const DaemonStats& s);

}  // namespace statecache::ctl

#endif  // STATECACHE_CLIENT_CTL_FORMAT_H_

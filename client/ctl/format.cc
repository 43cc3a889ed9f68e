#include "client/ctl/format.h"

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace statecache::ctl {

std::string HumanDuration(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(100)));
}

// For how long something took: "412us", "12ms", "1.5s".
std::string ElapsedText(absl::Duration d) {
  const absl::Duration unit = d < absl::Milliseconds(1) ? absl::Microseconds(1)
                              : d < absl::Seconds(1)    ? absl::Milliseconds(1)
                                                     : absl::Milliseconds(100);
  return absl::FormatDuration(absl::Trunc(d, unit));
}

// Prints rows as columns padded to the widest cell. A column whose cells
// (below the header row, if any) are all numbers is right-aligned.
void PrintTable(const std::vector<std::vector<std::string>>& rows,
                absl::string_view indent, bool has_header) {
  std::vector<size_t> widths;
  std::vector<bool> numeric;
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& row = rows[r];
    if (widths.size() < row.size()) {
      widths.resize(row.size(), 0);
      numeric.resize(row.size(), true);
    }
    for (size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
      double unused;
      absl::string_view cell = row[c];
      absl::ConsumeSuffix(&cell, "%");
      if (!(has_header && r == 0) && !absl::SimpleAtod(cell, &unused) &&
          cell != "-") {
        numeric[c] = false;
      }
    }
  }
  for (const auto& row : rows) {
    std::string line(indent);
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(widths[c] - row[c].size(), ' ');
      if (c > 0) line += "  ";
      if (numeric[c]) {
        absl::StrAppend(&line, pad, row[c]);
      } else if (c + 1 < row.size()) {
        absl::StrAppend(&line, row[c], pad);
      } else {
        line += row[c];  // no trailing blanks
      }
    }
    std::cout << line << "\n";
  }
}

std::string TransferText(const TransferConfig& transfer) {
  std::string text = transfer.kind;
  if (transfer.kind == "fork") {
    absl::StrAppend(&text, "(", transfer.fork_tokens, ")");
  }
  if (transfer.readable_midstep) text += ", readable midstep";
  return text;
}

// "85.0%", or "-" when there is nothing to divide by.
std::string Percent(int64_t part, int64_t whole) {
  if (whole <= 0) return "-";
  return absl::StrFormat(
      "%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::optional<double> Ratio(int64_t part, int64_t whole) {
  if (whole <= 0) return std::nullopt;
  return static_cast<double>(part) / static_cast<double>(whole);
}

nlohmann::json OptionalJson(const std::optional<double>& v) {
  return v.has_value() ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// "1.50 GiB": binary units, as memory is allocated.
std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B")
                   : absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

bool HasMemory(const DaemonStats& s) {
  return !s.backend.empty() && s.backend != "none";
}

std::string MemoryText(const DaemonStats& s) {
  if (!HasMemory(s)) return "none (slot decisions only: no state memory)";
  std::string text = absl::StrFormat("%s committed on %s",
                                     HumanBytes(s.state_bytes), s.backend);
  if (!s.layout_name.empty())
    absl::StrAppend(&text, ", layout ", s.layout_name);
  if (s.bytes_per_slot > 0) {
    absl::StrAppend(&text, ", ", HumanBytes(s.bytes_per_slot), " per slot");
  }
  // 2^30 is the pool's own limit: no --max_slots given.
  if (s.max_slots > 0 && s.max_slots < (int64_t{1} << 30)) {
    absl::StrAppend(&text, ", at most ", s.max_slots, " slots");
  }
  return text;
}

}  // namespace statecache::ctl

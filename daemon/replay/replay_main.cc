// statecache-replay: runs a pool trace (docs/trace_format.md) read on stdin
// through the C++ SlotPool and prints one normalised result line per input
// line on stdout, so its output can be compared byte for byte with the
// reference pool's (docs/pool_rules.md) trace runner.
//
//   statecache-replay [--timing] [--host_tier=N --tier_log=FILE]
//       < TRACE.jsonl > RESULTS.jsonl
//
// --timing also prints `calls=N ns=T` on stderr: the pool calls made and the
// nanoseconds spent inside them alone (parsing, printing and dump excluded).
// --host_tier=N runs a host tier of N entries beside the pool, as the daemon
// would (the results are the same: the pool's decisions do not depend on
// it), and writes what the tier did to --tier_log (replay::TierReplay).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "daemon/replay/trace.h"

int main(int argc, char** argv) {
  bool timing = false;
  int64_t tier_entries = -1;
  const char* tier_log = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--timing") == 0) {
      timing = true;
    } else if (std::strncmp(argv[i], "--host_tier=", 12) == 0) {
      char* end = nullptr;
      tier_entries = std::strtoll(argv[i] + 12, &end, 10);
      if (*end != '\0' || tier_entries < 0) {
        std::fprintf(stderr, "statecache-replay: bad %s\n", argv[i]);
        return 2;
      }
    } else if (std::strncmp(argv[i], "--tier_log=", 11) == 0) {
      tier_log = argv[i] + 11;
    } else if (std::strcmp(argv[i], "--help") == 0 ||
               std::strcmp(argv[i], "-h") == 0) {
      std::printf(
          "usage: statecache-replay [--timing] [--host_tier=N "
          "--tier_log=FILE] < TRACE.jsonl\n"
          "Replays a pool trace through the C++ pool; one result per line.\n");
      return 0;
    } else {
      std::fprintf(stderr, "statecache-replay: unknown argument '%s'\n",
                   argv[i]);
      return 2;
    }
  }
  std::ios::sync_with_stdio(false);
  std::vector<std::string> lines;
  for (std::string line; std::getline(std::cin, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
  }
  if ((tier_entries >= 0) != (tier_log != nullptr)) {
    std::fprintf(stderr,
                 "statecache-replay: --host_tier and --tier_log go together\n");
    return 2;
  }
  statecache::replay::Timing stats;
  statecache::replay::TierReplay tier;
  tier.entries = tier_entries;
  const std::vector<std::string> results = statecache::replay::ReplayTrace(
      lines, timing ? &stats : nullptr, tier_log != nullptr ? &tier : nullptr);
  if (tier_log != nullptr) {
    std::FILE* f = std::fopen(tier_log, "w");
    if (f == nullptr) {
      std::fprintf(stderr, "statecache-replay: cannot write %s\n", tier_log);
      return 1;
    }
    for (const std::string& event : tier.events) {
      std::fprintf(f, "%s\n", event.c_str());
    }
    std::fclose(f);
  }
  std::string out;
  for (const std::string& r : results) {
    out += r;
    out += '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (timing) {
    std::fprintf(stderr, "calls=%lld ns=%lld\n",
                 static_cast<long long>(stats.calls),
                 static_cast<long long>(stats.nanos));
  }
  return 0;
}

// statecache-replay: runs a pool trace (shared/reference/TRACE_FORMAT.md) read
// on stdin through the C++ SlotPool and prints one normalised result line per
// input line on stdout, so its output can be compared byte for byte with the
// reference's run_trace.py.
//
//   statecache-replay [--timing] < TRACE.jsonl > RESULTS.jsonl
//
// --timing also prints `calls=N ns=T` on stderr: the pool calls made and the
// nanoseconds spent inside them alone (parsing, printing and dump excluded).
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "daemon/replay/trace.h"

int main(int argc, char** argv) {
  bool timing = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--timing") == 0) {
      timing = true;
    } else if (std::strcmp(argv[i], "--help") == 0 ||
               std::strcmp(argv[i], "-h") == 0) {
      std::printf(
          "usage: statecache-replay [--timing] < TRACE.jsonl\n"
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
  statecache::replay::Timing stats;
  const std::vector<std::string> results =
      statecache::replay::ReplayTrace(lines, timing ? &stats : nullptr);
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

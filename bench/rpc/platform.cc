#include "bench/rpc/platform.h"

#include <errno.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace statecache::bench {

std::optional<cpu_set_t> ParseCpuList(const std::string& list) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    std::pair<std::string, std::string> range =
        absl::StrSplit(part, absl::MaxSplits('-', 1));
    int first = 0;
    int last = 0;
    if (!absl::SimpleAtoi(range.first, &first)) return std::nullopt;
    if (range.second.empty()) {
      last = first;
    } else if (!absl::SimpleAtoi(range.second, &last)) {
      return std::nullopt;
    }
    if (first < 0 || last < first || last >= CPU_SETSIZE) return std::nullopt;
    for (int cpu = first; cpu <= last; ++cpu) CPU_SET(cpu, &set);
  }
  return set;
}

void PinTo(const std::string& cpus, const char* flag_name) {
  if (cpus.empty()) return;
  std::optional<cpu_set_t> set = ParseCpuList(cpus);
  if (!set.has_value()) {
    std::fprintf(stderr, "%s: --%s=%s is not a CPU list\n",
                 program_invocation_short_name, flag_name, cpus.c_str());
    std::exit(2);
  }
  if (sched_setaffinity(0, sizeof(*set), &*set) != 0) {
    std::fprintf(stderr, "%s: --%s=%s: sched_setaffinity: %s\n",
                 program_invocation_short_name, flag_name, cpus.c_str(),
                 std::strerror(errno));
    std::exit(2);
  }
}

std::string AllowedCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return "?";
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return absl::StrJoin(cpus, ",");
}

void PrintPlatform(const std::string& server_cpus) {
  std::string halt_poll = "n/a";
  if (FILE* f = std::fopen("/sys/module/haltpoll/parameters/guest_halt_poll_ns",
                           "r")) {
    char buf[32] = {};
    if (std::fgets(buf, sizeof buf, f) != nullptr) {
      halt_poll = std::string(absl::StripAsciiWhitespace(buf));
    }
    std::fclose(f);
  }
  std::printf(
      "platform: %ld CPUs online; client on CPUs %s, servers on %s; guest "
      "halt polling %s ns\n",
      sysconf(_SC_NPROCESSORS_ONLN), AllowedCpus().c_str(),
      server_cpus.empty() ? "the same" : server_cpus.c_str(),
      halt_poll.c_str());
}

}  // namespace statecache::bench

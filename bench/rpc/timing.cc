#include "bench/rpc/timing.h"

#include <algorithm>
#include <cstdio>

namespace statecache::bench {
namespace {

// One call of `trip`, after its Prepare and the `gap` since `returned`
// (see Measure). Sets `returned`; returns the call's microseconds.
double TimedCall(RoundTrip& trip, std::chrono::microseconds gap,
                 Clock::time_point& returned) {
  trip.Prepare();
  while (Clock::now() - returned < gap) {
  }
  const auto t0 = Clock::now();
  trip.Call();
  returned = Clock::now();
  return std::chrono::duration<double, std::micro>(returned - t0).count();
}

}  // namespace

double MicrosSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

Latency Summarise(std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100]};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Latency Measure(RoundTrip& trip, int n, std::chrono::microseconds gap) {
  std::vector<double> us;
  us.reserve(n);
  Clock::time_point returned;
  for (int i = 0; i < n; ++i) us.push_back(TimedCall(trip, gap, returned));
  return Summarise(us);
}

std::pair<Latency, Latency> MeasurePaired(RoundTrip& trip, RoundTrip& ping,
                                          int n,
                                          std::chrono::microseconds gap) {
  constexpr int kCallsPerBlock = 8;
  std::vector<double> us[2];
  RoundTrip* trips[2] = {&trip, &ping};
  for (int k = 0; k < 2; ++k) us[k].reserve(n);
  Clock::time_point returned;
  for (int done = 0; done < n; done += kCallsPerBlock - 1) {
    for (int k = 0; k < 2; ++k) {
      for (int i = 0; i < kCallsPerBlock; ++i) {
        const double t = TimedCall(*trips[k], gap, returned);
        if (i > 0) us[k].push_back(t);
      }
    }
  }
  return {Summarise(us[0]), Summarise(us[1])};
}

void PrintPairedRow(
    const std::string& name,
    const std::vector<std::pair<Latency, Latency>>& runs,
    const std::function<double(const Latency&, const Latency&)>& last) {
  std::vector<double> p50, ping50, extra, r50, col;
  for (const auto& [l, ping] : runs) {
    p50.push_back(l.p50_us);
    ping50.push_back(ping.p50_us);
    extra.push_back(l.p50_us - ping.p50_us);
    r50.push_back(l.p50_us / ping.p50_us);
    col.push_back(last(l, ping));
  }
  std::printf("  %-22s %10.1f %10.1f %10.1f %11.2fx %11.2fx\n", name.c_str(),
              Median(p50), Median(ping50), Median(extra), Median(r50),
              Median(col));
}

}  // namespace statecache::bench

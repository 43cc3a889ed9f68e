#include "daemon/service/cycle_clock.h"

#include <chrono>
#include <cstdint>
#include <ratio>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace statecache {
namespace {

bool HasInvariantTsc() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // gcc's cpuid.h returns unsigned, clang's int.
  if (static_cast<unsigned>(__get_cpuid_max(0x80000000, nullptr)) <
      0x80000007) {
    return false;
  }
  __cpuid(0x80000007, eax, ebx, ecx, edx);
  return (edx >> 8) & 1;  // "invariant TSC"
#else
  return false;
#endif
}

using std::chrono::steady_clock;

// Both clocks at one instant: a steady_clock read between two tick reads,
// the tick taken as their midpoint. Of a few tries the narrowest pair wins,
// so a preemption or interrupt between the reads (which would skew the
// calibration by its whole length) is not what is kept.
struct Instant {
  steady_clock::time_point steady;
  double ticks = 0;
};
Instant ReadBoth() {
  Instant best;
  uint64_t best_width = ~uint64_t{0};
  for (int i = 0; i < 8; ++i) {
    const uint64_t before = CycleClock::Now();
    const steady_clock::time_point steady = steady_clock::now();
    const uint64_t after = CycleClock::Now();
    // (A thread moved to another core may read a TSC a little behind.)
    const uint64_t width = after >= before ? after - before : ~uint64_t{0};
    if (i == 0 || width < best_width) {
      best_width = width;
      // A backwards pair (width ~0) keeps `before`, not a wrapped midpoint.
      const uint64_t half = after >= before ? (after - before) / 2 : 0;
      best = {steady, static_cast<double>(before + half)};
    }
  }
  return best;
}

// Ticks against steady_clock over `window` (a busy wait: this runs once,
// and sleeping would only make the window less exact; a preemption inside
// it costs nothing, both clocks run on).
double CalibrateSecondsPerTick(std::chrono::nanoseconds window) {
  const Instant t0 = ReadBoth();
  while (steady_clock::now() - t0.steady < window) {
  }
  const Instant t1 = ReadBoth();
  const double seconds =
      std::chrono::duration<double>(t1.steady - t0.steady).count();
  return t1.ticks > t0.ticks ? seconds / (t1.ticks - t0.ticks) : 1e-9;
}

}  // namespace

bool CycleClock::UsesTsc() {
  static const bool tsc = HasInvariantTsc();
  return tsc;
}

double CycleClock::SecondsPerTick() {
  static const double seconds_per_tick =
      UsesTsc() ? CalibrateSecondsPerTick(std::chrono::milliseconds(2))
                : std::chrono::duration<double>(
                      std::chrono::steady_clock::duration(1))
                      .count();
  return seconds_per_tick;
}

}  // namespace statecache

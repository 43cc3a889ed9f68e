#include "daemon/service/cycle_clock.h"

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

// Ticks against steady_clock over `window` (a busy wait: this runs once,
// and sleeping would only make the window less exact).
double CalibrateSecondsPerTick(std::chrono::nanoseconds window) {
  using std::chrono::steady_clock;
  const steady_clock::time_point t0 = steady_clock::now();
  const uint64_t c0 = CycleClock::Now();
  steady_clock::time_point t1;
  do {
    t1 = steady_clock::now();
  } while (t1 - t0 < window);
  const uint64_t c1 = CycleClock::Now();
  const double seconds = std::chrono::duration<double>(t1 - t0).count();
  return c1 > c0 ? seconds / static_cast<double>(c1 - c0) : 1e-9;
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

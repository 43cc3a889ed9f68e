// CycleClock: a cheap tick counter for timing Step operations
// (operation_timing.h).
//
// std::chrono::steady_clock reads through the vDSO with a fence that drains
// the pipeline each time; plain rdtsc is cheaper and lets the operations
// around it overlap. On x86-64 with an invariant TSC (constant rate, runs in
// every C-state) ticks are TSC cycles; elsewhere they are steady_clock
// nanoseconds.
//
// Thread-safe.
#ifndef STATECACHE_DAEMON_SERVICE_CYCLE_CLOCK_H_
#define STATECACHE_DAEMON_SERVICE_CYCLE_CLOCK_H_

#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace statecache {

class CycleClock {
 public:
  // The current tick. Ticks only go forward on one core; a thread that moves
  // to another core may read a TSC a little behind, so callers clamp a
  // negative difference to zero.
  static uint64_t Now() {
#if defined(__x86_64__)
    if (UsesTsc()) return __rdtsc();
#endif
    return static_cast<uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
  }

  // Seconds per tick. The first call on a TSC calibrates against
  // steady_clock for a few milliseconds; call it before timing anything (the
  // StateCache does when an observer first asks for operation timings).
  static double SecondsPerTick();

  // Whether ticks are TSC cycles (else steady_clock nanoseconds).
  static bool UsesTsc();
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_CYCLE_CLOCK_H_

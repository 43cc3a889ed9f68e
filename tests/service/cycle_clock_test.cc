// CycleClock: ticks convert to the seconds steady_clock measures.
#include "daemon/service/cycle_clock.h"

#include <chrono>
#include <cstdint>

#include "gtest/gtest.h"

namespace statecache {
namespace {

using std::chrono::steady_clock;

// Both clocks at (nearly) one instant: a steady_clock read between two tick
// reads.
struct Reading {
  uint64_t ticks_before = 0;
  steady_clock::time_point steady;
  uint64_t ticks_after = 0;
};

Reading Read() {
  Reading r;
  r.ticks_before = CycleClock::Now();
  r.steady = steady_clock::now();
  r.ticks_after = CycleClock::Now();
  return r;
}

// Both clocks run on while the thread is off the CPU, so a preemption during
// the spin changes nothing; one between the paired reads would. A pair wider
// than this (they are ~50 ns apart otherwise) was demonstrably interrupted:
// the measurement is taken again, a bounded number of times.
constexpr double kMaxPairSeconds = 5e-6;
constexpr int kAttempts = 5;
// What the calibration may be off by: its 2 ms window is read with pairs as
// tight as these, so well under 0.1% unless it is wrong.
constexpr double kTolerance = 0.01;

TEST(CycleClockTest, TicksTimesSecondsPerTickIsSteadyClockTime) {
  const double seconds_per_tick = CycleClock::SecondsPerTick();
  ASSERT_GT(seconds_per_tick, 0);
  for (const int ms : {5, 20}) {
    int attempt = 0;
    for (; attempt < kAttempts; ++attempt) {
      const Reading r0 = Read();
      while (steady_clock::now() - r0.steady < std::chrono::milliseconds(ms)) {
      }
      const Reading r1 = Read();
      ASSERT_GE(r0.ticks_after, r0.ticks_before);
      ASSERT_GE(r1.ticks_after, r1.ticks_before);
      if ((r0.ticks_after - r0.ticks_before) * seconds_per_tick >
              kMaxPairSeconds ||
          (r1.ticks_after - r1.ticks_before) * seconds_per_tick >
              kMaxPairSeconds) {
        continue;  // preempted between paired reads
      }
      const double steady =
          std::chrono::duration<double>(r1.steady - r0.steady).count();
      // The ticks between the two steady reads: at least the inner
      // difference, at most the outer one.
      const double inner =
          static_cast<double>(r1.ticks_before - r0.ticks_after) *
          seconds_per_tick;
      const double outer =
          static_cast<double>(r1.ticks_after - r0.ticks_before) *
          seconds_per_tick;
      EXPECT_GT(outer, steady * (1 - kTolerance)) << ms << " ms";
      EXPECT_LT(inner, steady * (1 + kTolerance)) << ms << " ms";
      break;
    }
    EXPECT_LT(attempt, kAttempts)
        << ms << " ms: preempted between paired reads in every attempt";
  }
}

TEST(CycleClockTest, TicksAreCyclesOnlyWithAnInvariantTsc) {
  if (CycleClock::UsesTsc()) {
    // TSCs run at 0.5-6 GHz.
    EXPECT_GT(CycleClock::SecondsPerTick(), 1.0 / 6e9);
    EXPECT_LT(CycleClock::SecondsPerTick(), 1.0 / 0.5e9);
  } else {
    EXPECT_DOUBLE_EQ(
        CycleClock::SecondsPerTick(),
        std::chrono::duration<double>(steady_clock::duration(1)).count());
  }
}

}  // namespace
}  // namespace statecache

// CycleClock: ticks convert to the seconds steady_clock measures.
#include "daemon/service/cycle_clock.h"

#include <chrono>
#include <cstdint>

#include "gtest/gtest.h"

namespace statecache {
namespace {

using std::chrono::steady_clock;

// Busy-waits `span` of steady_clock time; returns the time actually spent.
double SpinSeconds(std::chrono::microseconds span) {
  const steady_clock::time_point t0 = steady_clock::now();
  steady_clock::time_point t1;
  do {
    t1 = steady_clock::now();
  } while (t1 - t0 < span);
  return std::chrono::duration<double>(t1 - t0).count();
}

TEST(CycleClockTest, TicksTimesSecondsPerTickIsSteadyClockTime) {
  const double seconds_per_tick = CycleClock::SecondsPerTick();
  ASSERT_GT(seconds_per_tick, 0);
  for (const int ms : {5, 20}) {
    const uint64_t c0 = CycleClock::Now();
    const double spent = SpinSeconds(std::chrono::milliseconds(ms));
    const uint64_t c1 = CycleClock::Now();
    ASSERT_GT(c1, c0);
    const double measured = static_cast<double>(c1 - c0) * seconds_per_tick;
    // Ticks are counted just outside the spin, so a little more than it.
    EXPECT_GT(measured, spent * 0.95) << ms << " ms";
    EXPECT_LT(measured, spent * 1.10 + 200e-6) << ms << " ms";
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

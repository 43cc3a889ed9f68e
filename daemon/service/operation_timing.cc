#include "daemon/service/operation_timing.h"

namespace statecache {

OperationTiming::OperationTiming(int32_t interval, double seconds_per_tick,
                                 uint64_t seed)
    : gap_span_(2 * static_cast<uint64_t>(interval) - 1),
      seconds_per_tick_(seconds_per_tick),
      // xorshift's state must not be zero.
      rng_(seed | 1),
      until_timed_(0) {
  until_timed_ = NextGap();
}

void OperationTiming::Clear() {
  step_.counts.fill(0);
  step_.timed.clear();
  step_.refused.clear();
  chained_ = false;  // the time between Steps is no operation's
}

uint32_t OperationTiming::NextGap() {
  // xorshift64: statistical quality is not at stake, only that the gaps
  // follow no pattern a pass's could line up with.
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  // Uniform in [0, gap_span_) by multiply-shift on the top 32 bits
  // (gap_span_ < 2^32), then 1 on.
  return static_cast<uint32_t>(((rng_ >> 32) * gap_span_) >> 32) + 1;
}

}  // namespace statecache

// SlotLedger: the scheduler's own view of the slots its session holds,
// mirrored from the daemon's answers by the rules statecache.proto states,
// so admission can be gated on free slots without asking the daemon.
//
//   * an admitted request holds `width` slots; one that resumed by fork
//     also pins its source (read by the batch being built: the next
//     begin_pass returns it);
//   * a kept `checkpoint` pins the request's old slot as its fork source,
//     deferred (it survives one more begin_pass), and the request stops
//     reading any earlier source (which stays on the clock);
//   * consume_fork: the request stops reading its source (the clock still
//     returns it);
//   * release: the request's slots go back, and it stops being a reader of
//     its source: the pin goes with its last reader;
//   * begin_pass: deferred pins lose their deferral, the others go back;
//     their readers forget them. BeginPass returns how many pins went back,
//     which must equal the daemon's pins_released.
//
// Requests are named by the scheduler's integer keys. Thread-compatible.
#ifndef STATECACHE_BENCH_LOADGEN_SLOT_LEDGER_H_
#define STATECACHE_BENCH_LOADGEN_SLOT_LEDGER_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace statecache::loadgen {

class SlotLedger {
 public:
  // `fork_src` is the admit's fork source, or -1 (cold start or adopted).
  void Admitted(int64_t request, int32_t width, int64_t fork_src);
  // A kept checkpoint: `old_slot` is its fork_src.
  void Checkpointed(int64_t request, int64_t old_slot);
  void ConsumedFork(int64_t request);
  void Released(int64_t request);
  // Returns the pins released.
  int32_t BeginPass();

  // Slots the session's live requests hold.
  int64_t live_slots() const { return live_slots_; }
  // Distinct slots pinned, and those of them a begin_pass will not return.
  int64_t pinned_slots() const { return static_cast<int64_t>(pins_.size()); }
  int64_t deferred_pins() const;
  // The request's fork source as the daemon knows it, or -1.
  int64_t fork_src(int64_t request) const;
  int32_t width(int64_t request) const;

 private:
  struct Pin {
    int32_t count = 0;
    bool deferred = false;
    std::vector<int64_t> readers;
  };
  struct Held {
    int32_t width = 0;
    int64_t fork_src = -1;
  };
  void AddReader(int64_t slot, int64_t request, bool deferred);
  void RemoveReader(int64_t slot, int64_t request);

  // Ordered by slot, as the daemon walks them (the order does not change
  // what goes back, only keeps this deterministic).
  std::map<int64_t, Pin> pins_;
  absl::flat_hash_map<int64_t, Held> requests_;
  int64_t live_slots_ = 0;
};

}  // namespace statecache::loadgen

#endif  // STATECACHE_BENCH_LOADGEN_SLOT_LEDGER_H_

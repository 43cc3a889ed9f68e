// FairTurns: one Step at a time, handed round robin between the sessions
// waiting for one, so that a session sending many heavy Steps at once (from
// several streams or connections) cannot keep another session's begin_pass
// waiting behind more than one of its Steps.
//
// The rule: when the turn ends, it goes to the longest-waiting Step of the
// next session in the ring of sessions with a Step waiting; a session joins
// the ring's back when its first Step starts waiting, and goes back there
// after each turn while it still has Steps waiting. The session whose turn
// just ended is passed over when another session is waiting. A session's own
// Steps take their turns in arrival order. So a Step waits behind at most
// one Step of each other session in the ring, each bounded by
// --max_hashes_per_step and --max_operations_per_step.
//
// Steps already run one at a time under StateCache's mutex; the turn only
// decides who runs next, at the cost of one more uncontended lock per Step.
// Waiting blocks the calling thread, as waiting for that mutex does.
//
// Thread safety: thread-safe.
#ifndef STATECACHE_DAEMON_SERVICE_FAIR_TURNS_H_
#define STATECACHE_DAEMON_SERVICE_FAIR_TURNS_H_

#include <cstdint>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace statecache {

class FairTurns {
 public:
  // Holds the turn from construction to destruction.
  class Turn {
   public:
    // Blocks until it is `key`'s turn. `key` names the session (any value
    // standing for it; two sessions sharing one only share their turns).
    Turn(FairTurns& turns, uint64_t key) : turns_(turns) { turns_.Take(key); }
    ~Turn() { turns_.Give(); }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    FairTurns& turns_;
  };

  FairTurns() = default;
  FairTurns(const FairTurns&) = delete;
  FairTurns& operator=(const FairTurns&) = delete;

  // Steps waiting for a turn now (not counting the one holding it).
  int waiting() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter {
    bool granted = false;
  };

  void Take(uint64_t key) ABSL_LOCKS_EXCLUDED(mu_);
  void Give() ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t holder_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  // Sessions with a Step waiting, in turn order; each appears once.
  std::deque<uint64_t> ring_ ABSL_GUARDED_BY(mu_);
  // Each waiting session's Steps, in arrival order (never empty).
  absl::flat_hash_map<uint64_t, std::deque<Waiter*>> queues_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_SERVICE_FAIR_TURNS_H_

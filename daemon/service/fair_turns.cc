#include "daemon/service/fair_turns.h"

#include <utility>

namespace statecache {

int FairTurns::waiting() const {
  absl::MutexLock lock(&mu_);
  return waiting_;
}

void FairTurns::Take(uint64_t key) {
  absl::MutexLock lock(&mu_);
  if (!held_) {
    // Nobody holds the turn, so nobody waits for it either: Give hands it
    // straight to a waiter, never leaving it free with waiters.
    held_ = true;
    holder_ = key;
    return;
  }
  Waiter waiter;
  std::deque<Waiter*>& queue = queues_[key];
  if (queue.empty()) ring_.push_back(key);
  queue.push_back(&waiter);
  ++waiting_;
  mu_.Await(absl::Condition(&waiter.granted));
  --waiting_;
}

void FairTurns::Give() {
  absl::MutexLock lock(&mu_);
  if (ring_.empty()) {
    held_ = false;
    return;
  }
  // Pass over the session whose turn this was while another one waits.
  if (ring_.front() == holder_ && ring_.size() > 1) {
    ring_.push_back(ring_.front());
    ring_.pop_front();
  }
  const uint64_t key = ring_.front();
  ring_.pop_front();
  auto it = queues_.find(key);
  Waiter* next = it->second.front();
  it->second.pop_front();
  if (it->second.empty()) {
    queues_.erase(it);
  } else {
    ring_.push_back(key);
  }
  holder_ = key;
  next->granted = true;
}

}  // namespace statecache

#include "bench/loadgen/slot_ledger.h"

#include <algorithm>
#include <cstdint>

namespace statecache::loadgen {

void SlotLedger::AddReader(int64_t slot, int64_t request, bool deferred) {
  Pin& pin = pins_[slot];
  ++pin.count;
  if (deferred) pin.deferred = true;
  pin.readers.push_back(request);
}

void SlotLedger::RemoveReader(int64_t slot, int64_t request) {
  auto it = pins_.find(slot);
  if (it == pins_.end()) return;
  std::vector<int64_t>& readers = it->second.readers;
  auto r = std::find(readers.begin(), readers.end(), request);
  if (r != readers.end()) readers.erase(r);
}

void SlotLedger::Admitted(int64_t request, int32_t width, int64_t fork_src) {
  requests_[request] = Held{.width = width, .fork_src = fork_src};
  live_slots_ += width;
  if (fork_src >= 0) AddReader(fork_src, request, /*deferred=*/false);
}

void SlotLedger::Checkpointed(int64_t request, int64_t old_slot) {
  auto it = requests_.find(request);
  if (it == requests_.end()) return;
  if (it->second.fork_src >= 0) RemoveReader(it->second.fork_src, request);
  AddReader(old_slot, request, /*deferred=*/true);
  it->second.fork_src = old_slot;
}

void SlotLedger::ConsumedFork(int64_t request) {
  auto it = requests_.find(request);
  if (it == requests_.end() || it->second.fork_src < 0) return;
  RemoveReader(it->second.fork_src, request);
  it->second.fork_src = -1;
}

void SlotLedger::Released(int64_t request) {
  auto it = requests_.find(request);
  if (it == requests_.end()) return;
  live_slots_ -= it->second.width;
  const int64_t src = it->second.fork_src;
  if (src >= 0) {
    auto pin = pins_.find(src);
    if (pin != pins_.end()) {
      RemoveReader(src, request);
      if (--pin->second.count == 0) pins_.erase(pin);
    }
  }
  requests_.erase(it);
}

int32_t SlotLedger::BeginPass() {
  int32_t released = 0;
  for (auto it = pins_.begin(); it != pins_.end();) {
    if (it->second.deferred) {
      it->second.deferred = false;
      ++it;
      continue;
    }
    released += it->second.count;
    for (int64_t reader : it->second.readers) {
      auto r = requests_.find(reader);
      if (r != requests_.end() && r->second.fork_src == it->first) {
        r->second.fork_src = -1;
      }
    }
    it = pins_.erase(it);
  }
  return released;
}

int64_t SlotLedger::deferred_pins() const {
  int64_t n = 0;
  for (const auto& [slot, pin] : pins_) n += pin.deferred ? 1 : 0;
  return n;
}

int64_t SlotLedger::fork_src(int64_t request) const {
  auto it = requests_.find(request);
  return it == requests_.end() ? -1 : it->second.fork_src;
}

int32_t SlotLedger::width(int64_t request) const {
  auto it = requests_.find(request);
  return it == requests_.end() ? 0 : it->second.width;
}

}  // namespace statecache::loadgen

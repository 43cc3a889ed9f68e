// The free slots that still hold a checkpoint, in LRU order.
//
// IntrusiveLru is a doubly linked list threaded through per-slot records
// (any Node with an `LruLinks lru` member), so insert, remove and in-place
// replacement are O(1), nothing is ever allocated, and a slot's links share a
// cache line with the rest of its state. The list keeps only head, tail and
// size; the records live in the caller's vector, passed to every call (so
// the owner stays freely movable). The head is what a shortage spends first.
//
// Thread-compatible.
#ifndef STATECACHE_DAEMON_CORE_CHECKPOINT_LRU_H_
#define STATECACHE_DAEMON_CORE_CHECKPOINT_LRU_H_

#include <cstdint>
#include <vector>

namespace statecache {

inline constexpr int32_t kNilSlot = -1;

struct LruLinks {
  int32_t prev = kNilSlot;
  int32_t next = kNilSlot;
};

template <typename Node, typename Nodes = std::vector<Node>>
class IntrusiveLru {
 public:
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // REQUIRES: !empty().
  int64_t Front() const { return head_; }

  // REQUIRES (all): `slot` indexes `nodes`; membership as each says.
  // The slot after `slot`, or kNilSlot. REQUIRES: `slot` linked.
  static int64_t Next(const Nodes& nodes, int64_t slot) {
    return nodes[slot].lru.next;
  }
  // REQUIRES: `slot` not linked.
  void PushFront(Nodes& nodes, int64_t slot) {
    const auto s = static_cast<int32_t>(slot);
    nodes[s].lru = LruLinks{kNilSlot, head_};
    if (head_ != kNilSlot)
      nodes[head_].lru.prev = s;
    else
      tail_ = s;
    head_ = s;
    ++size_;
  }
  void PushBack(Nodes& nodes, int64_t slot) {
    const auto s = static_cast<int32_t>(slot);
    nodes[s].lru = LruLinks{tail_, kNilSlot};
    if (tail_ != kNilSlot)
      nodes[tail_].lru.next = s;
    else
      head_ = s;
    tail_ = s;
    ++size_;
  }
  // REQUIRES: `slot` linked.
  void Remove(Nodes& nodes, int64_t slot) {
    const LruLinks links = nodes[slot].lru;
    if (links.prev != kNilSlot)
      nodes[links.prev].lru.next = links.next;
    else
      head_ = links.next;
    if (links.next != kNilSlot)
      nodes[links.next].lru.prev = links.prev;
    else
      tail_ = links.prev;
    nodes[slot].lru = LruLinks{};
    --size_;
  }
  // `replacement` takes `slot`'s place in the order.
  // REQUIRES: `slot` linked, `replacement` not.
  void Replace(Nodes& nodes, int64_t slot, int64_t replacement) {
    const auto r = static_cast<int32_t>(replacement);
    const LruLinks links = nodes[slot].lru;
    nodes[r].lru = links;
    if (links.prev != kNilSlot)
      nodes[links.prev].lru.next = r;
    else
      head_ = r;
    if (links.next != kNilSlot)
      nodes[links.next].lru.prev = r;
    else
      tail_ = r;
    nodes[slot].lru = LruLinks{};
  }
  // Head-to-tail order. O(size).
  std::vector<int64_t> ToVector(const Nodes& nodes) const {
    std::vector<int64_t> out;
    out.reserve(size_);
    for (int32_t s = head_; s != kNilSlot; s = nodes[s].lru.next) {
      out.push_back(s);
    }
    return out;
  }

 private:
  int32_t head_ = kNilSlot;
  int32_t tail_ = kNilSlot;
  int64_t size_ = 0;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_CHECKPOINT_LRU_H_

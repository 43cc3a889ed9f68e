// CheckpointLru: the free slots that still hold a checkpoint, in LRU order.
//
// An intrusive doubly linked list over slot indices: links live in two arrays
// indexed by slot, so insert, remove, and in-place replacement are O(1) and no
// node is ever allocated. The head is what a shortage spends first.
//
// Thread-compatible.
#ifndef STATECACHE_DAEMON_CORE_CHECKPOINT_LRU_H_
#define STATECACHE_DAEMON_CORE_CHECKPOINT_LRU_H_

#include <cstdint>
#include <vector>

namespace statecache {

class CheckpointLru {
 public:
  static constexpr int32_t kNil = -1;

  // Makes room for slot indices [0, capacity). Never shrinks.
  void Grow(int64_t capacity);

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool Contains(int64_t slot) const { return in_list_[slot] != 0; }
  // REQUIRES: !empty().
  int64_t Front() const { return head_; }
  // The slot after `slot`, or kNil. REQUIRES: Contains(slot).
  int64_t Next(int64_t slot) const { return next_[slot]; }

  // REQUIRES: !Contains(slot), slot < capacity.
  void PushFront(int64_t slot);
  void PushBack(int64_t slot);
  // REQUIRES: Contains(slot).
  void Remove(int64_t slot);
  // `replacement` takes `slot`'s place in the order.
  // REQUIRES: Contains(slot), !Contains(replacement).
  void Replace(int64_t slot, int64_t replacement);

  // Head-to-tail order. O(size).
  std::vector<int64_t> ToVector() const;

 private:
  std::vector<int32_t> prev_;
  std::vector<int32_t> next_;
  std::vector<uint8_t> in_list_;
  int32_t head_ = kNil;
  int32_t tail_ = kNil;
  int64_t size_ = 0;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_CHECKPOINT_LRU_H_

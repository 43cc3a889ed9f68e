#include "daemon/core/checkpoint_lru.h"

namespace statecache {

void CheckpointLru::Grow(int64_t capacity) {
  if (capacity <= static_cast<int64_t>(prev_.size())) return;
  prev_.resize(capacity, kNil);
  next_.resize(capacity, kNil);
  in_list_.resize(capacity, 0);
}

void CheckpointLru::PushFront(int64_t slot) {
  const auto s = static_cast<int32_t>(slot);
  prev_[s] = kNil;
  next_[s] = head_;
  if (head_ != kNil) prev_[head_] = s; else tail_ = s;
  head_ = s;
  in_list_[s] = 1;
  ++size_;
}

void CheckpointLru::PushBack(int64_t slot) {
  const auto s = static_cast<int32_t>(slot);
  next_[s] = kNil;
  prev_[s] = tail_;
  if (tail_ != kNil) next_[tail_] = s; else head_ = s;
  tail_ = s;
  in_list_[s] = 1;
  ++size_;
}

void CheckpointLru::Remove(int64_t slot) {
  const auto s = static_cast<int32_t>(slot);
  const int32_t p = prev_[s];
  const int32_t n = next_[s];
  if (p != kNil) next_[p] = n; else head_ = n;
  if (n != kNil) prev_[n] = p; else tail_ = p;
  prev_[s] = next_[s] = kNil;
  in_list_[s] = 0;
  --size_;
}

void CheckpointLru::Replace(int64_t slot, int64_t replacement) {
  const auto s = static_cast<int32_t>(slot);
  const auto r = static_cast<int32_t>(replacement);
  const int32_t p = prev_[s];
  const int32_t n = next_[s];
  prev_[r] = p;
  next_[r] = n;
  if (p != kNil) next_[p] = r; else head_ = r;
  if (n != kNil) prev_[n] = r; else tail_ = r;
  prev_[s] = next_[s] = kNil;
  in_list_[s] = 0;
  in_list_[r] = 1;
}

std::vector<int64_t> CheckpointLru::ToVector() const {
  std::vector<int64_t> out;
  out.reserve(size_);
  for (int32_t s = head_; s != kNil; s = next_[s]) out.push_back(s);
  return out;
}

}  // namespace statecache

#include "daemon/core/branch_points.h"

#include <utility>

namespace statecache {

BranchPoints::BranchPoints(int64_t capacity_blocks)
    : generation_capacity_(capacity_blocks < 2 ? 1 : capacity_blocks / 2) {}

const BranchPoints::Entry* BranchPoints::Find(int64_t hash) const {
  if (auto it = current_.find(hash); it != current_.end()) return &it->second;
  if (auto it = previous_.find(hash); it != previous_.end()) return &it->second;
  return nullptr;
}

BranchPoints::Entry& BranchPoints::Touch(int64_t hash) {
  if (auto it = current_.find(hash); it != current_.end()) return it->second;
  Entry entry;
  if (auto it = previous_.find(hash); it != previous_.end()) {
    entry = it->second;
    previous_.erase(it);
  }
  if (static_cast<int64_t>(current_.size()) >= generation_capacity_) {
    previous_ = std::move(current_);
    current_ = {};
  }
  return current_[hash] = entry;
}

int64_t BranchPoints::Record(absl::Span<const int64_t> hashes) {
  const auto n = static_cast<int64_t>(hashes.size());
  // The longest recorded prefix, and whether a prompt went on past it.
  int64_t shared = 0;
  bool continued = false;
  for (; shared < n; ++shared) {
    const Entry* entry = Find(hashes[shared]);
    if (entry == nullptr) break;
    continued = entry->continued;
  }
  for (int64_t i = 0; i < n; ++i) {
    Entry& entry = Touch(hashes[i]);
    if (i + 1 < n) entry.continued = true;
  }
  return shared > 0 && shared < n && continued ? shared : 0;
}

}  // namespace statecache

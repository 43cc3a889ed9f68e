// BranchPoints: the prompts advised sessions sent recently, remembered as
// their chained block hashes, to tell an admission where it branches off
// another prompt.
//
// A prompt's block hashes are chained (each covers every token before it),
// so two prompts share exactly the leading blocks whose hashes they share.
// A branch point is the end of such a shared prefix when the earlier prompt
// went on past it with another block: a system prompt or a document that
// many requests start with and then leave, a plan that sub-agents fork
// from. A checkpoint there is what the next request sharing the prefix
// resumes from; one at either prompt's end is not (vLLM issue #45238: the
// shared part never ends a prompt). Where the earlier prompt simply ended
// (the same conversation's previous turn, which this prompt continues),
// there is no branch: the previous turn's continuation checkpoint is the
// resume point.
//
// Memory is bounded: the table keeps two generations of hashes, each of at
// most capacity / 2. Recording a prompt moves its hashes into the current
// generation; when that is full, the previous one is forgotten and the
// current one becomes the previous. So a prefix any recent prompt used stays
// (about the last capacity / 2 distinct blocks recorded), and what no prompt
// used for that long goes.
//
// Cost: one lookup and one insert per block of the recorded prompt.
//
// Thread-compatible.
#ifndef STATECACHE_DAEMON_CORE_BRANCH_POINTS_H_
#define STATECACHE_DAEMON_CORE_BRANCH_POINTS_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace statecache {

class BranchPoints {
 public:
  // REQUIRES: capacity_blocks >= 2.
  explicit BranchPoints(int64_t capacity_blocks);

  // Records `hashes`, a prompt's chained block hashes in order, and returns
  // its branch point against the prompts recorded before it: L when an
  // earlier prompt shares hashes[0..L) and went on past block L - 1 with a
  // block other than hashes[L]; 0 when no earlier prompt shares its first
  // block, when one shares all of it (L would be the prompt's end), or when
  // the longest sharer ended at L.
  int64_t Record(absl::Span<const int64_t> hashes);
  // Forgets every prompt.
  void Clear() {
    current_.clear();
    previous_.clear();
  }

  // Hashes remembered (both generations).
  int64_t size() const {
    return static_cast<int64_t>(current_.size() + previous_.size());
  }
  int64_t capacity() const { return 2 * generation_capacity_; }

 private:
  // Whether some recorded prompt had a block after this one.
  struct Entry {
    bool continued = false;
  };
  // The entry for `hash` in either generation, or null.
  const Entry* Find(int64_t hash) const;
  // The entry for `hash` in the current generation: moved there from the
  // previous one, or new. A full current generation becomes the previous
  // one first (the previous one is forgotten).
  Entry& Touch(int64_t hash);

  int64_t generation_capacity_;
  absl::flat_hash_map<int64_t, Entry> current_;
  absl::flat_hash_map<int64_t, Entry> previous_;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_BRANCH_POINTS_H_

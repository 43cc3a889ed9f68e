#include "bench/loadgen/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/loadgen/kv_cache.h"
#include "bench/loadgen/slot_ledger.h"

namespace statecache::loadgen {

absl::StatusOr<Policy> ParsePolicy(absl::string_view name) {
  if (name == "statecache") return Policy::kStateCache;
  if (name == "ladder") return Policy::kLadder;
  if (name == "none") return Policy::kNone;
  if (name == "prompt-end") return Policy::kPromptEnd;
  if (name == "junction") return Policy::kJunction;
  if (name == "every-block") return Policy::kEveryBlock;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown policy '", name,
                   "' (statecache, ladder, none, prompt-end, junction or "
                   "every-block)"));
}

absl::string_view PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kStateCache:
      return "statecache";
    case Policy::kLadder:
      return "ladder";
    case Policy::kNone:
      return "none";
    case Policy::kPromptEnd:
      return "prompt-end";
    case Policy::kJunction:
      return "junction";
    case Policy::kEveryBlock:
      return "every-block";
  }
  return "?";
}

double RunResult::hit_ratio() const {
  return kv_hit_tokens == 0 ? 0.0
                            : static_cast<double>(resumed_tokens) /
                                  static_cast<double>(kv_hit_tokens);
}

namespace {

absl::string_view KindName(OpKind kind) {
  switch (kind) {
    case OpKind::kBeginPass:
      return "begin_pass";
    case OpKind::kAdmit:
      return "admit";
    case OpKind::kResumableHit:
      return "resumable_hit";
    case OpKind::kReserve:
      return "reserve";
    case OpKind::kPublish:
      return "publish";
    case OpKind::kCheckpoint:
      return "checkpoint";
    case OpKind::kConsumeFork:
      return "consume_fork";
    case OpKind::kRelease:
      return "release";
    case OpKind::kUnindex:
      return "unindex";
    case OpKind::kClearIndex:
      return "clear_index";
  }
  return "?";
}

// FNV-1a over 64-bit values: the digest of every answer a run saw.
void Mix(uint64_t& h, int64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
}

void MixResult(uint64_t& h, const absl::StatusOr<OperationResult>& r) {
  Mix(h, static_cast<int64_t>(r.status().code()));
  if (!r.ok()) return;
  std::visit(
      [&h](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, BeginPassResult>) {
          Mix(h, v.pins_released);
          for (const SlotMove& m : v.moves) {
            Mix(h, m.index);
            Mix(h, m.from_slot);
            Mix(h, m.to_slot);
          }
        } else if constexpr (std::is_same_v<T, AdmitResult>) {
          for (int64_t s : v.slots) Mix(h, s);
          Mix(h, v.fork_src);
          Mix(h, v.blocks_resumed);
          Mix(h, v.adopted);
        } else if constexpr (std::is_same_v<T, ResumableHitResult>) {
          Mix(h, v.blocks);
        } else if constexpr (std::is_same_v<T, ReserveResult>) {
          for (const MidstepReservation& m : v.reservations) {
            Mix(h, m.slot);
            Mix(h, m.position);
            Mix(h, m.hash);
          }
        } else if constexpr (std::is_same_v<T, PublishResult>) {
          Mix(h, v.published);
        } else if constexpr (std::is_same_v<T, ForkCheckpointResult>) {
          Mix(h, v.state_slot);
          Mix(h, v.fork_src);
          Mix(h, v.kept);
        } else if constexpr (std::is_same_v<T, ConsumeForkResult>) {
          Mix(h, v.fork_src);
        } else if constexpr (std::is_same_v<T, ReleaseResult>) {
          Mix(h, v.slots_released);
        } else if constexpr (std::is_same_v<T, UnindexResult>) {
          Mix(h, v.orphaned);
        }
      },
      *r);
}

// Block `b` of `t`'s prompt-then-reply token stream: a prompt block, or one
// its reply completes.
int64_t KvBlockHash(const Turn& t, int64_t b) {
  const int64_t n = static_cast<int64_t>(t.blocks.size());
  return b < n ? t.blocks[b] : t.output_blocks[b - n];
}

// One request: a turn of a session, from arrival to release.
struct Request {
  int64_t key = 0;
  std::string id;
  int32_t session = 0;
  int32_t turn = 0;
  const Turn* spec = nullptr;
  int64_t arrival_us = 0;
  // The prompt's last full-block boundary (its anchor), in tokens.
  int64_t anchor = 0;

  // Once admitted.
  int64_t kv_hit = 0;        // leading blocks the KV cache held
  int64_t kv_refs = 0;       // leading blocks this request references
                             // (prompt, then reply: KvBlockHash)
  int64_t query_blocks = 0;  // what resumable_hit said
  int64_t pos = 0;           // tokens whose state is committed
  bool prefilled = false;
  int64_t decode_left = 0;
  // The next forward including this request reads a fork source.
  bool fork_pending = false;
  bool first_chunk = true;
  // Placement advice (kStateCache): where the continuation starts, in
  // blocks (each boundary the decode reaches past it is checkpointed); 0:
  // none.
  int64_t continuation_blocks = 0;
  std::vector<int64_t> wanted;  // checkpoint positions (tokens), ascending
  size_t next_wanted = 0;

  // This pass.
  int64_t allowance = 0;  // tokens the pass gave it
  bool in_forward = false;
  int64_t chunk_end = 0;
  std::vector<MidstepPosition> positions;  // reserved inside the chunk
  int64_t reserved = 0;                    // reservations the daemon made
};

// What each operation of a pass is for, to read its result.
struct OpContext {
  OpKind kind;
  Request* request = nullptr;
};

class Simulation {
 public:
  Simulation(const Workload& workload, const SchedulerOptions& options,
             const PoolConfig& pool, StepTarget& target)
      : w_(workload),
        o_(options),
        pool_(pool),
        target_(target),
        bs_(workload.hash_block_size),
        forks_(pool.transfer.kind == "fork"),
        midstep_(forks_ && pool.transfer.readable_midstep &&
                 (options.policy == Policy::kStateCache ||
                  options.policy == Policy::kLadder ||
                  options.policy == Policy::kEveryBlock)),
        all_known_(options.policy == Policy::kJunction ||
                   options.policy == Policy::kEveryBlock),
        kv_(options.kv_blocks) {
    children_.resize(workload.sessions.size());
    for (const Session& s : workload.sessions) {
      if (s.parent < 0) {
        eligible_.insert(s.id);
      } else {
        children_[s.parent].emplace_back(s.parent_turn, s.id);
      }
    }
  }

  absl::StatusOr<RunResult> Run() {
    const auto wall_start = std::chrono::steady_clock::now();
    wall_start_ = wall_start;
    if (o_.clear_index) {
      Pass pass;
      pass.ops.push_back(PassOp{.kind = OpKind::kClearIndex});
      double seconds = 0;
      absl::StatusOr<StepResults> r = target_.Run(pass, &seconds);
      if (!r.ok()) return StepError(r.status());
      if (r->results.size() != 1 || !r->results[0].ok()) {
        return absl::InternalError("clear_index refused");
      }
    }
    int32_t idle_passes = 0;
    while (true) {
      Activate();
      Arrive();
      if (running_.empty() && waiting_.empty()) {
        if (arrivals_.empty()) {
          if (finished_sessions_ == static_cast<int64_t>(w_.sessions.size())) {
            break;
          }
          return absl::InternalError(
              "simulation stuck: sessions left but nothing to run");
        }
        now_us_ = arrivals_.begin()->first;
        continue;
      }
      absl::StatusOr<bool> forwarded = RunPass();
      if (!forwarded.ok()) return forwarded.status();
      idle_passes = *forwarded ? 0 : idle_passes + 1;
      if (idle_passes > 16) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "no request could be admitted for ", idle_passes,
            " passes with none running: the daemon refuses admits "
            "(RESOURCE_EXHAUSTED) though this session holds no slot; "
            "another session holds the pool of ",
            pool_.num_slots, " slots?"));
      }
    }
    // What the last forward left to say.
    Pass last;
    contexts_.clear();
    AfterOps(last);
    if (!last.ops.empty()) {
      absl::StatusOr<StepResults> r = RunStep(last);
      if (!r.ok()) return r.status();
      if (absl::Status st = ReadResults(last, *r); !st.ok()) return st;
    }
    result_.simulated_us = now_us_;
    result_.kv_evictions = kv_.evictions();
    result_.kv_over_capacity = kv_.over_capacity();
    result_.wall_seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - wall_start)
                               .count();
    return result_;
  }

 private:
  // ---------------------------------------------------------------- sessions

  void Activate() {
    while (active_ < o_.concurrency && !eligible_.empty()) {
      const int32_t s = *eligible_.begin();
      eligible_.erase(eligible_.begin());
      ++active_;
      NewRequest(s, 0, now_us_);
    }
  }

  void NewRequest(int32_t session, int32_t turn, int64_t after_us) {
    const Turn& spec = w_.sessions[session].turns[turn];
    auto r = std::make_unique<Request>();
    r->key = static_cast<int64_t>(requests_.size());
    r->id = absl::StrCat("s", session, ".t", turn);
    r->session = session;
    r->turn = turn;
    r->spec = &spec;
    r->arrival_us = after_us + spec.think_ms * 1000;
    r->anchor = (spec.prompt_tokens / bs_) * bs_;
    arrivals_.emplace(r->arrival_us, r->key);
    requests_.push_back(std::move(r));
  }

  void Arrive() {
    while (!arrivals_.empty() && arrivals_.begin()->first <= now_us_) {
      waiting_.insert(*arrivals_.begin());
      arrivals_.erase(arrivals_.begin());
    }
  }

  // Turn `r` finished at now_us_: its session's next turn, or the session's
  // end; sub-agents branching off this turn become eligible.
  void TurnFinished(const Request& r) {
    for (const auto& [turn, child] : children_[r.session]) {
      if (turn == r.turn) eligible_.insert(child);
    }
    const Session& s = w_.sessions[r.session];
    if (r.turn + 1 < static_cast<int32_t>(s.turns.size())) {
      NewRequest(r.session, r.turn + 1, now_us_);
    } else {
      --active_;
      ++finished_sessions_;
    }
  }

  // ---------------------------------------------------------------- a pass

  // The previous forward's operations, in the proto's order.
  void AfterOps(Pass& pass) {
    for (Request* r : consume_) {
      pass.ops.push_back(
          PassOp{.kind = OpKind::kConsumeFork, .request_id = r->id});
      contexts_.push_back({OpKind::kConsumeFork, r});
    }
    for (Request* r : publish_) {
      pass.ops.push_back(PassOp{.kind = OpKind::kPublish,
                                .request_id = r->id,
                                .keep_all = all_known_});
      contexts_.push_back({OpKind::kPublish, r});
    }
    for (const Boundary& b : checkpoint_) {
      pass.ops.push_back(PassOp{.kind = OpKind::kCheckpoint,
                                .request_id = b.request->id,
                                .anchor_pos = all_known_ ? b.blocks * bs_ : 0,
                                .boundary_blocks = b.blocks,
                                .hash = b.hash});
      contexts_.push_back({OpKind::kCheckpoint, b.request});
    }
    for (Request* r : release_) {
      pass.ops.push_back(PassOp{.kind = OpKind::kRelease, .request_id = r->id});
      contexts_.push_back({OpKind::kRelease, r});
    }
    if (!unindex_.empty()) {
      pass.ops.push_back(
          PassOp{.kind = OpKind::kUnindex, .hashes = std::move(unindex_)});
      contexts_.push_back({OpKind::kUnindex, nullptr});
    }
    consume_.clear();
    publish_.clear();
    checkpoint_.clear();
    release_.clear();
    unindex_.clear();
  }

  // The chunk `r` prefills with `allowance` tokens: ends at the first
  // checkpoint position inside it unless that can be a midstep one.
  void PlanChunk(Request& r, int64_t allowance, bool midstep) {
    int64_t end = std::min(r.spec->prompt_tokens, r.pos + allowance);
    r.positions.clear();
    for (size_t i = r.next_wanted; i < r.wanted.size() && r.wanted[i] <= end;
         ++i) {
      const int64_t p = r.wanted[i];
      if (p == end) break;  // a fork checkpoint after the forward
      if (!midstep) {
        end = p;
        break;
      }
      r.positions.push_back(
          MidstepPosition{.position = p, .hash = r.spec->blocks[p / bs_ - 1]});
    }
    r.chunk_end = end;
  }

  // Builds and runs one pass; returns whether a forward ran.
  absl::StatusOr<bool> RunPass() {
    Pass pass;
    contexts_.clear();
    // Before the admissions: what releases and checkpoints this Step does
    // to the free count (checkpoints assumed kept).
    int64_t releasing = 0;
    for (Request* r : release_) releasing += ledger_.width(r->key);
    const int64_t checkpointing = static_cast<int64_t>(checkpoint_.size());
    AfterOps(pass);
    pass.ops.push_back(PassOp{.kind = OpKind::kBeginPass});
    contexts_.push_back({OpKind::kBeginPass, nullptr});

    // The running batch: decoders, then prefill chunks in admission order
    // (a request whose next forward reads a fork always gets a chunk).
    int64_t budget = o_.max_batch_tokens;
    for (Request* r : running_) {
      r->in_forward = r->prefilled;
      if (r->prefilled) --budget;
    }
    for (Request* r : running_) {
      if (r->prefilled) continue;
      int64_t allowance = std::min(o_.chunk_tokens, budget);
      if (r->fork_pending) allowance = std::max<int64_t>(allowance, 1);
      if (allowance <= 0) continue;
      PlanChunk(*r, allowance, midstep_ && !r->first_chunk);
      r->in_forward = true;
      budget -= r->chunk_end - r->pos;
    }

    // Admissions, in arrival order, while slots and tokens last.
    int64_t free_slots = pool_.num_slots - (ledger_.live_slots() - releasing) -
                         ledger_.deferred_pins() - checkpointing;
    std::vector<Request*> admitting;
    while (!waiting_.empty() && budget > 0 && free_slots >= o_.width) {
      Request& r = *requests_[waiting_.begin()->second];
      const Turn& t = *r.spec;
      int64_t hit = kv_.LeadingHit(t.blocks);
      // At least one token is computed: the forward produces the next.
      if (hit * bs_ >= t.prompt_tokens) hit = (t.prompt_tokens - 1) / bs_;
      const bool resumes = o_.policy != Policy::kNone && hit > 0;
      if (resumes) {
        pass.ops.push_back(PassOp{.kind = OpKind::kResumableHit,
                                  .num_tokens = t.prompt_tokens,
                                  .block_hashes = t.blocks,
                                  .kv_hit_blocks = static_cast<int32_t>(hit)});
        contexts_.push_back({OpKind::kResumableHit, &r});
      }
      pass.ops.push_back(
          PassOp{.kind = OpKind::kAdmit,
                 .request_id = r.id,
                 .width = o_.width,
                 .num_tokens = t.prompt_tokens,
                 .anchor_pos = o_.policy == Policy::kNone ? 0 : r.anchor,
                 .block_hashes = t.blocks,
                 .kv_hit_blocks = resumes ? static_cast<int32_t>(hit) : 0});
      contexts_.push_back({OpKind::kAdmit, &r});
      r.kv_hit = hit;
      r.query_blocks = 0;
      r.allowance = std::min(o_.chunk_tokens, budget);
      budget -= r.allowance;
      free_slots -= o_.width + (resumes ? 1 : 0);
      waiting_.erase(waiting_.begin());
      admitting.push_back(&r);
    }

    // Midstep checkpoints the forward will write.
    for (Request* r : running_) {
      r->reserved = 0;
      if (!r->in_forward || r->prefilled || r->positions.empty()) continue;
      pass.ops.push_back(PassOp{.kind = OpKind::kReserve,
                                .request_id = r->id,
                                .positions = r->positions});
      contexts_.push_back({OpKind::kReserve, r});
      result_.reserve_positions += static_cast<int64_t>(r->positions.size());
    }

    absl::StatusOr<StepResults> results = RunStep(pass);
    if (!results.ok()) return results.status();
    if (absl::Status st = ReadResults(pass, *results); !st.ok()) return st;
    ++result_.passes;

    // Newly admitted requests: their first chunk, now that the admit said
    // where they resume.
    for (Request* r : admitting) {
      if (!admitted_.contains(r->key)) continue;
      PlanChunk(*r, r->allowance, /*midstep=*/false);
      r->in_forward = true;
    }
    return Forward();
  }

  absl::StatusOr<StepResults> RunStep(const Pass& pass) {
    if (static_cast<int64_t>(pass.ops.size()) > pool_.max_operations_per_step) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a pass of ", pass.ops.size(), " operations exceeds the daemon's ",
          pool_.max_operations_per_step, " per step (lower --concurrency)"));
    }
    if (o_.realtime) {
      std::this_thread::sleep_until(wall_start_ +
                                    std::chrono::microseconds(now_us_));
    }
    double seconds = 0;
    absl::StatusOr<StepResults> results = target_.Run(pass, &seconds);
    if (!results.ok()) return StepError(results.status());
    if (results->results.size() != pass.ops.size()) {
      return absl::InternalError(
          absl::StrCat("a step of ", pass.ops.size(), " operations got ",
                       results->results.size(), " results"));
    }
    result_.step_seconds.push_back(seconds);
    result_.operations += static_cast<int64_t>(pass.ops.size());
    for (const auto& r : results->results) MixResult(result_.digest, r);
    return results;
  }

  static absl::Status StepError(const absl::Status& status) {
    return absl::Status(status.code(),
                        absl::StrCat("Step failed: ", status.message()));
  }

  absl::Status Refused(size_t index, const PassOp& op,
                       const absl::Status& status) {
    return absl::Status(
        status.code(),
        absl::StrCat("pass ", result_.passes, ": operation ", index, " (",
                     KindName(op.kind),
                     op.request_id.empty() ? "" : " of request ", op.request_id,
                     ") refused unexpectedly: ", status.ToString()));
  }

  template <typename T>
  absl::StatusOr<T> Get(const StepResults& results, size_t i,
                        const PassOp& op) {
    absl::StatusOr<T> r = results.Get<T>(i);
    if (!r.ok()) return Refused(i, op, r.status());
    return r;
  }

  absl::Status ReadResults(const Pass& pass, const StepResults& results) {
    for (size_t i = 0; i < pass.ops.size(); ++i) {
      const PassOp& op = pass.ops[i];
      Request* r = contexts_[i].request;
      switch (op.kind) {
        case OpKind::kConsumeFork: {
          auto got = Get<ConsumeForkResult>(results, i, op);
          if (!got.ok()) return got.status();
          ledger_.ConsumedFork(r->key);
          break;
        }
        case OpKind::kPublish: {
          auto got = Get<PublishResult>(results, i, op);
          if (!got.ok()) return got.status();
          result_.published += got->published;
          break;
        }
        case OpKind::kCheckpoint: {
          auto got = Get<ForkCheckpointResult>(results, i, op);
          if (!got.ok()) return got.status();
          ++result_.checkpoints_sent;
          if (got->kept) {
            ++result_.checkpoints_kept;
            ledger_.Checkpointed(r->key, got->fork_src);
            r->fork_pending = true;
          }
          break;
        }
        case OpKind::kRelease: {
          auto got = Get<ReleaseResult>(results, i, op);
          if (!got.ok()) return got.status();
          ledger_.Released(r->key);
          break;
        }
        case OpKind::kUnindex: {
          auto got = Get<UnindexResult>(results, i, op);
          if (!got.ok()) return got.status();
          result_.unindexed += static_cast<int64_t>(op.hashes.size());
          result_.orphaned += got->orphaned;
          break;
        }
        case OpKind::kBeginPass: {
          auto got = Get<BeginPassResult>(results, i, op);
          if (!got.ok()) return got.status();
          const int32_t mine = ledger_.BeginPass();
          if (got->pins_released != mine) {
            return absl::InternalError(absl::StrCat(
                "pass ", result_.passes, ": begin_pass released ",
                got->pins_released, " pins; this scheduler's ledger says ",
                mine,
                " (the daemon and the load generator disagree on the "
                "pin clock)"));
          }
          if (!got->moves.empty()) {
            return absl::FailedPreconditionError(
                "the pool was resized during the run (begin_pass reports "
                "slot moves); rerun without resizing");
          }
          break;
        }
        case OpKind::kResumableHit: {
          auto got = Get<ResumableHitResult>(results, i, op);
          if (!got.ok()) return got.status();
          r->query_blocks = got->blocks;
          break;
        }
        case OpKind::kAdmit: {
          absl::StatusOr<AdmitResult> got = results.Get<AdmitResult>(i);
          if (absl::IsResourceExhausted(got.status())) {
            ++result_.admit_retries;
            waiting_.emplace(r->arrival_us, r->key);
            break;
          }
          if (!got.ok()) return Refused(i, op, got.status());
          Admitted(*r, *got);
          break;
        }
        case OpKind::kReserve: {
          auto got = Get<ReserveResult>(results, i, op);
          if (!got.ok()) return got.status();
          r->reserved = static_cast<int64_t>(got->reservations.size());
          result_.reservations += r->reserved;
          break;
        }
        case OpKind::kClearIndex:
          break;
      }
    }
    return absl::OkStatus();
  }

  void Admitted(Request& r, const AdmitResult& a) {
    const Turn& t = *r.spec;
    ++result_.admits;
    ++result_.requests;
    result_.prompt_tokens += t.prompt_tokens;
    result_.kv_hit_tokens += r.kv_hit * bs_;
    result_.resumed_tokens += a.blocks_resumed * bs_;
    result_.resumed_blocks += a.blocks_resumed;
    result_.query_blocks += r.query_blocks;
    if (a.blocks_resumed > 0) {
      if (a.adopted) {
        ++result_.resumes_adopt;
      } else {
        ++result_.resumes_fork;
      }
    }
    ledger_.Admitted(r.key, o_.width, a.adopted ? -1 : a.fork_src);
    r.pos = a.blocks_resumed * bs_;
    r.fork_pending = !a.adopted && a.fork_src >= 0;
    r.first_chunk = true;
    // The KV blocks of the hit are this request's from now on.
    for (int64_t b = 0; b < r.kv_hit; ++b) kv_.Acquire(t.blocks[b]);
    r.kv_refs = r.kv_hit;
    // Checkpoint positions past the resume point.
    r.wanted.clear();
    r.next_wanted = 0;
    r.continuation_blocks = 0;
    if (forks_ && o_.policy != Policy::kNone) {
      // Every `blocks`-th boundary of the prefill past the resume point.
      auto ladder = [&](int64_t blocks) {
        for (int64_t p = blocks * bs_; blocks > 0 && p < r.anchor;
             p += blocks * bs_) {
          if (p > r.pos) r.wanted.push_back(p);
        }
      };
      if (o_.policy == Policy::kStateCache) {
        // The daemon's advice: its ladder and branch point, then the
        // continuation from the prompt's end on (DecodeBoundary adds the
        // decode boundaries).
        ladder(a.ladder_blocks);
        if (a.branch_blocks * bs_ > r.pos) {
          r.wanted.push_back(a.branch_blocks * bs_);
        }
        std::sort(r.wanted.begin(), r.wanted.end());
        r.wanted.erase(std::unique(r.wanted.begin(), r.wanted.end()),
                       r.wanted.end());
        r.continuation_blocks = a.continuation_blocks;
      } else if (o_.policy == Policy::kLadder) {
        ladder(o_.ladder_blocks);
      } else if (o_.policy == Policy::kJunction) {
        // Where this prompt stops matching what the KV cache holds.
        const int64_t junction = r.kv_hit * bs_;
        if (junction > r.pos && junction < r.anchor) {
          r.wanted.push_back(junction);
        }
      } else if (o_.policy == Policy::kEveryBlock) {
        for (int64_t p = r.pos + bs_; p < r.anchor; p += bs_) {
          r.wanted.push_back(p);
        }
      }
      if (r.anchor > r.pos) r.wanted.push_back(r.anchor);
    }
    running_.push_back(&r);
    admitted_.insert(r.key);
  }

  // Runs the forward the pass built in simulated time, and what it leaves
  // for the next pass to say. Returns whether anything ran.
  absl::StatusOr<bool> Forward() {
    int64_t prefill = 0;
    bool decodes = false;
    for (Request* r : running_) {
      if (!r->in_forward) continue;
      if (r->prefilled) {
        decodes = true;
      } else {
        prefill += r->chunk_end - r->pos;
      }
    }
    if (prefill == 0 && !decodes) return false;
    now_us_ += prefill * 1000000 / o_.prefill_tokens_per_s +
               (decodes ? decode_us() : 0);
    std::vector<Request*> still;
    still.reserve(running_.size());
    for (Request* r : running_) {
      if (!r->in_forward) {
        still.push_back(r);
        continue;
      }
      r->in_forward = false;
      if (r->fork_pending) {
        consume_.push_back(r);
        r->fork_pending = false;
      }
      bool done = false;
      if (!r->prefilled) {
        done = Prefilled(*r);
      } else {
        done = --r->decode_left == 0;
        if (o_.kv_cache_decode) CacheDecoded(*r);
        DecodeBoundary(*r);
      }
      if (done) {
        Finish(*r);
      } else {
        still.push_back(r);
      }
    }
    running_ = std::move(still);
    if (o_.policy != Policy::kNone) {
      for (int64_t h : kv_.TakeEvicted()) unindex_.push_back(h);
    } else {
      (void)kv_.TakeEvicted();  // no state cache: nothing to tell it
    }
    return true;
  }

  // A prefill chunk ran; returns whether the request is done with it and
  // its output (the last chunk makes the first output token).
  bool Prefilled(Request& r) {
    const Turn& t = *r.spec;
    if (r.reserved > 0) publish_.push_back(&r);
    r.reserved = 0;
    const int64_t full = r.chunk_end / bs_;
    for (int64_t b = r.kv_refs; b < full; ++b) kv_.Acquire(t.blocks[b]);
    r.kv_refs = std::max(r.kv_refs, full);
    result_.prefill_tokens += r.chunk_end - r.pos;
    r.pos = r.chunk_end;
    r.first_chunk = false;
    while (r.next_wanted < r.wanted.size() &&
           r.wanted[r.next_wanted] <= r.pos) {
      if (r.wanted[r.next_wanted] == r.pos) {
        checkpoint_.push_back(Boundary{
            .request = &r, .blocks = full, .hash = t.blocks[full - 1]});
      }
      ++r.next_wanted;
    }
    if (r.pos < t.prompt_tokens) return false;
    r.prefilled = true;
    r.decode_left = t.output_tokens - 1;
    return r.decode_left == 0;
  }

  // A decode step ran: the blocks of the reply it filled join the KV cache.
  // After the forward that left decode_left tokens to sample, the request
  // has computed prompt + (output - 1 - decode_left) tokens: every output
  // token but the ones still to come and the last one sampled.
  void CacheDecoded(Request& r) {
    const Turn& t = *r.spec;
    const int64_t computed =
        t.prompt_tokens + (t.output_tokens - 1 - r.decode_left);
    const int64_t full = std::min<int64_t>(
        computed / bs_,
        static_cast<int64_t>(t.blocks.size() + t.output_blocks.size()));
    for (int64_t b = r.kv_refs; b < full; ++b) kv_.Acquire(KvBlockHash(t, b));
    r.kv_refs = std::max(r.kv_refs, full);
  }

  // A decode step ran: a request following the daemon's advice
  // checkpoints its continuation at each block boundary its state reaches
  // (prompt + the output tokens fed back so far), under the hash of the
  // block of prompt and reply ending there.
  void DecodeBoundary(Request& r) {
    if (r.continuation_blocks == 0 || !forks_) return;
    const Turn& t = *r.spec;
    const int64_t computed =
        t.prompt_tokens + (t.output_tokens - 1 - r.decode_left);
    if (computed % bs_ != 0) return;
    const int64_t blocks = computed / bs_;
    if (blocks <= r.continuation_blocks ||
        blocks >
            static_cast<int64_t>(t.blocks.size() + t.output_blocks.size())) {
      return;
    }
    checkpoint_.push_back(Boundary{
        .request = &r, .blocks = blocks, .hash = KvBlockHash(t, blocks - 1)});
  }

  void Finish(Request& r) {
    release_.push_back(&r);
    // Last block first: the reply's, then the prompt's.
    const Turn& t = *r.spec;
    const int64_t n = static_cast<int64_t>(t.blocks.size());
    if (r.kv_refs > n) {
      kv_.Release(absl::MakeConstSpan(t.output_blocks).first(r.kv_refs - n));
    }
    kv_.Release(absl::MakeConstSpan(t.blocks).first(std::min(r.kv_refs, n)));
    result_.output_tokens += r.spec->output_tokens;
    admitted_.erase(r.key);
    TurnFinished(r);
  }

  int64_t decode_us() const {
    return static_cast<int64_t>(o_.decode_ms_per_token * 1000 + 0.5);
  }

  struct Boundary {
    Request* request;
    int64_t blocks;
    int64_t hash;
  };

  const Workload& w_;
  const SchedulerOptions o_;
  const PoolConfig pool_;
  StepTarget& target_;
  const int64_t bs_;
  const bool forks_;
  const bool midstep_;
  // Every checkpoint is filed as known (checkpoint anchor_pos, publish
  // keep_all): the engine baselines' one LRU.
  const bool all_known_;
  std::chrono::steady_clock::time_point wall_start_;

  KvCache kv_;
  SlotLedger ledger_;
  // Per session: (its turn, sub-agent) pairs branching off it.
  std::vector<std::vector<std::pair<int32_t, int32_t>>> children_;
  std::set<int32_t> eligible_;  // not started yet, may start
  int32_t active_ = 0;
  int64_t finished_sessions_ = 0;

  std::vector<std::unique_ptr<Request>> requests_;  // by key
  // (arrival, key): not arrived yet; arrived and waiting for admission.
  std::set<std::pair<int64_t, int64_t>> arrivals_;
  std::set<std::pair<int64_t, int64_t>> waiting_;
  std::vector<Request*> running_;  // admission order
  std::set<int64_t> admitted_;

  // What the last forward left for the next Step.
  std::vector<Request*> consume_;
  std::vector<Request*> publish_;
  std::vector<Boundary> checkpoint_;
  std::vector<Request*> release_;
  std::vector<int64_t> unindex_;

  std::vector<OpContext> contexts_;
  int64_t now_us_ = 0;
  RunResult result_;
};

}  // namespace

absl::Status ValidateOptions(const SchedulerOptions& options,
                             int64_t hash_block_size) {
  if (options.concurrency < 1 || options.chunk_tokens < 1 ||
      options.max_batch_tokens < 1 || options.ladder_blocks < 0 ||
      options.kv_blocks < 1 || options.prefill_tokens_per_s < 1 ||
      options.decode_ms_per_token < 0 || options.width < 1) {
    return absl::InvalidArgumentError(
        "concurrency, chunk_tokens, max_batch_tokens, kv_blocks, "
        "prefill_tokens_per_s and width must be >= 1; ladder_blocks and "
        "decode_ms_per_token >= 0");
  }
  if (options.chunk_tokens % hash_block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_tokens (", options.chunk_tokens,
        ") must be a multiple of the hash block size (", hash_block_size, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RunResult> Simulate(const Workload& workload,
                                   const SchedulerOptions& options,
                                   const PoolConfig& pool, StepTarget& target) {
  if (absl::Status st = ValidateOptions(options, workload.hash_block_size);
      !st.ok()) {
    return st;
  }
  Simulation sim(workload, options, pool, target);
  return sim.Run();
}

}  // namespace statecache::loadgen

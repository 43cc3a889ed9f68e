#include "bench/rpc/passes.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "proto/packed_form.h"

namespace statecache::bench {

struct Scheduler::ListPassWriter {
  v1::StepRequest* req;
  size_t size() const { return static_cast<size_t>(req->operations_size()); }
  void BeginPass() { req->add_operations()->mutable_begin_pass(); }
  void Release(const std::string& id) {
    req->add_operations()->mutable_release()->set_request_id(id);
  }
  void ConsumeFork(const std::string& id) {
    req->add_operations()->mutable_consume_fork()->set_request_id(id);
  }
  void Checkpoint(const std::string& id, int64_t blocks, int64_t hash) {
    v1::Checkpoint* c = req->add_operations()->mutable_checkpoint();
    c->set_request_id(id);
    c->set_boundary_blocks(blocks);
    c->set_hash(hash);
  }
  void Admit(const std::string& id, int32_t width, int64_t num_tokens,
             int64_t anchor_pos, const std::vector<int64_t>& hashes,
             int32_t kv_hit) {
    v1::Admit* a = req->add_operations()->mutable_admit();
    a->set_request_id(id);
    a->set_width(width);
    a->set_num_tokens(num_tokens);
    a->set_anchor_pos(anchor_pos);
    a->mutable_block_hashes()->Add(hashes.begin(), hashes.end());
    a->set_kv_hit_blocks(kv_hit);
  }
  void ResumableHit(int64_t num_tokens, const std::vector<int64_t>& hashes,
                    int32_t kv_hit) {
    v1::ResumableHit* q = req->add_operations()->mutable_resumable_hit();
    q->set_num_tokens(num_tokens);
    q->mutable_block_hashes()->Add(hashes.begin(), hashes.end());
    q->set_kv_hit_blocks(kv_hit);
  }
};

template <typename Out>
void Scheduler::BuildPass(Out& out) {
  out.BeginPass();
  if (ops_ == 1) return;
  auto size = [&] { return static_cast<int>(out.size()); };
  // Releases of the oldest running requests, once the batch is full.
  const int to_release = std::min<int>(
      admits_,
      std::max<int>(0, static_cast<int>(running_.size()) + admits_ - batch_));
  for (int i = 0; i < to_release; ++i) {
    out.Release(running_.front().id);
    running_.erase(running_.begin());
  }
  // Forks consumed and checkpoints for the running batch.
  for (Running& r : running_) {
    if (size() + 2 > ops_ - admits_) break;
    out.ConsumeFork(r.id);
    Conversation& conv = convs_[r.conv];
    conv.hashes.push_back(static_cast<int64_t>(
        (static_cast<uint64_t>(conv.hashes.back()) * 1000003 + 17) >> 1));
    out.Checkpoint(r.id, static_cast<int64_t>(conv.hashes.size()),
                   conv.hashes.back());
  }
  // Admissions: a new turn extends a conversation's prompt. admits_ per
  // pass in the steady state; more while the batch is filling up.
  const int want =
      std::max<int>(admits_, batch_ - static_cast<int>(running_.size()));
  for (int k = 0; k < want && size() < ops_; ++k) {
    const size_t ci = rng_() % convs_.size();
    Conversation& conv = convs_[ci];
    if (conv.hashes.empty())
      conv.hashes.push_back(static_cast<int64_t>(rng_() >> 1));
    if (conv.hashes.size() > 32)
      conv.hashes.erase(conv.hashes.begin() + 1, conv.hashes.end() - 8);
    const int kv_hit = static_cast<int>(conv.hashes.size());
    conv.hashes.push_back(static_cast<int64_t>(rng_() >> 1));
    const std::string id = absl::StrCat("r", next_id_++);
    out.Admit(id, 1, static_cast<int64_t>(conv.hashes.size()) * kBlock + 7,
              static_cast<int64_t>(conv.hashes.size()) * kBlock, conv.hashes,
              kv_hit);
    running_.push_back(Running{id, ci});
  }
  // Whatever room is left: the queries a scheduler makes while it decides
  // what to admit next.
  while (size() < ops_) {
    const Conversation& conv = convs_[rng_() % convs_.size()];
    out.ResumableHit(static_cast<int64_t>(conv.hashes.size()) * kBlock + 7,
                     conv.hashes, static_cast<int32_t>(conv.hashes.size()));
  }
}

v1::StepRequest Scheduler::NextPass(bool packed) {
  v1::StepRequest req;
  req.set_session_id(session_);
  ListPassWriter out{&req};
  BuildPass(out);
  if (packed) {  // the same pass in columns, by the codec
    if (!PackOperations(req.operations(), req.mutable_packed()).ok()) {
      std::abort();
    }
    req.clear_operations();
  }
  return req;
}

StepBuilder Scheduler::NextBuilder() {
  StepBuilder b;
  BuildPass(b);
  return b;
}

std::string Attach(v1::StateCache::Stub& stub) {
  v1::AttachRequest req;
  req.mutable_identity()->set_model_id("bench");
  req.mutable_identity()->set_hash_block_size(kBlock);
  v1::AttachResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = stub.Attach(&ctx, req, &resp);
  if (!s.ok()) {
    std::fprintf(stderr, "attach: %s\n", s.error_message().c_str());
    std::exit(1);
  }
  return resp.session_id();
}

void Detach(v1::StateCache::Stub& stub, const std::string& session) {
  v1::DetachRequest req;
  req.set_session_id(session);
  v1::DetachResponse resp;
  grpc::ClientContext ctx;
  (void)stub.Detach(&ctx, req, &resp);
}

namespace {

std::atomic<int64_t> g_refused{0};
std::once_flag g_first_once;
std::string g_first_refusal;

}  // namespace

void CheckStep(const v1::StepResponse& resp) {
  auto check = [](uint32_t code, const std::string& message) {
    if (code != 0 && code != 8 /*RESOURCE_EXHAUSTED*/) {
      g_refused.fetch_add(1);
      std::call_once(g_first_once, [&] {
        g_first_refusal = absl::StrCat(code, " ", message);
      });
    }
  };
  for (const auto& r : resp.results()) check(r.code(), r.message());
  const v1::PackedResults& packed = resp.packed_results();
  int refusal = 0;
  for (uint32_t code : packed.codes()) {
    if (code != 0) check(code, packed.messages(refusal++));
  }
}

bool ReportRefusals() {
  const int64_t refused = g_refused.load();
  if (refused == 0) return false;
  std::printf("WARNING: %lld operations refused (first: %s)\n",
              static_cast<long long>(refused), g_first_refusal.c_str());
  return true;
}

}  // namespace statecache::bench

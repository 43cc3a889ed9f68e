// slot_holder: a scheduler that takes slots and then hangs, for the test that
// SIGKILLs a client holding slots (client_crash_test.cc).
//
//   slot_holder --address=unix:/path --requests=3 --width=2
//
// Attaches with the integration tests' identity (the client library renews
// the lease in the background), admits `requests` requests of `width` slots,
// files a fork checkpoint of the first one (and consumes the fork: the pin
// stays on the session's clock), prints
//   held SESSION_ID CHECKPOINT_HASH CHECKPOINT_SLOT
// on stdout and blocks until it is killed. Any failure: a message on stderr
// and exit code 1.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "client/statecache_client.h"
#include "tests/integration/test_util.h"

namespace {

int Fail(std::string_view what, const absl::Status& status) {
  std::fprintf(stderr, "slot_holder: %.*s: %s\n", static_cast<int>(what.size()),
               what.data(), status.ToString().c_str());
  return 1;
}

int Main(int argc, char** argv) {
  using namespace statecache;
  std::string address;
  int requests = 3;
  int width = testing::kWidth;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--address=")) {
      address = std::string(arg);
    } else if (absl::ConsumePrefix(&arg, "--requests=")) {
      if (!absl::SimpleAtoi(arg, &requests)) return 2;
    } else if (absl::ConsumePrefix(&arg, "--width=")) {
      if (!absl::SimpleAtoi(arg, &width)) return 2;
    } else {
      std::fprintf(stderr, "slot_holder: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  auto client = Client::Connect(address);
  if (!client.ok()) return Fail("connect", client.status());
  auto session = (*client)->Attach(testing::TestIdentity(), "slot-holder");
  if (!session.ok()) return Fail("attach", session.status());

  std::vector<int64_t> hashes =
      testing::ChainedHashes({424242, 424243, 424244});
  StepBuilder step;
  step.BeginPass();
  for (int r = 0; r < requests; ++r) {
    step.Admit(absl::StrCat("held-", r), width, /*num_tokens=*/200,
               /*anchor_pos=*/192, hashes, /*kv_hit_blocks=*/0);
  }
  // The first request's committed state reached block 3: file it. Then its
  // next forward was issued (consume_fork), so the checkpoint's pin is held
  // by the session's pin clock alone when the process dies.
  step.Checkpoint("held-0", 3, hashes[2]);
  const size_t checkpoint_op = step.size() - 1;
  step.ConsumeFork("held-0");
  auto results = (*client)->Step(step);
  if (!results.ok()) return Fail("step", results.status());
  for (size_t i = 0; i < results->results.size(); ++i) {
    if (!results->results[i].ok()) {
      return Fail(absl::StrCat("operation ", i), results->results[i].status());
    }
  }
  auto checkpoint = results->Get<ForkCheckpointResult>(checkpoint_op);
  if (!checkpoint.ok() || !checkpoint->kept) {
    return Fail("checkpoint", absl::InternalError("not kept"));
  }
  const std::string line =
      absl::StrCat("held ", session->session_id, " ", hashes[2], " ",
                   checkpoint->fork_src, "\n");
  if (::write(STDOUT_FILENO, line.data(), line.size()) !=
      static_cast<ssize_t>(line.size())) {
    return 1;
  }
  // Hold everything until killed; the client library keeps the lease.
  for (;;) ::pause();
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }

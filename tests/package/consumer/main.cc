// Uses the installed client the way a scheduler would include and link it;
// needs no daemon (it checks that a missing one is reported as UNAVAILABLE).
#include <iostream>

#include "client/statecache_client.h"

int main() {
  statecache::StepBuilder step;
  const int64_t hashes[] = {11, 12};
  step.BeginPass().Admit("r1", 1, 128, 128, hashes, 0).Lookup(12);
  if (step.size() != 3) {
    std::cerr << "StepBuilder: expected 3 operations, got " << step.size()
              << "\n";
    return 1;
  }
  statecache::ClientOptions options;
  options.connect_timeout = absl::Milliseconds(100);
  auto client = statecache::Client::Connect(
      "unix:/nonexistent/statecache-consumer.sock", options);
  if (client.ok() || !absl::IsUnavailable(client.status())) {
    std::cerr << "Connect to a missing daemon: expected UNAVAILABLE, got "
              << client.status() << "\n";
    return 1;
  }
  std::cout << "consumer ok (default address " << statecache::DefaultAddress()
            << ")\n";
  return 0;
}

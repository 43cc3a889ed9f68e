#include "bench/rpc/servers.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/rpc/passes.h"
#include "bench/rpc/platform.h"

namespace statecache::bench {

ServerProcess::ServerProcess(
    const std::function<void(const std::string& address, int ready_fd)>& exec,
    const std::string& server_cpus) {
  std::string tmpl =
      absl::StrCat("/tmp/", program_invocation_short_name, ".XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) std::abort();
  dir_ = tmpl;
  address_ = absl::StrCat("unix:", dir_, "/sc.sock");
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  pid_ = fork();
  if (pid_ == 0) {
    close(fds[0]);
    PinTo(server_cpus, "server_cpus");
    exec(address_, fds[1]);
    _exit(127);
  }
  close(fds[1]);
  char buf[16];
  if (read(fds[0], buf, sizeof buf) <= 0) {
    std::fprintf(stderr, "%s: a server did not become ready\n",
                 program_invocation_short_name);
    std::exit(1);
  }
  close(fds[0]);
}

ServerProcess::~ServerProcess() {
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

Daemon::Daemon(const std::string& binary, const std::string& server_cpus)
    : ServerProcess(
          [&binary](const std::string& address, int ready_fd) {
            const std::string listen = absl::StrCat("--listen=", address);
            const std::string ready = absl::StrCat("--ready_fd=", ready_fd);
            const std::string slots = absl::StrCat("--num_slots=", kSlots);
            execl(binary.c_str(), binary.c_str(), listen.c_str(), ready.c_str(),
                  slots.c_str(), "--model_id=bench", "--lease_ttl=60s",
                  "--metrics_address=127.0.0.1:0", static_cast<char*>(nullptr));
          },
          server_cpus) {}

}  // namespace statecache::bench

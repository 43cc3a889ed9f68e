// ProbeProcess: runs tests/device/region_probe in a child process (fork +
// exec) and talks to it one line at a time over pipes. The probe is found
// at the path the build baked in or, when that is gone (binaries moved by
// tests/gpu/bundle.sh to a GPU machine), beside the running test binary.
#ifndef STATECACHE_TESTS_DEVICE_PROBE_PROCESS_H_
#define STATECACHE_TESTS_DEVICE_PROBE_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace statecache::testing {

class ProbeProcess {
 public:
  explicit ProbeProcess(const std::string& built_path) {
    const std::string path = Locate(built_path);
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) {
      return;
    }
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      execl(path.c_str(), path.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
  }
  ~ProbeProcess() {
    if (in_ != nullptr) fclose(in_);
    if (out_ != nullptr) fclose(out_);
    if (pid_ > 0) {
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  pid_t pid() const { return pid_; }

  // Sends one command, returns the reply line (without '\n'), or
  // "error probe died" when the child is gone.
  std::string Ask(const std::string& command) {
    if (in_ == nullptr || out_ == nullptr) return "error probe not started";
    fprintf(in_, "%s\n", command.c_str());
    fflush(in_);
    std::string reply;
    int c;
    while ((c = fgetc(out_)) != EOF && c != '\n') reply.push_back(char(c));
    if (c == EOF && reply.empty()) return "error probe died";
    return reply;
  }

 private:
  static std::string Locate(const std::string& built_path) {
    if (access(built_path.c_str(), X_OK) == 0) return built_path;
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return built_path;
    std::string sibling(self, static_cast<size_t>(n));
    sibling.resize(sibling.rfind('/') + 1);
    return sibling + built_path.substr(built_path.rfind('/') + 1);
  }

  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
};

}  // namespace statecache::testing

#endif  // STATECACHE_TESTS_DEVICE_PROBE_PROCESS_H_

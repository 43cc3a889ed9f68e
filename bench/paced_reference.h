// The reference's timing script (bench/reference_timing.py --paced) as a
// child process that runs one repetition each time it is asked: the trace is
// loaded and converted once, and a benchmark's repetitions can interleave
// with the script's (pool_bench, reference_bench).
#ifndef STATECACHE_BENCH_PACED_REFERENCE_H_
#define STATECACHE_BENCH_PACED_REFERENCE_H_

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace statecache {

class PacedReference {
 public:
  // `command` runs under /bin/sh -c, reading one line per repetition on
  // stdin and answering one line on stdout.
  explicit PacedReference(const std::string& command) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[0]);
      close(to_child[1]);
      close(from_child[0]);
      close(from_child[1]);
      execl("/bin/sh", "sh", "-c", command.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    to_ = fdopen(to_child[1], "w");
    from_ = fdopen(from_child[0], "r");
  }
  ~PacedReference() {
    std::fclose(to_);  // end of input: the script exits
    std::fclose(from_);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  PacedReference(const PacedReference&) = delete;
  PacedReference& operator=(const PacedReference&) = delete;

  // Runs one repetition; the line the script answered, without its newline,
  // or "" when it answered nothing (it failed: its stderr says why).
  std::string RunOnce() {
    std::fputs("go\n", to_);
    std::fflush(to_);
    char line[512];
    if (std::fgets(line, sizeof line, from_) == nullptr) return "";
    std::string out(line);
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) {
      out.pop_back();
    }
    return out;
  }

 private:
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

}  // namespace statecache

#endif  // STATECACHE_BENCH_PACED_REFERENCE_H_

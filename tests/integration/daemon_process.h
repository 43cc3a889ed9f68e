// Test fixtures that run real processes: the `statecached` daemon on a Unix
// socket in a fresh temporary directory, and any other executable (a client
// that gets SIGKILLed, the daemon given bad flags, openssl) with its output
// captured.
//
// Nothing here sleeps to synchronise. A daemon is "up" when it wrote
// "ready\n" to its --ready_fd pipe; a process is "gone" when waitpid says so
// (waited on through a pidfd, so a wait has a deadline without polling).
//
// Every process started here is killed when its guard goes out of scope
// (SIGTERM, then SIGKILL if it does not exit in time) and is started with
// PR_SET_PDEATHSIG=SIGKILL, so even a crashed test binary leaves no daemon
// behind.
//
// Thread safety: thread-compatible. Spawn from the test's main thread (the
// death signal follows the thread that forked).
#ifndef STATECACHE_TESTS_INTEGRATION_DAEMON_PROCESS_H_
#define STATECACHE_TESTS_INTEGRATION_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace statecache::testing {

// Paths of the binaries under test, from the build (compile definitions);
// $STATECACHE_IT_STATECACHED, if set, names another statecached to test.
std::string StatecachedPath();
std::string SlotHolderPath();

// A directory made with mkdtemp under $TMPDIR (or /tmp), removed with its
// contents on destruction. Kept short: a Unix socket path must fit in 108
// bytes.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Create();
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
  }
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// How a child process ended.
struct ExitInfo {
  bool exited = false;  // normal exit: see code
  int code = -1;
  int signal = 0;  // killed by this signal when !exited
  std::string ToString() const;
};

// A child process. The destructor kills it (SIGTERM, then SIGKILL after a
// grace period) unless it has already been waited for.
class Subprocess {
 public:
  struct Options {
    std::vector<std::string> argv;  // argv[0] is the executable's path
    // Where the child's stdout/stderr go: a file path, or "" for /dev/null.
    std::string stdout_path;
    std::string stderr_path;
    // If true, stdout goes to a pipe read with ReadLine instead.
    bool pipe_stdout = false;
    // If set, the write end of a fresh pipe is passed to the child as an
    // inherited fd and its number is substituted for "{ready_fd}" in argv;
    // read it with ReadLine (the pipe of ReadyFd).
    bool ready_pipe = false;
  };

  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(Options options);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }

  // Reads one line (without '\n') from the stdout pipe (pipe_stdout) or the
  // ready pipe (ready_pipe; `from_ready` true), waiting up to `timeout`.
  // Errors: DEADLINE_EXCEEDED; UNAVAILABLE at EOF (the child closed it or
  // died) before a whole line arrived.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout,
                                       bool from_ready = false);

  // Waits up to `timeout` for the child to exit and reaps it.
  // Errors: DEADLINE_EXCEEDED (still running); FAILED_PRECONDITION (already
  // reaped).
  absl::StatusOr<ExitInfo> Wait(absl::Duration timeout);
  // Sends `signal` (no-op once reaped).
  absl::Status Kill(int signal);
  // SIGTERM, wait up to `grace`, then SIGKILL and wait. Returns how it ended.
  absl::StatusOr<ExitInfo> Terminate(absl::Duration grace = absl::Seconds(10));
  bool reaped() const { return reaped_.has_value(); }

 private:
  Subprocess() = default;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int stdout_fd_ = -1;
  int ready_fd_ = -1;
  std::string stdout_buffer_;
  std::string ready_buffer_;
  std::optional<ExitInfo> reaped_;
};

// Runs a command to completion with stdout and stderr captured.
struct CommandResult {
  ExitInfo exit;
  std::string out;
  std::string err;
};
absl::StatusOr<CommandResult> RunCommand(
    const std::vector<std::string>& argv,
    absl::Duration timeout = absl::Seconds(30));

// statecached on a Unix socket "unix:DIR/statecached.sock".
class DaemonProcess {
 public:
  // Starts statecached with `args` (after --listen, --ready_fd and
  // --metrics_address= (off), which `args` may override) and returns once it
  // wrote "ready". `socket_dir` is the directory of the socket; ""
  // makes a fresh temporary one owned by the DaemonProcess. The daemon's
  // stderr goes to a log file (see log()).
  // Errors: the daemon exited or did not become ready within 30 s (the
  // message carries its log).
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(
      std::vector<std::string> args, std::string socket_dir = "");
  // Kills the daemon if it still runs (SIGTERM, then SIGKILL).
  ~DaemonProcess();

  // "unix:/tmp/statecache-it-XXXXXX/statecached.sock"
  const std::string& address() const { return address_; }
  const std::string& socket_path() const { return socket_path_; }
  const std::string& socket_dir() const { return socket_dir_; }
  pid_t pid() const { return process_->pid(); }
  // The epoch the daemon logged at start ("listening on ADDR epoch=N").
  uint64_t logged_epoch() const { return logged_epoch_; }

  // SIGTERM and wait for the exit (SIGKILL after `grace`). Returns how it
  // ended; a clean shutdown is exited && code == 0.
  absl::StatusOr<ExitInfo> Stop(absl::Duration grace = absl::Seconds(10));
  // Stop() and require a clean shutdown (exit code 0).
  absl::Status StopCleanly();

  // Everything the daemon wrote to stderr so far.
  std::string log() const;
  Subprocess& process() { return *process_; }

 private:
  DaemonProcess() = default;
  std::optional<TempDir> own_dir_;
  std::string socket_dir_;
  std::string socket_path_;
  std::string address_;
  std::string log_path_;
  uint64_t logged_epoch_ = 0;
  std::unique_ptr<Subprocess> process_;
};

// Whole file contents ("" if unreadable).
std::string ReadFileOrEmpty(const std::string& path);

}  // namespace statecache::testing

#endif  // STATECACHE_TESTS_INTEGRATION_DAEMON_PROCESS_H_

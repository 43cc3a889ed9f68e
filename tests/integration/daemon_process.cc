#include "tests/integration/daemon_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace statecache::testing {
namespace {

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

int RemainingMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60'000));
}

ExitInfo FromWaitStatus(int status) {
  ExitInfo info;
  if (WIFEXITED(status)) {
    info.exited = true;
    info.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    info.signal = WTERMSIG(status);
  }
  return info;
}

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::atomic<int> log_counter{0};

}  // namespace

std::string StatecachedPath() {
  // Lets the suite run against another build of the daemon (e.g. a mutant
  // that must make these tests fail, or an installed one).
  if (const char* path = std::getenv("STATECACHE_IT_STATECACHED");
      path != nullptr && path[0] != '\0') {
    return path;
  }
  return STATECACHED_PATH;
}
std::string SlotHolderPath() { return SLOT_HOLDER_PATH; }

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// ------------------------------------------------------------ TempDir

absl::StatusOr<TempDir> TempDir::Create() {
  std::string base = "/tmp";
  if (const char* tmp = std::getenv("TMPDIR");
      tmp != nullptr && tmp[0] == '/' && std::strlen(tmp) < 60) {
    base = tmp;
  }
  std::string templ = base + "/statecache-it-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) return ErrnoError("mkdtemp");
  return TempDir(std::move(templ));
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

// ------------------------------------------------------------ Subprocess

std::string ExitInfo::ToString() const {
  if (exited) return absl::StrCat("exited with code ", code);
  if (signal != 0)
    return absl::StrCat("killed by signal ", signal, " (", strsignal(signal),
                        ")");
  return "unknown end";
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(Options options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("empty argv");
  std::unique_ptr<Subprocess> process(new Subprocess());

  int stdout_pipe[2] = {-1, -1};
  int ready_pipe[2] = {-1, -1};
  if (options.pipe_stdout && ::pipe2(stdout_pipe, O_CLOEXEC) != 0) {
    return ErrnoError("pipe2");
  }
  if (options.ready_pipe && ::pipe2(ready_pipe, O_CLOEXEC) != 0) {
    CloseFd(stdout_pipe[0]);
    CloseFd(stdout_pipe[1]);
    return ErrnoError("pipe2");
  }
  // Everything the child needs is prepared before fork: between fork and
  // exec only async-signal-safe calls are allowed (gRPC threads exist here).
  std::vector<std::string> args = options.argv;
  if (options.ready_pipe) {
    for (std::string& arg : args) {
      arg = absl::StrReplaceAll(arg,
                                {{"{ready_fd}", absl::StrCat(ready_pipe[1])}});
    }
  }
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  auto open_output = [](const std::string& path) {
    return path.empty()
               ? ::open("/dev/null", O_WRONLY | O_CLOEXEC)
               : ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                        0644);
  };
  int out_fd = options.pipe_stdout ? -1 : open_output(options.stdout_path);
  int err_fd = open_output(options.stderr_path);
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if ((!options.pipe_stdout && out_fd < 0) || err_fd < 0 || null_fd < 0) {
    absl::Status status = ErrnoError("open child output");
    for (int* fd : {&out_fd, &err_fd, &null_fd, &stdout_pipe[0],
                    &stdout_pipe[1], &ready_pipe[0], &ready_pipe[1]}) {
      CloseFd(*fd);
    }
    return status;
  }
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) return ErrnoError("fork");
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died already
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(options.pipe_stdout ? stdout_pipe[1] : out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    if (ready_pipe[1] >= 0) ::fcntl(ready_pipe[1], F_SETFD, 0);
    // The test binary blocks no signals, but be explicit for the child.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(argv[0], argv.data());
    static constexpr char kMsg[] = "exec failed\n";
    (void)!::write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
    ::_exit(127);
  }
  process->pid_ = pid;
  CloseFd(out_fd);
  CloseFd(err_fd);
  CloseFd(null_fd);
  CloseFd(stdout_pipe[1]);
  CloseFd(ready_pipe[1]);
  process->stdout_fd_ = stdout_pipe[0];
  process->ready_fd_ = ready_pipe[0];
  process->pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (process->pidfd_ >= 0) ::fcntl(process->pidfd_, F_SETFD, FD_CLOEXEC);
  return process;
}

Subprocess::~Subprocess() {
  if (!reaped_.has_value() && pid_ > 0) {
    absl::StatusOr<ExitInfo> ignored = Terminate(absl::Seconds(5));
    (void)ignored;
  }
  CloseFd(pidfd_);
  CloseFd(stdout_fd_);
  CloseFd(ready_fd_);
}

absl::StatusOr<std::string> Subprocess::ReadLine(absl::Duration timeout,
                                                 bool from_ready) {
  int fd = from_ready ? ready_fd_ : stdout_fd_;
  std::string& buffer = from_ready ? ready_buffer_ : stdout_buffer_;
  if (fd < 0) return absl::FailedPreconditionError("no such pipe");
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (auto nl = buffer.find('\n'); nl != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      return line;
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, RemainingMs(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("poll");
    }
    if (ready == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("no line within ", absl::FormatDuration(timeout),
                       "; got \"", buffer, "\""));
    }
    char chunk[512];
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoError("read");
    }
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat("EOF before a whole line; got \"", buffer, "\""));
    }
    buffer.append(chunk, static_cast<size_t>(n));
  }
}

absl::StatusOr<ExitInfo> Subprocess::Wait(absl::Duration timeout) {
  if (reaped_.has_value()) return *reaped_;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      reaped_ = FromWaitStatus(status);
      CloseFd(pidfd_);
      return *reaped_;
    }
    if (done < 0 && errno != EINTR) return ErrnoError("waitpid");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("pid ", pid_, " still running after ",
                       absl::FormatDuration(timeout)));
    }
    if (pidfd_ >= 0) {
      // Readable once the process has exited: no polling interval.
      pollfd p{pidfd_, POLLIN, 0};
      (void)::poll(&p, 1, RemainingMs(deadline));
    } else {
      // Kernel without pidfd_open: fall back to a short poll interval.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

absl::Status Subprocess::Kill(int signal) {
  if (reaped_.has_value()) return absl::OkStatus();
  if (::kill(pid_, signal) != 0) return ErrnoError("kill");
  return absl::OkStatus();
}

absl::StatusOr<ExitInfo> Subprocess::Terminate(absl::Duration grace) {
  if (reaped_.has_value()) return *reaped_;
  (void)Kill(SIGTERM);
  absl::StatusOr<ExitInfo> info = Wait(grace);
  if (info.ok()) return info;
  (void)Kill(SIGKILL);
  return Wait(absl::Seconds(30));
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout) {
  absl::StatusOr<TempDir> dir = TempDir::Create();
  if (!dir.ok()) return dir.status();
  Subprocess::Options options;
  options.argv = argv;
  options.stdout_path = dir->path() + "/out";
  options.stderr_path = dir->path() + "/err";
  absl::StatusOr<std::unique_ptr<Subprocess>> process =
      Subprocess::Start(options);
  if (!process.ok()) return process.status();
  absl::StatusOr<ExitInfo> exit = (*process)->Wait(timeout);
  if (!exit.ok()) {
    (void)(*process)->Terminate(absl::Seconds(1));
    return absl::DeadlineExceededError(
        absl::StrCat(absl::StrJoin(argv, " "), ": ", exit.status().message()));
  }
  return CommandResult{*exit, ReadFileOrEmpty(options.stdout_path),
                       ReadFileOrEmpty(options.stderr_path)};
}

// ------------------------------------------------------------ DaemonProcess

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(
    std::vector<std::string> args, std::string socket_dir) {
  std::unique_ptr<DaemonProcess> daemon(new DaemonProcess());
  if (socket_dir.empty()) {
    absl::StatusOr<TempDir> dir = TempDir::Create();
    if (!dir.ok()) return dir.status();
    socket_dir = dir->path();
    daemon->own_dir_.emplace(*std::move(dir));
  }
  daemon->socket_dir_ = socket_dir;
  daemon->socket_path_ = socket_dir + "/statecached.sock";
  daemon->address_ = "unix:" + daemon->socket_path_;
  daemon->log_path_ =
      absl::StrCat(socket_dir, "/statecached.", log_counter++, ".log");

  Subprocess::Options options;
  // No metrics endpoint unless a test asks for one: its default TCP port
  // would be shared by every daemon the suite runs at once.
  options.argv = {StatecachedPath(), "--listen=" + daemon->address_,
                  "--ready_fd={ready_fd}", "--metrics_address="};
  for (std::string& arg : args) options.argv.push_back(std::move(arg));
  options.stderr_path = daemon->log_path_;
  options.stdout_path = daemon->log_path_;
  options.ready_pipe = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> process =
      Subprocess::Start(std::move(options));
  if (!process.ok()) return process.status();
  daemon->process_ = *std::move(process);

  absl::StatusOr<std::string> line =
      daemon->process_->ReadLine(absl::Seconds(30), /*from_ready=*/true);
  if (!line.ok() || *line != "ready") {
    absl::StatusOr<ExitInfo> exit = daemon->process_->Wait(absl::Seconds(2));
    return absl::UnavailableError(
        absl::StrCat("statecached did not become ready (",
                     line.ok() ? absl::StrCat("read \"", *line, "\"")
                               : std::string(line.status().message()),
                     "; ", exit.ok() ? exit->ToString() : "still running",
                     "); its log:\n", daemon->log()));
  }
  // "listening on ADDR epoch=N" was written before "ready".
  const std::string log = daemon->log();
  if (auto pos = log.find(" epoch="); pos != std::string::npos) {
    const std::string rest = log.substr(pos + 7);
    (void)absl::SimpleAtoi(rest.substr(0, rest.find_first_of("\n ")),
                           &daemon->logged_epoch_);
  }
  return daemon;
}

DaemonProcess::~DaemonProcess() {
  if (process_ != nullptr && !process_->reaped()) {
    (void)process_->Terminate(absl::Seconds(10));
  }
}

absl::StatusOr<ExitInfo> DaemonProcess::Stop(absl::Duration grace) {
  return process_->Terminate(grace);
}

absl::Status DaemonProcess::StopCleanly() {
  absl::StatusOr<ExitInfo> exit = Stop();
  if (!exit.ok()) return exit.status();
  if (!exit->exited || exit->code != 0) {
    return absl::InternalError(absl::StrCat(
        "statecached did not shut down cleanly: ", exit->ToString(),
        "; its log:\n", log()));
  }
  return absl::OkStatus();
}

std::string DaemonProcess::log() const { return ReadFileOrEmpty(log_path_); }

}  // namespace statecache::testing

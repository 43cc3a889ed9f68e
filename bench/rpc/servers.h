// The server processes the RPC benchmarks time against: statecached as
// deployed, or a server of a tool's own, each on a Unix socket in a
// temporary directory of its own.
#ifndef STATECACHE_BENCH_RPC_SERVERS_H_
#define STATECACHE_BENCH_RPC_SERVERS_H_

#include <sys/types.h>

#include <functional>
#include <string>

namespace statecache::bench {

// A server process: `exec` is given the socket's address and the fd to
// write "ready" to (and close) once serving, and execs the server in the
// child, pinned to `server_cpus` (empty: where the parent runs). The
// constructor returns once the server is ready (it exits 1 if the server
// never is); the destructor stops it (SIGTERM) and removes the directory.
class ServerProcess {
 public:
  ServerProcess(
      const std::function<void(const std::string& address, int ready_fd)>& exec,
      const std::string& server_cpus);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& address() const { return address_; }

 private:
  std::string dir_;
  std::string address_;
  pid_t pid_ = -1;
};

// statecached (`binary`), as deployed but for the pool's size (kSlots) and
// identity (the benchmarks' model, kBlock): metrics on, on a port of its
// own, since the per-operation histograms are work every Step pays.
class Daemon : public ServerProcess {
 public:
  Daemon(const std::string& binary, const std::string& server_cpus);
};

}  // namespace statecache::bench

#endif  // STATECACHE_BENCH_RPC_SERVERS_H_

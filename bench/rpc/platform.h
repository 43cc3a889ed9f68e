// Where the RPC benchmarks run: pinning the client and the servers they
// start to CPUs, and the line that says where a result was measured.
#ifndef STATECACHE_BENCH_RPC_PLATFORM_H_
#define STATECACHE_BENCH_RPC_PLATFORM_H_

#include <sched.h>

#include <optional>
#include <string>

namespace statecache::bench {

// A CPU list as taskset takes it ("0", "0,2", "0-3"), or nullopt when it is
// not one.
std::optional<cpu_set_t> ParseCpuList(const std::string& list);

// Pins the calling thread (and the threads and processes it starts later)
// to the CPUs of `cpus`, if any; exits 2 on a bad list or a refusal, naming
// --`flag_name`.
void PinTo(const std::string& cpus, const char* flag_name);

// The CPUs the calling thread may run on, as a list ("0,1").
std::string AllowedCpus();

// Prints what the ratios depend on besides the code, above a tool's
// tables: the CPUs online, where the client and the servers (`server_cpus`,
// empty: as the client) run, and the guest's halt polling (0 on the
// development VM: an idle vCPU halts at once, and waking it is what
// rpc_calibrate measures).
void PrintPlatform(const std::string& server_cpus);

}  // namespace statecache::bench

#endif  // STATECACHE_BENCH_RPC_PLATFORM_H_

#include "daemon/channel/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace statecache {
namespace {

// An entry being filled in (no mapping starts at address 1).
constexpr uintptr_t kClaimed = 1;

struct Entry {
  std::atomic<uintptr_t> base{0};  // 0: free; kClaimed: being filled in
  std::atomic<size_t> bytes{0};
  std::atomic<bool> faulted{false};
};

Entry g_entries[MappingGuard::kCapacity];
struct sigaction g_previous;
std::once_flag g_install_once;
int g_install_errno = 0;

void OnSigbus(int signal, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Entry& entry : g_entries) {
    const uintptr_t base = entry.base.load(std::memory_order_acquire);
    if (base == 0 || base == kClaimed) continue;
    const size_t bytes = entry.bytes.load(std::memory_order_acquire);
    if (address < base || address - base >= bytes) continue;
    // Zero pages in place of the lost ones: the access is retried and
    // reads zeros; the owner sees the mark and ends the channel.
    void* fixed =
        ::mmap(reinterpret_cast<void*>(base), bytes, PROT_READ | PROT_WRITE,
               MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fixed != MAP_FAILED) {
      entry.faulted.store(true, std::memory_order_release);
      return;
    }
    break;
  }
  // Not ours: as if the guard were not here.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 &&
      g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
      g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(signal);
    return;
  }
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

}  // namespace

absl::Status MappingGuard::Install() {
  std::call_once(g_install_once, [] {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (::sigaction(SIGBUS, &action, &g_previous) != 0) g_install_errno = errno;
  });
  if (g_install_errno != 0) {
    return absl::InternalError(
        absl::StrCat("sigaction(SIGBUS): ", std::strerror(g_install_errno)));
  }
  return absl::OkStatus();
}

int MappingGuard::Register(void* base, size_t bytes) {
  for (int i = 0; i < kCapacity; ++i) {
    Entry& entry = g_entries[i];
    uintptr_t free = 0;
    // Claimed as kClaimed first, so the handler never pairs this base with
    // another mapping's size.
    if (!entry.base.compare_exchange_strong(free, kClaimed,
                                            std::memory_order_acq_rel)) {
      continue;
    }
    entry.bytes.store(bytes, std::memory_order_relaxed);
    entry.faulted.store(false, std::memory_order_relaxed);
    entry.base.store(reinterpret_cast<uintptr_t>(base),
                     std::memory_order_release);
    return i;
  }
  return -1;
}

void MappingGuard::Unregister(int entry) {
  if (entry >= 0) g_entries[entry].base.store(0, std::memory_order_release);
}

bool MappingGuard::Faulted(int entry) {
  return entry >= 0 && g_entries[entry].faulted.load(std::memory_order_acquire);
}

}  // namespace statecache

// ThreadSanitizer's view of absl::Mutex, for the TSan build
// (STATECACHE_TSAN) only: every executable of that build links this file
// (the top-level CMakeLists.txt says how).
//
// Why: Debian's Abseil is built without -fsanitize=thread, so its Mutex
// carries none of the annotations (ABSL_TSAN_MUTEX_*) that tell TSan when
// a lock is taken and given back: its fast path is an atomic in
// uninstrumented code and its slow path a futex. TSan would then see no
// ordering between two critical sections of the same mutex and report
// every guarded field (StateCache's pool and sessions, the metrics'
// counts) as a race: all of them false, none of them ours.
//
// What: the lock, unlock and wait entry points are defined here, so calls
// from this project's code bind to these definitions rather than to the
// shared library's (the executable's symbols come first); each tells TSan
// what Abseil's own annotated build would (a lock taken, a lock given
// back, in which mode) and calls the real one, found with dlsym(RTLD_NEXT).
// Between the pre and post annotations TSan ignores memory accesses and
// synchronisation, as it does inside an annotated Abseil: that covers a
// Condition that another thread's Unlock evaluates for a waiter.
//
// What is not modelled: ReaderLockWhen* and an Await or CondVar::Wait under
// a reader lock (taken as writer-mode here; nothing this build tests uses
// them). Calls made from inside Abseil's own libraries (absl::Notification,
// for one) still reach the uninstrumented versions: tests here use the
// standard library's primitives instead.
//
// Also here: the TSan options every binary of this build runs with (a report
// fails the run; see __tsan_default_options).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#define STATECACHE_STR2(x) #x
#define STATECACHE_STR(x) STATECACHE_STR2(x)

namespace {

// The real symbol: "_ZN4absl" + <inline namespace> + `rest`, the Itanium
// mangling of absl::<ns>::rest (NS0_ in `rest` stands for absl::<ns>).
void* Real(const char* rest) {
  static_assert(ABSL_OPTION_USE_INLINE_NAMESPACE == 1,
                "the mangled names below assume Abseil's inline namespace");
  const std::string ns = STATECACHE_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name =
      "_ZN4absl" + std::to_string(ns.size()) + ns + std::string(rest);
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "absl_mutex_tsan: %s not found: %s\n", name.c_str(),
                 dlerror());
    std::abort();
  }
  return fn;
}

template <typename Fn>
Fn RealAs(const char* rest) {
  return reinterpret_cast<Fn>(Real(rest));
}

using absl::Condition;
using absl::CondVar;
using absl::Mutex;

constexpr unsigned kRead = __tsan_mutex_read_lock;
constexpr unsigned kTry = __tsan_mutex_try_lock;
constexpr unsigned kTryFailed = __tsan_mutex_try_lock_failed;

// Waits in progress on this thread: Abseil's wait entry points call one
// another (its AwaitWithTimeout calls AwaitWithDeadline, through the PLT,
// so the definition below), and only the outermost one says what happens
// to the lock (twice would be an unlock of an unlocked mutex to TSan).
thread_local int waiting_depth = 0;

// The lock is held (in writer mode) on both sides of `wait`, which gives it
// back and takes it again inside: an unlock, then a lock.
template <typename F>
auto Waiting(Mutex* mu, F wait) {
  if (waiting_depth > 0) return wait();
  ++waiting_depth;
  __tsan_mutex_pre_unlock(mu, 0);
  auto result = wait();
  __tsan_mutex_post_unlock(mu, 0);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
  --waiting_depth;
  return result;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

Mutex::~Mutex() {
  static const auto real = RealAs<void (*)(Mutex*)>("5MutexD2Ev");
  __tsan_mutex_destroy(this, 0);
  real(this);
}

void Mutex::Lock() {
  static const auto real = RealAs<void (*)(Mutex*)>("5Mutex4LockEv");
  __tsan_mutex_pre_lock(this, 0);
  real(this);
  __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::Unlock() {
  static const auto real = RealAs<void (*)(Mutex*)>("5Mutex6UnlockEv");
  __tsan_mutex_pre_unlock(this, 0);
  real(this);
  __tsan_mutex_post_unlock(this, 0);
}

bool Mutex::TryLock() {
  static const auto real = RealAs<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  __tsan_mutex_pre_lock(this, kTry);
  const bool locked = real(this);
  __tsan_mutex_post_lock(this, locked ? kTry : kTry | kTryFailed, 0);
  return locked;
}

void Mutex::ReaderLock() {
  static const auto real = RealAs<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  __tsan_mutex_pre_lock(this, kRead);
  real(this);
  __tsan_mutex_post_lock(this, kRead, 0);
}

void Mutex::ReaderUnlock() {
  static const auto real = RealAs<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  __tsan_mutex_pre_unlock(this, kRead);
  real(this);
  __tsan_mutex_post_unlock(this, kRead);
}

bool Mutex::ReaderTryLock() {
  static const auto real = RealAs<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  __tsan_mutex_pre_lock(this, kRead | kTry);
  const bool locked = real(this);
  __tsan_mutex_post_lock(this,
                         locked ? kRead | kTry : kRead | kTry | kTryFailed, 0);
  return locked;
}

void Mutex::LockWhen(const Condition& cond) {
  static const auto real = RealAs<void (*)(Mutex*, const Condition&)>(
      "5Mutex8LockWhenERKNS0_9ConditionE");
  __tsan_mutex_pre_lock(this, 0);
  real(this, cond);
  __tsan_mutex_post_lock(this, 0, 0);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real = RealAs<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_mutex_pre_lock(this, 0);
  const bool met = real(this, cond, timeout);
  __tsan_mutex_post_lock(this, 0, 0);  // held either way
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = RealAs<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_mutex_pre_lock(this, 0);
  const bool met = real(this, cond, deadline);
  __tsan_mutex_post_lock(this, 0, 0);  // held either way
  return met;
}

void Mutex::Await(const Condition& cond) {
  static const auto real = RealAs<void (*)(Mutex*, const Condition&)>(
      "5Mutex5AwaitERKNS0_9ConditionE");
  Waiting(this, [&] {
    real(this, cond);
    return 0;
  });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real = RealAs<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Waiting(this, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = RealAs<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Waiting(this, [&] { return real(this, cond, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  static const auto real =
      RealAs<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  Waiting(mu, [&] {
    real(this, mu);
    return 0;
  });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static const auto real = RealAs<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  return Waiting(mu, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static const auto real = RealAs<bool (*)(CondVar*, Mutex*, Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  return Waiting(mu, [&] { return real(this, mu, deadline); });
}

ABSL_NAMESPACE_END
}  // namespace absl

// What each executable's link asks for (-Wl,--undefined), so that it takes
// this file from the archive and with it the definitions above.
extern "C" {
extern const int statecache_tsan_absl_linked;
const int statecache_tsan_absl_linked = 1;
}

// Any report fails the run: the first one ends the process (halt_on_error),
// with a status ctest counts as a failure (exitcode); the second stack of a
// lock-order inversion is printed too. TSAN_OPTIONS, when set, adds to
// these or overrides them.
extern "C" const char* __tsan_default_options() {
  return "halt_on_error=1:exitcode=66:second_deadlock_stack=1";
}

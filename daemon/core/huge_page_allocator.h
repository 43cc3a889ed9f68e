// HugePageAllocator: a std::allocator that backs large allocations with
// memory the kernel may map with transparent huge pages.
//
// A million-slot pool keeps tens of megabytes of per-slot records and index
// entries that calls touch at random; with 4 KiB pages nearly every such
// touch also misses the TLB. Asking for huge pages (madvise(MADV_HUGEPAGE),
// honoured when THP is in "madvise" or "always" mode) removes most of those
// misses. Small allocations, and systems without THP, fall back to the plain
// allocator, so behaviour never depends on it.
//
// Thread-safe (stateless).
#ifndef STATECACHE_DAEMON_CORE_HUGE_PAGE_ALLOCATOR_H_
#define STATECACHE_DAEMON_CORE_HUGE_PAGE_ALLOCATOR_H_

#include <sys/mman.h>

#include <cstddef>
#include <new>

namespace statecache {

template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHugeThreshold) {
      return static_cast<T*>(::operator new(bytes));
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    (void)::madvise(p, bytes, MADV_HUGEPAGE);  // a hint; fine if refused
    return static_cast<T*>(p);
  }

  void deallocate(T* p, std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHugeThreshold) {
      ::operator delete(p);
    } else {
      ::munmap(p, bytes);
    }
  }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }

 private:
  // Below two huge pages the TLB is not the problem.
  static constexpr std::size_t kHugeThreshold = std::size_t{4} << 20;
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_CORE_HUGE_PAGE_ALLOCATOR_H_

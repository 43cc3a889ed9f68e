// FaultInjectingDevice: a Device that fails on demand (the leveldb `Env`
// idea). It wraps any Device, forwards every call to it, and, where a fault
// it was told of matches a call, returns that fault's error instead, so the
// layers above can be tested against a state memory that fails: a copy that
// never happened (or happened and was then reported failed), a region that
// cannot grow or shrink.
//
//   auto host = HostDevice::Create(options);      // any Device
//   auto faulty = std::make_shared<FaultInjectingDevice>(std::move(*host));
//   faulty->FailNthCopy(1);                       // the next Copy fails
//   faulty->FailCopiesTouching(7);                // and every one on slot 7
//
// Faults:
//   * Copy: the Nth copy from now (one-shot), every copy reading or writing
//     a given slot, or every copy (until cleared). ReadSlots, WriteSlots
//     and ChecksumSlots are copies too (a batched copy of slots, to or from
//     host memory, or a read of them in place): they count towards the
//     Nth, fail when one of their slots is named, and are counted in
//     Counts::copies.
//   * Resize: the Nth Resize from now (one-shot), or every Resize that grows
//     the region (an allocation that fails), until cleared.
// A fault's error is INTERNAL unless the caller gives another (an OK one
// still fails, as INTERNAL); its message names the call (which copy, its
// first pair or image, the slot that matched; or the Resize's target) and
// says it was injected. By default a failed call is not
// forwarded (nothing copied, the region unchanged, as Device's contract
// says of a failure); a Copy fault made with `forward` true runs the copy
// first and reports the error afterwards (a device that wrote the bytes,
// or some of them, and then failed: what a caller may not trust either).
// Export, CommittedBytes, AllocateStaging and the accessors are forwarded
// unchanged (they have no injected error to report).
//
// Calls are counted (attempted, failed), faulted or not, for tests that
// assert a path ran no copy at all.
//
// Thread safety: as the wrapped Device (Device's contract: Resize needs
// exclusive access; the copies, Export and the accessors may run
// concurrently),
// and the fault methods may be called from any thread at any time: the
// plan and the counters are guarded by a mutex, which is never held while
// the wrapped device runs. A fault set concurrently with a call applies to
// that call or the next, never to half of one.
#ifndef STATECACHE_DAEMON_DEVICE_FAULT_INJECTING_DEVICE_H_
#define STATECACHE_DAEMON_DEVICE_FAULT_INJECTING_DEVICE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "daemon/device/device.h"

namespace statecache {

class FaultInjectingDevice : public Device {
 public:
  // How many calls of each kind reached this device, and how many of those
  // it failed.
  struct Counts {
    int64_t copies = 0;  // Copy, ReadSlots, WriteSlots, ChecksumSlots
    int64_t copies_failed = 0;
    int64_t resizes = 0;
    int64_t resizes_failed = 0;
  };

  // REQUIRES: base != nullptr. Starts with no faults.
  explicit FaultInjectingDevice(std::shared_ptr<Device> base);

  FaultInjectingDevice(const FaultInjectingDevice&) = delete;
  FaultInjectingDevice& operator=(const FaultInjectingDevice&) = delete;

  // ------------------------------------------------------------ faults

  // The `n`th copy (Copy, ReadSlots or WriteSlots) from now fails with
  // `error` (1: the next one); one-shot. With `forward`, that copy runs on
  // the wrapped device first. Every copy counts towards n, whatever else
  // fails it. A later call replaces an earlier pending one.
  // REQUIRES: n >= 1 (a smaller n never fires).
  void FailNthCopy(int64_t n,
                   absl::Status error = absl::InternalError("copy failed"),
                   bool forward = false) ABSL_LOCKS_EXCLUDED(mu_);
  // Every Copy with a pair that reads or writes `slot`, and every ReadSlots
  // or WriteSlots with an image of `slot`, fails with `error` (not
  // forwarded) until ClearFaults. Several slots may be named.
  // REQUIRES: slot >= 0.
  void FailCopiesTouching(
      int64_t slot, absl::Status error = absl::InternalError("copy failed"))
      ABSL_LOCKS_EXCLUDED(mu_);
  // Every copy (Copy, ReadSlots, WriteSlots) fails with `error` (not
  // forwarded) until ClearFaults.
  void FailAllCopies(absl::Status error = absl::InternalError("copy failed"))
      ABSL_LOCKS_EXCLUDED(mu_);
  // The `n`th Resize from now fails with `error` (1: the next one), the
  // region unchanged; one-shot.
  // REQUIRES: n >= 1 (a smaller n never fires).
  void FailNthResize(int64_t n,
                     absl::Status error = absl::ResourceExhaustedError(
                         "resize failed")) ABSL_LOCKS_EXCLUDED(mu_);
  // Every Resize to more slots than the region holds fails with `error`
  // (the region unchanged) until ClearFaults: memory that cannot be had.
  void FailGrowth(absl::Status error = absl::ResourceExhaustedError(
                      "cannot allocate the state memory"))
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets every fault: pending one-shots and standing ones (the counters
  // stay).
  void ClearFaults() ABSL_LOCKS_EXCLUDED(mu_);

  Counts counts() const ABSL_LOCKS_EXCLUDED(mu_);
  Device& base() const { return *base_; }

  // ------------------------------------------------------------ Device

  std::string_view backend() const override { return base_->backend(); }
  const StateLayout& layout() const override { return base_->layout(); }
  int64_t num_slots() const override { return base_->num_slots(); }
  int64_t max_slots() const override { return base_->max_slots(); }
  // Errors: an injected fault's (see FailNthResize, FailGrowth), else the
  // wrapped device's.
  absl::Status Resize(int64_t new_num_slots) override ABSL_LOCKS_EXCLUDED(mu_);
  RegionExport Export() const override { return base_->Export(); }
  // Errors: an injected fault's (see FailNthCopy, FailCopiesTouching,
  // FailAllCopies; the first that matches, in that order), else the wrapped
  // device's.
  absl::StatusOr<CopyResult> Copy(absl::Span<const SlotPair> pairs) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::unique_ptr<HostStaging>> AllocateStaging(
      uint64_t bytes) override {
    return base_->AllocateStaging(bytes);
  }
  // Errors: as Copy's.
  absl::StatusOr<CopyResult> ReadSlots(
      HostStaging& staging, absl::Span<const SlotImage> images) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<CopyResult> WriteSlots(
      const HostStaging& staging, absl::Span<const SlotImage> images) override
      ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t CommittedBytes() const override { return base_->CommittedBytes(); }
  bool CanChecksumInPlace() const override {
    return base_->CanChecksumInPlace();
  }
  // Errors: as Copy's, and the wrapped device's.
  absl::Status ChecksumSlots(absl::Span<const int64_t> slots,
                             absl::Span<uint64_t> out) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct OneShot {
    int64_t remaining = 0;  // calls until it fires; 0 = none pending
    absl::Status error;
    bool forward = false;
  };
  // The fault a copy fails with, and whether it runs first.
  struct CopyFault {
    absl::Status error;
    bool forward = false;
  };
  // Counts one call against `shot`: true when this is the call it fails
  // (the shot is then spent).
  static bool Fires(OneShot& shot);
  // Counts one copy, `description` ("2 pairs, first 0 -> 1") naming it and
  // `slots` the slots it reads or writes (in the order a message names
  // the first that matched), against the copy faults: the fault that fails
  // it, if any.
  std::optional<CopyFault> CountCopy(std::string_view description,
                                     absl::Span<const int64_t> slots)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `copy` (the wrapped device's) unless `fault` fails it; a forwarded
  // fault runs it first.
  template <typename CopyFn>
  static absl::StatusOr<CopyResult> RunUnlessFaulted(
      std::optional<CopyFault> fault, CopyFn copy);
  static absl::Status Injected(const absl::Status& error,
                               std::string_view call);

  const std::shared_ptr<Device> base_;
  mutable absl::Mutex mu_;
  OneShot nth_copy_ ABSL_GUARDED_BY(mu_);
  // Slot -> the error of every Copy touching it.
  absl::flat_hash_map<int64_t, absl::Status> failing_slots_
      ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> all_copies_ ABSL_GUARDED_BY(mu_);
  OneShot nth_resize_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> growth_ ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace statecache

#endif  // STATECACHE_DAEMON_DEVICE_FAULT_INJECTING_DEVICE_H_

// Helpers of the host backend's tests: slots filled with the pattern of
// tests/device/pattern.h through a HostDevice's mapping, the images that
// pattern makes, and shared-memory objects made and checked by name.
#ifndef STATECACHE_TESTS_DEVICE_HOST_TEST_UTIL_H_
#define STATECACHE_TESTS_DEVICE_HOST_TEST_UTIL_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/device/host_device.h"
#include "gtest/gtest.h"
#include "tests/device/pattern.h"

namespace statecache::testing {

// Writes every byte of every piece of slots [0, num_slots()) (padding
// included) through the daemon's mapping: PatternByte(seed, slot, ...).
inline void FillSlots(const HostDevice& device, uint64_t seed) {
  const StateLayout& l = device.layout();
  const int64_t capacity = device.Export().capacity_slots;
  for (int64_t slot = 0; slot < device.num_slots(); ++slot) {
    for (int64_t layer = 0; layer < l.num_layers(); ++layer) {
      for (int tensor = 0; tensor < l.num_tensors(); ++tensor) {
        char* piece =
            device.base() + l.PieceOffset(tensor, layer, slot, capacity);
        for (uint64_t i = 0; i < l.padded_piece_bytes(tensor); ++i) {
          piece[i] =
              static_cast<char>(PatternByte(seed, slot, tensor, layer, i));
        }
      }
    }
  }
}

// What a slot filled by FillSlots(seed) holds, as an image: its pieces in
// [layer][tensor] order, written out from the pattern (not from the layout's
// offsets, so a misplaced piece shows).
inline std::vector<char> Image(const StateLayout& l, uint64_t seed,
                               int64_t slot) {
  std::vector<char> image;
  for (int64_t layer = 0; layer < l.num_layers(); ++layer) {
    for (int tensor = 0; tensor < l.num_tensors(); ++tensor) {
      for (uint64_t i = 0; i < l.padded_piece_bytes(tensor); ++i) {
        image.push_back(
            static_cast<char>(PatternByte(seed, slot, tensor, layer, i)));
      }
    }
  }
  return image;
}

// Whether /dev/shm holds `name` (with or without the leading '/').
inline bool ShmExists(const std::string& name) {
  struct stat st;
  const std::string bare = name.front() == '/' ? name.substr(1) : name;
  return stat(("/dev/shm/" + bare).c_str(), &st) == 0;
}

// Creates the (empty) object `name` (without the '/').
inline void MakeShmObject(const std::string& name) {
  const int fd = shm_open(("/" + name).c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0) << name;
  close(fd);
}

// A pid that is certainly dead: a child that exited and was reaped.
inline pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

}  // namespace statecache::testing

#endif  // STATECACHE_TESTS_DEVICE_HOST_TEST_UTIL_H_

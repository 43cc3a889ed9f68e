// A libFuzzer target's LLVMFuzzerTestOneInput as a plain program, for builds
// without libFuzzer (the main build, gcc): replays every file of the given
// corpus directories (or files) through it, then --random=N deterministic
// inputs: random bytes, and corpus files with a few bytes changed. The
// target aborts on a broken check, so the exit status is the verdict; ctest
// runs one per fuzzer (label fuzz), a regression test of the seeds and of
// every crash input committed beside them.
//
//   <fuzzer>_replay [--random=N] [--seed=S] [--max_len=L] DIR_OR_FILE...
//
// A directory that is missing or empty is an error: a replay of nothing
// would pass. An input that aborts is written to ./replay-crash first, to
// run again under the real fuzzer or a debugger.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Defined by targets that set something up once (step_fuzz does).
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc,
                                                          char*** argv);

namespace {

namespace fs = std::filesystem;

// The input running now, for the abort handler.
const uint8_t* current_data = nullptr;
size_t current_size = 0;

void SaveInputAndDie(int sig) {
  // Only async-signal-safe calls here.
  const int fd = open("replay-crash", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    for (size_t done = 0; done < current_size;) {
      const ssize_t n = write(fd, current_data + done, current_size - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    close(fd);
    static const char kSaid[] = "the failing input is in ./replay-crash\n";
    (void)!write(STDERR_FILENO, kSaid, sizeof(kSaid) - 1);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void Run(const std::vector<uint8_t>& data) {
  current_data = data.data();
  current_size = data.size();
  LLVMFuzzerTestOneInput(data.data(), data.size());
}

bool ReadFile(const fs::path& path, std::vector<uint8_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in),
              std::istreambuf_iterator<char>());
  return true;
}

// The value of --name=VALUE in `arg`, or nullptr.
const char* Flag(std::string_view arg, std::string_view name) {
  if (arg.size() <= name.size() + 3 || arg.substr(0, 2) != "--" ||
      arg.substr(2, name.size()) != name || arg[2 + name.size()] != '=') {
    return nullptr;
  }
  return arg.data() + name.size() + 3;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGABRT, SaveInputAndDie);
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  uint64_t random_inputs = 0, seed = 1;
  size_t max_len = 1024;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (const char* n = Flag(arg, "random")) {
      random_inputs = std::strtoull(n, nullptr, 10);
    } else if (const char* s = Flag(arg, "seed")) {
      seed = std::strtoull(s, nullptr, 10);
    } else if (const char* l = Flag(arg, "max_len")) {
      max_len = std::max<size_t>(1, std::strtoull(l, nullptr, 10));
    } else if (fs::is_directory(arg)) {
      const size_t before = files.size();
      for (const fs::directory_entry& e : fs::directory_iterator(arg)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
      if (files.size() == before) {
        std::fprintf(stderr, "%s: no inputs in %s\n", argv[0], argv[i]);
        return 2;
      }
    } else if (fs::is_regular_file(arg)) {
      files.emplace_back(arg);
    } else {
      std::fprintf(stderr, "%s: no such file or directory: %s\n", argv[0],
                   argv[i]);
      return 2;
    }
  }
  // Directory order is the filesystem's: sort, so a run is reproducible.
  std::sort(files.begin(), files.end());
  std::vector<std::vector<uint8_t>> corpus;
  for (const fs::path& path : files) {
    std::vector<uint8_t> data;
    if (!ReadFile(path, &data)) {
      std::fprintf(stderr, "%s: cannot read %s\n", argv[0], path.c_str());
      return 2;
    }
    std::fprintf(stderr, "replay %s (%zu bytes)\n", path.c_str(), data.size());
    Run(data);
    corpus.push_back(std::move(data));
  }
  std::mt19937_64 rng(seed);
  for (uint64_t n = 0; n < random_inputs; ++n) {
    std::vector<uint8_t> data;
    if (!corpus.empty() && n % 2 == 0) {
      // A corpus file with 1-4 bytes changed: near what the seeds reach.
      data = corpus[rng() % corpus.size()];
      if (data.empty()) data.push_back(0);
      for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k) {
        data[rng() % data.size()] = static_cast<uint8_t>(rng());
      }
    } else {
      data.resize(rng() % (max_len + 1));
      for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    }
    Run(data);
  }
  std::printf("%s: %zu corpus inputs and %llu random ones passed\n", argv[0],
              corpus.size(), static_cast<unsigned long long>(random_inputs));
  return 0;
}

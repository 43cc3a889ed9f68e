# statecache: the README's two commands, and their steps.
#
#   make run      install the daemon's packages, build the daemon and
#                 statecachectl, run statecached on its defaults (./run.sh
#                 does the same, passing its arguments through untouched)
#   make test     install the test packages, build everything, run every
#                 stage (tests/run_suite.py): the main build's suite, the
#                 core and daemon core under ASan+UBSan, the daemon core and
#                 its concurrent stress under TSan, the pool and Step
#                 fuzzers; then a summary of what passed, failed and did not
#                 run
#
# The stages alone: make test-main, test-asan, test-tsan, test-fuzz
# (test-fuzz-pool, test-fuzz-step). ARGS="--num_slots=
# 4096 ..." passes flags to `make run`; FUZZ_SECONDS sets the fuzzing time
# (default 45: the suite stays under 30 minutes on a 2-core machine).

BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 45
CMAKE_FLAGS ?= -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps deps-run daemon build run test test-main test-asan \
  test-tsan test-fuzz fuzz-build test-fuzz-pool test-fuzz-step \
  test-fuzz-saved-state clean
all: build

# The two package sets (.ci/install-deps says what each holds).
deps-run:
	@.ci/install-deps run
deps:
	@.ci/install-deps test

# $(call configure,DIR,FLAGS[,ENV]): configure DIR (ENV, e.g. CXX=clang++,
# set for cmake); the log goes to
# DIR/configure.log (all of it on the terminal when configuring fails), and
# the project's own notes (flavours built or skipped, tests not registered)
# to the terminal.
define configure
	@mkdir -p $(1)
	@$(3) cmake -S . -B $(1) $(CMAKE_FLAGS) $(2) >$(1)/configure.log 2>&1 || \
	  { cat $(1)/configure.log >&2; exit 1; }
	@sed -n 's/^-- \(statecache: .*\)/\1/p' $(1)/configure.log
endef

# The daemon and statecachectl only, on the daemon's packages.
daemon: deps-run
	$(call configure,$(BUILD),)
	@cmake --build $(BUILD) -j $(JOBS) --target statecached statecachectl

run: daemon
	$(BUILD)/bin/statecached $(ARGS)

build: deps
	$(call configure,$(BUILD),-DSTATECACHE_TESTS=ON)
	@cmake --build $(BUILD) -j $(JOBS)

test: deps
	@/usr/bin/python3 tests/run_suite.py --make "$(MAKE)" \
	  --build $(BUILD) --asan-build $(ASAN_BUILD) --tsan-build $(TSAN_BUILD) \
	  --fuzz-build $(FUZZ_BUILD) \
	  --fuzz-seconds $(FUZZ_SECONDS)

# ctest writes junit.xml into the build directory for the summary.
test-main: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) \
	  --output-junit junit.xml

# The pool core, the replay tool, the daemon core (StateCache) and the
# device layer (host shared memory, copy engine) with AddressSanitizer and
# UBSan, running their unit, parity, service and device tests and the
# fuzzers' seed replays.
test-asan: deps
	$(call configure,$(ASAN_BUILD),-DSTATECACHE_TESTS=ON -DSTATECACHE_SANITIZE=ON)
	@cmake --build $(ASAN_BUILD) -j $(JOBS) --target \
	  statecache_unit_tests statecache-replay statecache_service_tests \
	  statecache_proto_tests statecache_device_tests statecache_region_probe \
	  pool_fuzz_replay step_fuzz_replay saved_state_fuzz_replay
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) \
	  -L 'unit|parity|proto|service|device|fuzz' --output-junit junit.xml

# ThreadSanitizer, where any report fails the test (tests/tsan/ says how,
# and why absl::Mutex needs it): the daemon core's service tests and its
# concurrent stress (schedulers, resizes, lease expiry, metrics scrapes and
# operator reads at once, the host copier's threads sharing every copy:
# tests/service/state_cache_stress_test.cc). Host only, and only the
# libraries these need: the GPU flavours are not built. Left to the other
# stages, to keep this one short: the chaos test (one thread; nothing to race,
# and ~35 s under TSan) and the device tests (their large copies take
# minutes under TSan; the stress test runs the copier's threads).
test-tsan: deps
	$(call configure,$(TSAN_BUILD),-DSTATECACHE_TESTS=ON -DSTATECACHE_TSAN=ON \
	  -DSTATECACHE_WITH_HIP=OFF -DSTATECACHE_WITH_CUDA=OFF)
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target statecache_service_tests \
	  statecache_stress_tests
	cd $(TSAN_BUILD) && ctest --output-on-failure -j $(JOBS) \
	  -L 'service|stress' -E '^StateCacheChaosTest\.' --output-junit junit.xml

# libFuzzer (clang, ASan+UBSan, every library coverage-instrumented), each
# target for FUZZ_SECONDS: pool_fuzz, arbitrary call sequences on the pool;
# step_fuzz, arbitrary Steps (raw bytes, lists, bent packed columns) on the
# daemon's core. Invariants are checked after every call, and a refusal must
# leave everything as it was. saved_state_fuzz: the warm restart's state
# index decoded from arbitrary bytes (test-fuzz-saved-state).
test-fuzz: test-fuzz-pool test-fuzz-step test-fuzz-saved-state

fuzz-build: deps
	$(call configure,$(FUZZ_BUILD),-DSTATECACHE_TESTS=ON -DSTATECACHE_FUZZ=ON \
	  -DSTATECACHE_CORE_ONLY=OFF -DSTATECACHE_SANITIZE=ON,CXX=clang++)
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target pool_fuzz step_fuzz \
	  saved_state_fuzz
	@mkdir -p $(FUZZ_BUILD)/corpus $(FUZZ_BUILD)/step-corpus \
	  $(FUZZ_BUILD)/saved-state-corpus

test-fuzz-pool: fuzz-build
	$(FUZZ_BUILD)/bin/pool_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=512 \
	  -print_final_stats=1 $(FUZZ_BUILD)/corpus tests/fuzz/seeds

test-fuzz-step: fuzz-build
	$(FUZZ_BUILD)/bin/step_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=1024 \
	  -print_final_stats=1 $(FUZZ_BUILD)/step-corpus tests/fuzz/step_seeds

test-fuzz-saved-state: fuzz-build
	$(FUZZ_BUILD)/bin/saved_state_fuzz -max_total_time=$(FUZZ_SECONDS) \
	  -max_len=1024 -print_final_stats=1 $(FUZZ_BUILD)/saved-state-corpus \
	  tests/fuzz/saved_state_seeds

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)

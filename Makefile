# statecache: the README's two commands.
#
#   make run    install what is missing, build, run statecached on its defaults
#   make test   install what is missing, build, run every test: the main
#               build's suite, the core and daemon core under ASan+UBSan, and
#               the pool and Step fuzzers
#
# ARGS="--num_slots=4096 ..." passes flags to `make run`; FUZZ_SECONDS sets
# the fuzzing time (default 60).

BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 60
CMAKE_FLAGS ?= -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps build run test test-main test-asan test-fuzz clean
all: build

deps:
	@.ci/install-deps

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/bin/statecached $(ARGS)

test: test-main test-asan test-fuzz

test-main: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The pool core, the replay tool, the daemon core (StateCache) and the
# device layer (host shared memory, copy engine) with AddressSanitizer and
# UBSan, running their unit, parity, service and device tests.
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) $(CMAKE_FLAGS) -DSTATECACHE_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS) --target \
	  statecache_unit_tests statecache-replay statecache_service_tests \
	  statecache_device_tests statecache_region_probe
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) \
	  -L 'unit|parity|service|device'

# libFuzzer (clang, ASan+UBSan, every library coverage-instrumented), each
# target for FUZZ_SECONDS: pool_fuzz, arbitrary call sequences on the pool;
# step_fuzz, arbitrary Steps (raw bytes, lists, bent packed columns) on the
# daemon's core. Invariants are checked after every call, and a refusal must
# leave everything as it was.
test-fuzz: deps
	@CXX=clang++ cmake -S . -B $(FUZZ_BUILD) $(CMAKE_FLAGS) -DSTATECACHE_FUZZ=ON \
	  -DSTATECACHE_CORE_ONLY=OFF -DSTATECACHE_SANITIZE=ON >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target pool_fuzz step_fuzz
	@mkdir -p $(FUZZ_BUILD)/corpus $(FUZZ_BUILD)/step-corpus
	$(FUZZ_BUILD)/bin/pool_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=512 \
	  -print_final_stats=1 $(FUZZ_BUILD)/corpus tests/fuzz/seeds
	$(FUZZ_BUILD)/bin/step_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=1024 \
	  -print_final_stats=1 $(FUZZ_BUILD)/step-corpus

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)

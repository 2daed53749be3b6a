# A thin layer over meson.  `make demo` and `make test` install missing
# Debian packages first (as root; otherwise they print the apt-get line).
BUILD      ?= build
BUILD_ASAN ?= build-asan
FUZZ_SECS  ?= 10
MESON_OPTS ?=
PREFIX     ?= /usr/local
# Tests at once: one per two cores.  Each test runs its library calls on 2
# threads (PT_NUM_THREADS=2), and two tests on a 2-core machine
# oversubscribe it: the small models' many short OpenMP regions then wait
# on descheduled threads at every barrier (python_run_resume: 4 s alone,
# 150-200 s beside another test).  Measured on the 2-core machine: the
# release suite 8m13 with 2 at once, 4m33 with 1; the ASan suite about 18
# minutes against 9.
TEST_JOBS  ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n / 2 > 0 ? n / 2 : 1 )))

.PHONY: all deps build demo test test-fast test-asan install install-test fuzz bench clean

all: build

deps:
	@scripts/deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_OPTS)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

demo: build
	$(BUILD)/cli/posttrain demo

# Every test: the Check suites, again under ASan+UBSan, the installed-prefix
# example, and a short run of each libFuzzer harness.
test: deps
	@scripts/deps.sh --test
	$(MAKE) --no-print-directory build
	meson test -C $(BUILD) --print-errorlogs --num-processes $(TEST_JOBS)
	$(MAKE) --no-print-directory test-asan
	scripts/install_test.sh $(BUILD)
	scripts/pip_test.sh
	fuzz/run.sh $(FUZZ_SECS)
	@scripts/summary.sh $(BUILD) $(BUILD_ASAN)

test-fast: build
	meson test -C $(BUILD) --print-errorlogs --num-processes $(TEST_JOBS)

test-asan: deps
	@test -f $(BUILD_ASAN)/build.ninja || meson setup $(BUILD_ASAN) -Dbuildtype=debugoptimized \
	    -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fno-sanitize-recover=all $(MESON_OPTS)
	ninja -C $(BUILD_ASAN)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    meson test -C $(BUILD_ASAN) --print-errorlogs --num-processes $(TEST_JOBS) --timeout-multiplier 4

# Install the library, headers, posttrain.pc, the CLI, the Python binding and
# docs/ under PREFIX (README.md, "Installing").
install: build
	meson configure $(BUILD) -Dprefix=$(PREFIX)
	meson install -C $(BUILD)

install-test: build
	scripts/install_test.sh $(BUILD)

fuzz: deps
	@scripts/deps.sh --test
	fuzz/run.sh 60

bench: build
	$(BUILD)/bench/bench_gemm 2
	$(BUILD)/bench/bench_train_step

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) build-fuzz

# A thin layer over meson.  `make demo` and `make test` install missing
# Debian packages first (as root; otherwise they print the apt-get line).
BUILD      ?= build
BUILD_ASAN ?= build-asan
FUZZ_SECS  ?= 10
MESON_OPTS ?=
PREFIX     ?= /usr/local

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
	meson test -C $(BUILD) --print-errorlogs --num-processes 2
	$(MAKE) --no-print-directory test-asan
	scripts/install_test.sh $(BUILD)
	scripts/pip_test.sh
	fuzz/run.sh $(FUZZ_SECS)
	@scripts/summary.sh $(BUILD) $(BUILD_ASAN)

test-fast: build
	meson test -C $(BUILD) --print-errorlogs

test-asan: deps
	@test -f $(BUILD_ASAN)/build.ninja || meson setup $(BUILD_ASAN) -Dbuildtype=debugoptimized \
	    -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fno-sanitize-recover=all $(MESON_OPTS)
	ninja -C $(BUILD_ASAN)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    meson test -C $(BUILD_ASAN) --print-errorlogs --num-processes 2 --timeout-multiplier 4

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

#!/usr/bin/env bash
# Build the libFuzzer harnesses with clang (ASan + UBSan) and run each for a
# bounded time over its seed corpus.  Usage: fuzz/run.sh [SECONDS_PER_HARNESS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
build=${PT_FUZZ_BUILD:-build-fuzz}
if ! command -v clang >/dev/null; then
    echo "fuzz/run.sh: clang not found (apt-get install clang libclang-rt-14-dev)" >&2
    exit 1
fi
if [ ! -d "$build" ]; then
    CC=clang meson setup "$build" -Dfuzz=true -Dtests=disabled -Dbuildtype=debugoptimized \
        -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
if ! ninja -C "$build" fuzz/fuzz_safetensors fuzz/fuzz_config fuzz/fuzz_tokenizer fuzz/fuzz_gguf >"$build/fuzz-build.log" 2>&1; then
    grep -E -B2 -A8 "error|FAILED" "$build/fuzz-build.log" | head -60 >&2
    echo "fuzz/run.sh: building the harnesses failed (full log: $build/fuzz-build.log)" >&2
    exit 1
fi
for h in safetensors config tokenizer gguf; do
    work=$(mktemp -d)
    cp -r fuzz/corpus/$h/. "$work/" 2>/dev/null || true
    echo "fuzz: $h for ${secs}s"
    "$build/fuzz/fuzz_$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=0 "$work" 2>"$work.log" || { tail -50 "$work.log"; rm -rf "$work"; exit 1; }
    grep -E "^#[0-9]+ *DONE" "$work.log" || tail -1 "$work.log"
    rm -rf "$work" "$work.log"
done
echo "fuzz: all harnesses ran clean"

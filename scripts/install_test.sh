#!/usr/bin/env bash
# Install libposttrain into a temporary prefix, build examples/minimal.c
# against it with nothing but pkg-config, and run it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
prefix=$(mktemp -d /tmp/posttrain-prefix.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
meson configure "$build" -Dprefix="$prefix" >/dev/null
meson install -C "$build" --quiet >/dev/null
pcdir=$(dirname "$(find "$prefix" -name posttrain.pc | head -n 1)")
export PKG_CONFIG_PATH="$pcdir"
flags=$(pkg-config --cflags --libs posttrain)
libdir=$(pkg-config --variable=libdir posttrain)
cc -std=c11 -Wall -Wextra -Werror examples/minimal.c -o "$prefix/minimal" $flags -Wl,-rpath,"$libdir"
echo "install-test: cc examples/minimal.c $flags"
"$prefix/minimal"
# The agent-runtime example too, small arguments: it checks its own masks.
cc -std=c11 -Wall -Wextra -Werror examples/agent_runtime.c -o "$prefix/agent_runtime" $flags -lm -Wl,-rpath,"$libdir"
"$prefix/agent_runtime" --seed 1 --sft-steps 40 --steps 2 --prompts 2 --group 4 --eval 8 --quiet >/dev/null
echo "install-test: cc examples/agent_runtime.c and ran it"
# Only the public pt_ API is exported.
bad=$(nm -D --defined-only "$libdir/libposttrain.so" | awk '{print $3}' | grep -v '^pt_' || true)
if [ -n "$bad" ]; then
    echo "install-test: libposttrain.so exports non-pt_ symbols:" >&2
    echo "$bad" >&2
    exit 1
fi
echo "install-test: $(nm -D --defined-only "$libdir/libposttrain.so" | wc -l) exported symbols, all pt_"
# The Python binding, installed beside the library, finds it with no
# POSTTRAIN_LIBRARY and no source tree (run from the prefix).
init=$(find "$prefix" -path '*/posttrain/__init__.py' | head -n 1)
if [ -n "$init" ]; then
    site=$(dirname "$(dirname "$init")")
    out=$(cd "$prefix" && env -u POSTTRAIN_LIBRARY PYTHONPATH="$site" python3 -c \
        'import posttrain; print(posttrain.version()); from posttrain import _lib; print(_lib.library_path)')
    echo "install-test: python binding: $out" | tr '\n' ' '; echo
    case "$out" in
        "$(pkg-config --modversion posttrain)"*) ;;
        *) echo "install-test: the installed Python binding did not load the library" >&2; exit 1 ;;
    esac
    echo "install-test: 2 passed, 0 failed"
else
    echo "install-test: SKIP python binding (python3 not found at configure time)"
    echo "install-test: 1 passed, 0 failed"
fi

#!/usr/bin/env bash
# Install libposttrain into a temporary prefix with exactly the commands of
# README.md's install block (its $HOME/.local replaced by the prefix), which
# build examples/minimal.c against the installed copy and run it; check that
# share/doc/libposttrain holds docs/; then the other installed pieces.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
prefix=$(mktemp -d /tmp/posttrain-prefix.XXXXXX)
trap 'rm -rf "$prefix"; rm -f minimal' EXIT
if [ -e minimal ]; then
    echo "install-test: ./minimal exists in the source tree; the README's commands would overwrite it" >&2
    exit 1
fi
cmds=$(sed -n '/^<!-- install-test: begin -->$/,/^<!-- install-test: end -->$/p' README.md | sed '/^<!--/d; /^```/d')
if [ -z "$cmds" ]; then
    echo "install-test: README.md has no install-test block" >&2
    exit 1
fi
cmds=${cmds//'$HOME/.local'/$prefix}
# The README names the x86-64 multiarch directory; elsewhere, this machine's.
arch=$(cc -print-multiarch 2>/dev/null || true)
if [ -n "$arch" ] && [ "$arch" != x86_64-linux-gnu ]; then
    cmds=${cmds//x86_64-linux-gnu/$arch}
fi
export BUILD="$build"   # the Makefile's build directory
log="$prefix/readme.log"
while IFS= read -r line; do
    [ -n "$line" ] || continue
    echo "+ $line" >>"$log"
    if ! eval "$line" >>"$log" 2>&1; then
        cat "$log" >&2
        echo "install-test: the README's command failed: $line" >&2
        exit 1
    fi
done <<<"$cmds"
echo "install-test: ran README.md's install commands with PREFIX $prefix:"
grep -v '^Installing\|^Nothing\|^ninja\|^\[' "$log" | sed -n '/^+ cc\|^+ export\|^+ make/p; /^+ .\/minimal/,$p'
mv minimal "$prefix/minimal"
flags=$(pkg-config --cflags --libs posttrain)
libdir=$(pkg-config --variable=libdir posttrain)
# The example stays clean under strict warnings too.
cc -std=c11 -Wall -Wextra -Werror -fsyntax-only examples/minimal.c $(pkg-config --cflags posttrain)
# docs/, every file, in share/doc/libposttrain.
docdir="$prefix/share/doc/libposttrain"
ndocs=0
while IFS= read -r f; do
    rel=${f#docs/}
    if ! cmp -s "$f" "$docdir/$rel"; then
        echo "install-test: $docdir/$rel is missing or differs from $f" >&2
        exit 1
    fi
    ndocs=$((ndocs + 1))
done < <(find docs -type f)
[ "$ndocs" -gt 0 ] || { echo "install-test: docs/ is empty" >&2; exit 1; }
echo "install-test: $docdir holds the $ndocs files of docs/"
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
    echo "install-test: 3 passed, 0 failed"
else
    echo "install-test: SKIP python binding (python3 not found at configure time)"
    echo "install-test: 2 passed, 0 failed"
fi

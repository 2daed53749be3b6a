#!/usr/bin/env bash
# Make sure the Debian packages libposttrain needs are installed.
# As root: install what is missing with apt-get.  Otherwise: print the exact
# apt-get command and stop with status 1.
set -euo pipefail
# libopenmpi-dev, openmpi-bin: data-parallel training over MPI (meson -Dmpi=auto finds it;
# the library builds without it too).  libdnnl-dev: oneDNN's matmul for the BF16 products
# (meson -Donednn=auto; optional as well).
pkgs=(meson ninja-build pkg-config gcc libc6-dev libblis-dev libblis4-openmp libcjson-dev check
      libpcre2-dev libutf8proc-dev libopenmpi-dev openmpi-bin libdnnl-dev)
if [ "${1:-}" = "--test" ]; then
    # The test command also builds the libFuzzer harnesses with clang.
    # python3-numpy: the Python binding's numpy paths are tested too (they skip without it).
    # python3-mesonpy, -pip, -venv: scripts/pip_test.sh (pip install . into a venv).
    pkgs+=(clang libclang-rt-14-dev python3-numpy python3-mesonpy python3-pip python3-venv)
fi
missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
    echo "deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    $cmd
else
    echo "deps: missing Debian packages. Run as root:" >&2
    echo "  apt-get update && $cmd" >&2
    exit 1
fi

#!/usr/bin/env bash
# `pip install .` as docs/python.md gives it, into a temporary venv, from a
# clean copy of the working tree (the files git knows, as they are now: no
# build directories): the installed package loads the libposttrain.so bundled
# in it, computes a golden loss, holds exactly the binding and the library,
# passes the binding's own tests (tests/python) and examples/python_sft.py,
# and `pip uninstall` removes it.  Everything lives under one temporary
# directory (venv, copy, pip's and meson's work files; no pip cache), removed
# on exit.  Uses only that directory, so it may run beside `meson test`.
# PT_PIP_PYTHON: the interpreter (default Debian's /usr/bin/python3, which has
# python3-mesonpy); PT_PIP_JOBS: ninja jobs for the build (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
py=${PT_PIP_PYTHON:-/usr/bin/python3}
jobs=${PT_PIP_JOBS:-2}
if ! "$py" -c 'import mesonpy, pip, venv, ensurepip' 2>/dev/null; then
    echo "pip-test: $py cannot import mesonpy, pip and venv; on Debian:" \
         "apt-get install python3-mesonpy python3-pip python3-venv (scripts/deps.sh --test)" >&2
    exit 1
fi
tmp=$(mktemp -d /tmp/posttrain-pip.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src" "$tmp/tmp" "$tmp/run"
start=$(date +%s)

# The clean copy: tracked and new (not ignored) files; deleted ones skipped.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
        tar --null -T - -cf - | tar -xf - -C "$tmp/src"
else
    tar --exclude='./build*' --exclude='./.mesonpy*' --exclude='./prefix' -cf - . |
        tar -xf - -C "$tmp/src"
fi

export TMPDIR="$tmp/tmp" PIP_NO_CACHE_DIR=1 PIP_NO_INDEX=1 PIP_CONFIG_FILE=/dev/null \
       PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 PT_NUM_THREADS=2
unset POSTTRAIN_LIBRARY PYTHONPATH
# Debian's pip (a system site package) installs into the venv as well as the
# venv's own copy would, so the venv skips ensurepip (about 10 s).
venv="$tmp/venv"
"$py" -m venv --system-site-packages --without-pip "$venv"
pip=("$venv/bin/python" -m pip)
log="$tmp/pip.log"
t0=$(date +%s)
if ! (cd "$tmp/src" && "${pip[@]}" install --no-build-isolation \
        --config-settings=compile-args=-j"$jobs" .) >"$log" 2>&1; then
    cat "$log" >&2
    echo "pip-test: pip install --no-build-isolation . failed" >&2
    exit 1
fi
t_install=$(( $(date +%s) - t0 ))
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
version=$(sed -n "/^project(/,/)/s/^ *version *: *'\([^']*\)'.*/\1/p" meson.build)
echo "pip-test: pip install --no-build-isolation . of posttrain $version took ${t_install}s"

# 1. From outside the tree: the bundled library, the version, a golden loss, a tokenizer.
cat >"$tmp/check.py" <<'EOF'
import array, json, os, struct, sys
import posttrain as pt
root, site, version = sys.argv[1:4]
want = os.path.join(site, "posttrain", "libposttrain.so")
assert pt.__file__ == os.path.join(site, "posttrain", "__init__.py"), pt.__file__
assert pt.library_path == want, (pt.library_path, want)
assert pt.__version__ == version and pt.version() == version, (pt.__version__, pt.version())


def read_st(path):
    """A safetensors file's tensors as (shape, flat list); F32 and I32 only."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        body = f.read()
    out = {}
    for k, v in head.items():
        if k != "__metadata__":
            a = array.array({"F32": "f", "I32": "i"}[v["dtype"]])
            a.frombytes(body[v["data_offsets"][0]:v["data_offsets"][1]])
            out[k] = (v["shape"], a.tolist())
    return out


def rows(t):
    (B, T), data = t
    return [data[b * T:(b + 1) * T] for b in range(B)]


pt.use_numpy(False)
d = os.path.join(root, "tests", "reference", "llama_tied_gqa")
g = read_st(os.path.join(d, "golden.safetensors"))
ids, tg, w = rows(g["input_ids"]), rows(g["targets"]), rows(g["weights"])
with pt.Model.load(d) as m:
    loss = m.loss(ids, tg, weights=w)
    lp = [x for r in m.logprobs(ids, tg) for x in r]
err = max(abs(a - b) for a, b in zip(lp, g["logprobs"][1]))
assert abs(loss - g["loss"][1][0]) < 1e-5 and err < 1e-4, (loss, g["loss"][1][0], err)
tok = pt.Tokenizer.load(os.path.join(root, "tests", "text", "data", "tiny_bytelevel.json"))
ids = tok.encode("the thing")
assert ids == [116, 257, 256, 104, 262] and tok.decode(ids) == "the thing", ids
print("library %s; llama_tied_gqa loss %.7f (golden %.7f, logprobs within %.1e); "
      "tiny_bytelevel 'the thing' -> %s" % (pt.library_path, loss, g["loss"][1][0], err, ids))
EOF
out=$(cd "$tmp/run" && "$venv/bin/python" "$tmp/check.py" "$tmp/src" "$site" "$version")
echo "pip-test: $out"

# 2. The installed files (the wheel's RECORD): the package's modules, the
#    install record and the library, nothing outside the package.
files=$("$venv/bin/python" - "$site" "$version" <<'EOF'
import csv, os, sys
site, version = sys.argv[1:3]
with open(os.path.join(site, "posttrain-%s.dist-info" % version, "RECORD")) as f:
    names = [row[0] for row in csv.reader(f)]
print("\n".join(sorted(n for n in names if "__pycache__" not in n)))
EOF
)
want=$( (cd python && ls posttrain/*.py; echo posttrain/_install_config.py; echo posttrain/libposttrain.so) | sort)
got=$(grep -v "^posttrain-$version.dist-info/" <<<"$files" || true)
if [ "$got" != "$want" ]; then
    echo "pip-test: the installed files differ from python/posttrain + libposttrain.so:" >&2
    diff <(echo "$want") <(echo "$got") >&2 || true
    exit 1
fi
echo "pip-test: installed $(wc -l <<<"$got") files: the $(ls python/posttrain/*.py | wc -l) modules," \
     "_install_config.py, libposttrain.so (+ dist-info)"

# 3. The binding's own tests and the SFT example against the installed package.
shared=$(cd "$root/.." && pwd)/shared/data
[ -d "$shared" ] && export PT_SHARED_DATA="$shared"
t0=$(date +%s)
ntests=0
for t in "$tmp"/src/tests/python/test_*.py "$tmp/src/examples/python_sft.py"; do
    args=()
    case "$t" in *python_sft.py) args=(--steps 40) ;; esac
    if ! (cd "$tmp/run" && "$venv/bin/python" "$t" "${args[@]}") >"$tmp/test.log" 2>&1; then
        cat "$tmp/test.log" >&2
        echo "pip-test: ${t#"$tmp"/src/} failed against the pip-installed package" >&2
        exit 1
    fi
    ntests=$((ntests + 1))
done
echo "pip-test: $ntests binding test files passed against the installed package in" \
     "$(( $(date +%s) - t0 ))s${PT_SHARED_DATA:+ (shared data $PT_SHARED_DATA)}"

# 4. pip uninstall removes the package and the library.
"${pip[@]}" uninstall -y posttrain >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
if [ -e "$site/posttrain" ] || (cd "$tmp/run" && "$venv/bin/python" -c 'import posttrain' 2>/dev/null); then
    echo "pip-test: posttrain is still importable after pip uninstall" >&2
    exit 1
fi
echo "pip-test: pip uninstall -y posttrain removed $site/posttrain"
echo "pip-test: 4 passed, 0 failed ($(( $(date +%s) - start ))s)"

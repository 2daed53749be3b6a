#!/usr/bin/env bash
# Closing line of `make test`: suites passed in the plain and sanitizer runs,
# plus the install and pip-install checks and the fuzz harnesses (each stage already stopped
# `make test` on any failure).
set -euo pipefail
cd "$(dirname "$0")/.."
total=0
for b in "${1:-build}" "${2:-build-asan}"; do
    n=$(grep -E '^Ok: +[0-9]+' "$b/meson-logs/testlog.txt" | tail -n 1 | awk '{print $2}')
    total=$((total + ${n:-0}))
done
echo "suites: $total meson suites, 1 install check, 1 pip install check, 3 fuzz harnesses"
echo "summary: $((total + 5)) passed, 0 failed"

#!/usr/bin/env bash
# Benchmark: the first `make audit`'s set-up of .venv on a fresh copy of a commit.
#   bench/venv_setup.sh [COMMIT [TARGET [cache|nocache]]]      (defaults: HEAD setup nocache)
# Copies COMMIT's files (git archive) into a temporary folder, runs `make TARGET` there (`setup`:
# what `make audit` does before the audit; the Debian packages are already installed here) with
# pip's cache off (nocache: every wheel downloaded from PyPI) or on, and prints one Markdown row:
# commit, target, cache, exit code, wall seconds, .venv size (du, MiB), installed packages.
set -euo pipefail
commit=${1:-HEAD} target=${2:-setup} cache=${3:-nocache}
root=$(cd "$(dirname "$0")/.." && pwd)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
git -C "$root" archive "$commit" | tar -x -C "$tree"
if [ "$cache" = nocache ]; then export PIP_NO_CACHE_DIR=1; fi
start=$(date +%s.%N)
rc=0
make -C "$tree" "$target" >"$tree/setup.log" 2>&1 || rc=$?
seconds=$(echo "$(date +%s.%N) - $start" | bc)
size=$(du -sm "$tree/.venv" | cut -f1)
packages=$("$tree/.venv/bin/python" -m pip list --format=freeze 2>/dev/null | wc -l)
printf '| %s | %s | %s | %d | %.1f | %s | %s |\n' "$(git -C "$root" rev-parse --short "$commit")" "$target" \
  "$cache" "$rc" "$seconds" "$size" "$packages"

#!/usr/bin/env bash
# The venv build from nothing, side by side: the old way (pip resolving the ranges, torch pinned in the same
# command) against `make install`'s way (uv installing requirements/lock.txt). Each round starts with empty
# caches for both tools; rounds alternate the order. Prints each wall time and the ratio.
# Usage: bash benchmarks/bench_venv_build.sh [ROUNDS]   (default 1; each round downloads everything twice)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
indexes=$(python3 tools/pip_index_args.py)
ssl=$(python3 tools/pip_index_args.py --env)

pip_way() {
  python3 -m venv "$work/pip"
  PIP_CACHE_DIR="$work/pip-cache" "$work/pip/bin/python" -m pip install -q "torch==2.13.0" -e ".[all,dev]" >/dev/null 2>&1
}
uv_way() {
  python3 -m venv "$work/uv"
  PIP_CACHE_DIR="$work/uv-pip-cache" "$work/uv/bin/python" -m pip install -q "uv==0.13.9" >/dev/null 2>&1
  # shellcheck disable=SC2086
  env $ssl UV_CACHE_DIR="$work/uv-cache" "$work/uv/bin/uv" pip install -q --python "$work/uv/bin/python" \
    $indexes --index-strategy unsafe-best-match -r requirements/lock.txt
  env $ssl UV_CACHE_DIR="$work/uv-cache" "$work/uv/bin/uv" pip install -q --python "$work/uv/bin/python" --no-deps -e .
}
timed() {
  rm -rf "$work/pip" "$work/uv" "$work/pip-cache" "$work/uv-cache" "$work/uv-pip-cache"
  local start end
  start=$(date +%s%N); "$1"; end=$(date +%s%N)
  echo $(((end - start) / 1000000000))
}
pip_total=0; uv_total=0
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then p=$(timed pip_way); u=$(timed uv_way); else u=$(timed uv_way); p=$(timed pip_way); fi
  echo "round $r: pip ${p}s, uv + lock ${u}s"
  pip_total=$((pip_total + p)); uv_total=$((uv_total + u))
done
python3 -c "import sys; p, u, n = map(int, sys.argv[1:]); print(f'venv build from empty caches, mean of {n}: pip {p / n:.0f} s, uv + lock {u / n:.0f} s, pip/uv {p / u:.2f}x')" \
  "$pip_total" "$uv_total" "$rounds"

#!/usr/bin/env bash
# A/B of two (or more) source trees on one GPU, in one process of this script, so
# that every figure comes from the same card: each tree is built (sm_90a, in
# parallel), its benchmark rows run ROUNDS times interleaved with the others',
# and bench/compare.py prints each row's minimum us/call per version.
#
# Usage: [AB_BUILD=build-ab] [ROUNDS=0: build only] bench/ab.sh OUT ROUNDS FILTER LABEL=SRC_DIR ...
#   OUT      folder for the JSON of every round and the comparison
#   ROUNDS   rounds of the benchmark (0: only build, e.g. while the GPU is busy)
#   FILTER   `ingot bench --filter` text ("" for every row)
#   SRC_DIR  a source tree (a git worktree or `git archive REV | tar -x`)
# The first version is the baseline of the comparison. AB_ARGS_<label> adds bench
# options for one version.
set -euo pipefail
OUT=${1:?OUT}; ROUNDS=${2:?ROUNDS}; FILTER=${3?FILTER}; shift 3
GENCODE=${INGOT_CUDA_GENCODE:--gencode=arch=compute_90a,code=sm_90a}
BUILDS=${AB_BUILD:-build-ab}
mkdir -p "$OUT" "$BUILDS"
labels=()
for v in "$@"; do
  label=${v%%=*}; src=${v#*=}; labels+=("$label")
  ( cmake -S "$src" -B "$BUILDS/$label" -G Ninja -DINGOT_WERROR=ON -DINGOT_BUILD_TESTS=OFF \
      -DINGOT_CUDA_GENCODE="$GENCODE" ${AB_CMAKE_ARGS:-} > "$OUT/cmake_$label.log" 2>&1 &&
    ninja -C "$BUILDS/$label" tools/ingot > "$OUT/build_$label.log" 2>&1 ) &
done
wait
for label in "${labels[@]}"; do
  [ -x "$BUILDS/$label/tools/ingot" ] || { tail -30 "$OUT/cmake_$label.log" "$OUT/build_$label.log"; exit 1; }
done
[ "$ROUNDS" -gt 0 ] || exit 0
args=()
for r in $(seq "$ROUNDS"); do
  for label in "${labels[@]}"; do
    extra="AB_ARGS_$label" # e.g. AB_ARGS_new="--commit abc123" (a tree whose bench has it)
    "$BUILDS/$label/tools/ingot" bench ${FILTER:+--filter "$FILTER"} ${!extra:-} \
      --json "$OUT/${label}_$r.json" > "$OUT/${label}_$r.txt" 2>&1 ||
      { echo "ab: $label round $r failed"; tail -5 "$OUT/${label}_$r.txt"; }
  done
done
for label in "${labels[@]}"; do
  args+=("$label=$(ls "$OUT/${label}"_*.json | paste -sd, -)")
done
python3 "$(dirname "$0")/compare.py" "${args[@]}" --json "$OUT/compare.json" | tee "$OUT/compare.txt"

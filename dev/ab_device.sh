#!/bin/bash
# A/B of versions of a source file (AB_FILE, default src/cuda/sampling_dense.cu)
# in one device call: dev/ab_a.cu, dev/ab_b.cu, ... (untracked copies), each
# built into its own tree, their tests run, their benches interleaved. A
# version that changes several files is a folder instead, dev/ab_a/, holding
# each of them at its path in the repository (dev/ab_a/src/cuda/x.cu).
# Every round's bench lines, then the minimum of each row and version over the
# rounds (dev/min_rows.awk).
# Usage: [AB_FILE=src/cuda/sampling.cu] dev/ab_device.sh OUTDIR "filter[|filter...]" [rounds]
set -o pipefail
OUT=${1:?outdir}; FILTER=${2:-sampling}; ROUNDS=${3:-2}; FILE=${AB_FILE:-src/cuda/sampling_dense.cu}
VERSIONS=$(ls -d dev/ab_* | grep -v "\.sh$" | sed "s/.*ab_\([^.]*\).*/\1/")
# each version's sources in a tree of its own (src_$v), its builds side by side
for v in $VERSIONS; do
  mkdir -p src_$v
  tar --exclude="./build*" --exclude="./src_*" --exclude=./.git -cf - . | tar -xf - -C src_$v
  if [ -d dev/ab_$v ]; then cp -r dev/ab_$v/. src_$v/; else cp dev/ab_$v.cu src_$v/$FILE; fi
  ( cmake -S src_$v -B build_$v -G Ninja -DINGOT_WERROR=ON \
      -DINGOT_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a > $OUT/cmake_$v.log 2>&1 &&
    ninja -C build_$v tools/ingot tests/test_sampling_cuda > $OUT/build_$v.log 2>&1 ) &
done
wait
for v in $VERSIONS; do
  [ -x build_$v/tools/ingot ] || { tail -30 $OUT/cmake_$v.log $OUT/build_$v.log; exit 1; }
done
for v in $VERSIONS; do timeout 200 build_$v/tests/test_sampling_cuda 2>&1 | tail -1 | sed "s/^/$v: /"; done
IFS='|' read -ra FILTERS <<< "$FILTER" # alternatives: "a|b"
for i in $(seq $ROUNDS); do
  for v in $VERSIONS; do
    for f in "${FILTERS[@]}"; do
      timeout 200 build_$v/tools/ingot bench --filter "$f" 2>&1 | grep -E "^sampling" | sed "s/^/$v /"
    done
  done
done | tee $OUT/ab_rounds.txt
awk -f dev/min_rows.awk $OUT/ab_rounds.txt
rm -f $OUT/cmake_*.log $OUT/build_*.log

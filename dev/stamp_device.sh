#!/bin/bash
# One device call: the dense kernel instrumented by dev/stamp_dense.py, built
# in a tree of its own (src_s, build_s: never over the tracked file), then
# for each bench filter its bench line, where the clusters landed
# (dev/stamp_clusters.py) and the phases of one launch (dev/stamp_report.py).
# The stamps start at launch LAUNCH (default 40) of each bench run.
# Usage: dev/stamp_device.sh OUTDIR "filter" ["filter" ...]   (LAUNCH=n to change)
set -o pipefail
OUT=${1:?outdir}; shift
mkdir -p src_s && tar --exclude="./build*" --exclude="./src_*" --exclude=./.git -cf - . |
  tar -xf - -C src_s
python3 dev/stamp_dense.py src_s/src/cuda/sampling_dense.cu "${LAUNCH:-40}" || exit 1
cmake -S src_s -B build_s -G Ninja -DINGOT_WERROR=ON \
  -DINGOT_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a > $OUT/cmake_s.log 2>&1 &&
  ninja -C build_s tools/ingot > $OUT/build_s.log 2>&1 || { tail -30 $OUT/build_s.log; exit 1; }
i=0
for f in "$@"; do
  i=$((i+1))
  timeout 120 build_s/tools/ingot bench --filter "$f" > $OUT/stamps$i.txt 2>&1
  grep -E "^sampling" $OUT/stamps$i.txt | head -1
  grep "^ST" $OUT/stamps$i.txt | python3 dev/stamp_clusters.py
  grep "^ST" $OUT/stamps$i.txt | python3 dev/stamp_report.py --rows
done

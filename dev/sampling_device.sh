#!/bin/bash
# One device call for sampling work: build (sm_90a) the library, the sampling
# tests and the bench tool, run the CUDA sampling test, and the sampling bench
# rows (optionally a filter). Usage: dev/sampling_device.sh OUTDIR [filter] [ncu]
set -o pipefail
OUT=${1:?outdir}; FILTER=${2:-sampling}
cmake -S . -B build -G Ninja -DINGOT_WERROR=ON -DINGOT_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a \
  > $OUT/cmake.log 2>&1 && ninja -C build tests/test_sampling_cuda tests/test_sampling tools/ingot \
  > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
timeout 240 build/tests/test_sampling_cuda > $OUT/test_sampling_cuda.log 2>&1; echo "test_sampling_cuda rc $?"
grep -vE "^ok|^  ok" $OUT/test_sampling_cuda.log | head -40
timeout 200 build/tools/ingot bench --filter "$FILTER" --json $OUT/bench.json > $OUT/bench.txt 2>&1
echo "bench rc $?"; grep -E "^sampling|FAIL|fail" $OUT/bench.txt | head -30
# optional: ncu of the first dense-kernel launch of each further bench filter
# (details and per-SASS-line counters as CSV)
if [ $# -ge 2 ]; then shift 2; else set --; fi
i=0
for f in "$@"; do
  i=$((i+1))
  timeout 200 ncu --set full --import-source no -k regex:dense_kernel -c 1 -o $OUT/ncu$i \
    build/tools/ingot bench --filter "$f" > $OUT/ncu$i.log 2>&1; echo "ncu $f rc $?"
  ncu --import $OUT/ncu$i.ncu-rep --page details > $OUT/ncu$i.txt 2>&1
  ncu --import $OUT/ncu$i.ncu-rep --page source --print-source sass --csv > $OUT/ncu$i.sass.csv 2>&1
  grep -E "^  [a-z_]+.*dense_kernel|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Instructions  |Memory Throughput  .*Tbyte|Theoretical Occ" $OUT/ncu$i.txt | head -12
done

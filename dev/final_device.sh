#!/bin/bash
# One device call that validates a session's work: build everything (sm_90a),
# every CTest test (GPU tests included), the Python tests, the benchmark rows of
# the given families (JSON), the PyTorch and Triton side-by-side sampling scripts, and
# compute-sanitizer memcheck on the quick/small variants of the new CUDA tests.
# Usage: dev/final_device.sh OUTDIR "bench filter 1" ["bench filter 2" ...]
set -o pipefail
OUT=${1:?outdir}; shift
cmake -S . -B build -G Ninja -DINGOT_WERROR=ON -DINGOT_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a \
  > $OUT/cmake.log 2>&1 && ninja -C build > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
(cd build && timeout 300 ctest --output-on-failure > $OUT/ctest.log 2>&1); echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*" $OUT/ctest.log | head -12
INGOT_LIBRARY=$PWD/build/libingot.so PYTHONPATH=$PWD/python timeout 240 python3 -m pytest -q python/tests \
  > $OUT/pytest.log 2>&1; echo "pytest rc $?"; tail -2 $OUT/pytest.log
for f in "$@"; do
  n=$(echo "$f" | tr -c 'a-z0-9\n' _)
  timeout 200 build/tools/ingot bench --filter "$f" --json $OUT/bench_$n.json > $OUT/bench_$n.txt 2>&1
  echo "bench $f rc $?"; grep -E "^$f|FAIL" $OUT/bench_$n.txt | head -30
done
INGOT_LIBRARY=$PWD/build/libingot.so PYTHONPATH=$PWD/python timeout 120 python3 bench/torch_sampling.py \
  --json $OUT/torch_sampling.json > $OUT/torch_sampling.txt 2>&1; cat $OUT/torch_sampling.txt | tail -6
INGOT_LIBRARY=$PWD/build/libingot.so PYTHONPATH=$PWD/python timeout 200 python3 bench/triton_softmax.py \
  --json $OUT/triton_softmax.json > $OUT/triton_softmax.txt 2>&1; tail -6 $OUT/triton_softmax.txt
INGOT_TEST_QUICK=1 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_sampling_cuda \
  > $OUT/memcheck_sampling.log 2>&1; echo "memcheck sampling rc $?"; tail -2 $OUT/memcheck_sampling.log
INGOT_TEST_SMALL=1 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_nvfp4_gemm_cuda \
  > $OUT/memcheck_gemm.log 2>&1; echo "memcheck gemm rc $?"; tail -2 $OUT/memcheck_gemm.log
nvcc -O3 -std=c++17 -fmad=false -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc dev/cuda/sampling_math.cu \
  -o build/sampling_math && timeout 120 build/sampling_math > $OUT/sampling_math.txt 2>&1; echo "sampling_math rc $?"
cat $OUT/sampling_math.txt

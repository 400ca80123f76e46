#!/bin/bash
# One device call for the NVFP4 GEMM work: build (sm_90a), the CUDA test,
# the same test small under compute-sanitizer, the benchmark family
# nvfp4_gemm, and a TFLOP/s + cuBLAS-ratio table from its JSON.
# Usage: dev/cuda/nvfp4_gemm_device.sh OUTDIR [tests|bench|all|ncu|all-ncu|final] [bench filter] [ncu filter]
set -o pipefail
OUT=${1:?outdir}; WHAT=${2:-all}; FILTER=${3:-nvfp4_gemm}; NCU_FILTER=${4:-$FILTER}
B=build-dev
if [ "$WHAT" = final ]; then
  # the sm_90a build (tests) and the mma.sync main loop on this GPU (compute_80 PTX only,
  # JIT-compiled for sm_90: no __CUDA_ARCH_FEAT_SM90_ALL, so no wgmma), built side by side
  (cmake -S . -B build-sm80 -G Ninja -DINGOT_WERROR=ON -DINGOT_CUDA_GENCODE=-gencode=arch=compute_80,code=compute_80 \
    -DINGOT_BUILD_TESTS=ON > $OUT/build80.log 2>&1 && ninja -C build-sm80 test_nvfp4_gemm_cuda >> $OUT/build80.log 2>&1) &
  cmake -S . -B $B -G Ninja -DINGOT_WERROR=ON -DINGOT_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a \
    -DINGOT_BUILD_TESTS=ON > $OUT/build.log 2>&1 && ninja -C $B test_nvfp4_gemm_cuda >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
  wait || true
  timeout 150 $B/tests/test_nvfp4_gemm_cuda > $OUT/test.log 2>&1; echo "sm_90a code: tests rc $?"
  grep -E "passed|FAIL|fail|gemm grid|geglu total|mlp M|gelu:|division:" $OUT/test.log
  timeout 250 build-sm80/tests/test_nvfp4_gemm_cuda > $OUT/test80.log 2>&1; echo "sm_80 code (PTX JIT): tests rc $?"
  grep -E "passed|FAIL|fail|gemm grid|geglu total|mlp M|layout case" $OUT/test80.log
  exit 0
fi
cmake -S . -B $B -G Ninja -DINGOT_WERROR=ON -DINGOT_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a \
  -DINGOT_BUILD_TESTS=ON > $OUT/build.log 2>&1 && ninja -C $B ingot_cli test_nvfp4_gemm_cuda >> $OUT/build.log 2>&1 \
  || { tail -30 $OUT/build.log; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee $OUT/gpu.txt
if [ "$WHAT" = all ] || [ "$WHAT" = tests ] || [ "$WHAT" = all-ncu ]; then
  timeout 200 $B/tests/test_nvfp4_gemm_cuda 2>&1 | tee $OUT/test.log | tail -40
  INGOT_TEST_SMALL=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
    $B/tests/test_nvfp4_gemm_cuda > $OUT/sanitizer.log 2>&1; echo "memcheck rc $?"; tail -4 $OUT/sanitizer.log
fi
if [ "$WHAT" = all ] || [ "$WHAT" = bench ] || [ "$WHAT" = all-ncu ]; then
  timeout 250 $B/tools/ingot bench --filter "$FILTER" --json $OUT/bench.json 2>&1 | tee $OUT/bench.log | tail -45
  python3 - $OUT/bench.json <<'PY'
import json, sys, re
rows = json.load(open(sys.argv[1]))["rows"] if "rows" in json.load(open(sys.argv[1])) else json.load(open(sys.argv[1]))["cases"]
t = {}
for r in rows:
    if r.get("time_s") is None: continue
    name = r["name"]; op = r["op"]
    m = re.search(r"\[(\d+), (\d+)\] x (?:W)?\[(\d+), (\d+)\]", name)
    M, K, N = int(m.group(1)), int(m.group(2)), int(m.group(3))
    kind = "down" if N == 2048 else "up"
    t[(op, kind, M)] = (r["time_s"], 2.0 * M * N * K)
print("%-12s %-5s %5s %10s %8s %10s %8s" % ("op", "shape", "M", "us", "TFLOP/s", "cublas us", "ratio"))
for (op, kind, M), (s, f) in sorted(t.items(), key=lambda x: (x[0][1], x[0][0], x[0][2])):
    c = t.get(("cublas_bf16", kind, M))
    print("%-12s %-5s %5d %10.2f %8.1f %10s %8s" % (op, kind, M, s * 1e6, f / s * 1e-12,
          "%.2f" % (c[0] * 1e6) if c else "-", "%.2fx" % (s / c[0]) if c and op != "cublas_bf16" else "-"))
PY
fi
if [ "$WHAT" = ncu ] || [ "$WHAT" = all-ncu ]; then
  timeout 150 ncu --clock-control none --kernel-name regex:nvfp4_gemm_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    $B/tools/ingot bench --quick --filter "$NCU_FILTER" > $OUT/ncu.log 2>&1
  grep -E "Duration|Throughput|Stall|Issued|Eligible|Active Warps|No Eligible|Warp Cycles|Executed Ipc|Pipe" $OUT/ncu.log | head -60
fi

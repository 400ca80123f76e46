#!/usr/bin/env bash
# Everything that needs a GPU, in one go, logs in OUT: the build with warnings
# as errors, every CTest test (GPU tests and the examples' CUDA runs included),
# the Python tests (PyTorch comparisons on the GPU), compute-sanitizer memcheck of
# each CUDA test on its small variant, racecheck of the sampling kernels when
# RACECHECK names a part (e.g. RACECHECK="bf16 151936"), `ingot bench`,
# bench/flashinfer_sampling.py (a skip when FlashInfer's headers are not found:
# FLASHINFER_INCLUDE or an installed flashinfer package), bench/triton_ple.py
# (a skip without Triton) and bench/nccl_sampling.py (every GPU, one process each;
# a skip without libnccl).
# Prints one line per step; exits non-zero if any step failed.
# Usage: [STEPS="build ctest ..."] bench/gpu_check.sh OUT [COMMIT]
#   STEPS: any of build ctest pytest memcheck bench flashinfer triton_ple nccl (default: all,
#          in that order)
#   MEMCHECK_TESTS, MEMCHECK_TIMEOUT: which CUDA tests memcheck runs, and for how long each
set -uo pipefail
OUT=${1:?OUT}; COMMIT=${2:-$(git describe --always --dirty 2>/dev/null || echo unknown)}
BUILD=${BUILD:-build-gpu}
GENCODE=${INGOT_CUDA_GENCODE:--gencode=arch=compute_90a,code=sm_90a}
STEPS=${STEPS:-build ctest pytest memcheck bench flashinfer triton_ple nccl}
mkdir -p "$OUT"
fail=0
want() { [[ " $STEPS " == *" $1 "* ]]; }
step() { # name, command...
  local name=$1; shift
  local t0=$SECONDS
  if "$@" > "$OUT/$name.log" 2>&1; then echo "ok     $name ($((SECONDS - t0)) s)"
  else echo "FAILED $name ($((SECONDS - t0)) s): see $name.log"; tail -15 "$OUT/$name.log"; fail=1; fi
}
want build && step build bash -c "cmake -S . -B $BUILD -G Ninja -DINGOT_WERROR=ON -DINGOT_CUDA=ON \
  -DINGOT_CUDA_GENCODE='$GENCODE' && ninja -C $BUILD"
[ $fail = 0 ] || exit 1
if want ctest; then
  step ctest ctest --test-dir "$BUILD" --output-on-failure -j "${CTEST_JOBS:-1}"
  grep -E "tests passed|tests failed|Skipped|\*\*\*" "$OUT/ctest.log" | head -20
fi
want pytest && step pytest env INGOT_LIBRARY="$PWD/$BUILD/libingot.so" PYTHONPATH="$PWD/python" \
  python3 -m pytest -q python/tests
want pytest && tail -1 "$OUT/pytest.log"
want memcheck && for t in ${MEMCHECK_TESTS:-test_ngram_cuda test_nvfp4_cuda test_nvfp4_gemm_cuda test_sampling_cuda}; do
  step "memcheck_$t" timeout "${MEMCHECK_TIMEOUT:-240}" env INGOT_TEST_QUICK=1 INGOT_TEST_SMALL=1 \
    compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/tests/$t"
  tail -1 "$OUT/memcheck_$t.log"
done
# shared-memory hazards of the dense sampling kernel (minutes under racecheck: opt-in)
if [ -n "${RACECHECK:-}" ]; then
  step racecheck timeout 400 env INGOT_LIBRARY="$PWD/$BUILD/libingot.so" PYTHONPATH="$PWD/python" \
    compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 \
    python3 tests/racecheck_sampling.py $RACECHECK
  tail -2 "$OUT/racecheck.log"
fi
if want bench; then
  step bench "$BUILD/tools/ingot" bench --commit "$COMMIT" --json "$OUT/bench.json"
  grep -E "cases:|FAILED" "$OUT/bench.log" | head -10
fi
# optional: FlashInfer's sampling kernels beside ingot's (exits 0 with "skipped: ..." without them)
if want flashinfer; then
  step flashinfer env INGOT_LIBRARY="$PWD/$BUILD/libingot.so" PYTHONPATH="$PWD/python" \
    python3 bench/flashinfer_sampling.py --json "$OUT/flashinfer_sampling.json"
  grep -E "skipped|FAILED|error" "$OUT/flashinfer.log" | head -5
fi
# optional: a fused Triton row-id hash beside ingot's PLE row ids (exits 0 with "skipped: ..."
# without Triton)
if want triton_ple; then
  step triton_ple env INGOT_LIBRARY="$PWD/$BUILD/libingot.so" PYTHONPATH="$PWD/python" \
    python3 bench/triton_ple.py --json "$OUT/triton_ple.json"
  grep -E "skipped|MISMATCH|error" "$OUT/triton_ple.log" | head -5
fi
# sharded sampling over NCCL on every GPU against all-gather + unsharded sampling
if want nccl; then
  step nccl env INGOT_LIBRARY="$PWD/$BUILD/libingot.so" PYTHONPATH="$PWD/python" \
    python3 bench/nccl_sampling.py --json "$OUT/nccl_sampling.json"
  grep -E "skipped|MISMATCH|error" "$OUT/nccl.log" | head -5
fi
exit $fail

#!/usr/bin/env bash
# Installs ingot from BUILD into a temporary prefix, then builds and runs a
# consumer through find_package (shared and static) and through pkg-config.
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$here" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake" >"$work/build.log" 2>&1 || { tail -n 30 "$work/build.log"; exit 1; }
LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64:${LD_LIBRARY_PATH:-}" "$work/cmake/consumer_shared"
"$work/cmake/consumer_static"
if command -v pkg-config >/dev/null; then
  pc=$(find "$work/prefix" -name ingot.pc -print -quit)
  export PKG_CONFIG_PATH=$(dirname "$pc")
  # static link through pkg-config (Libs.private carries cudart when built with CUDA)
  cuda_lib=""
  if grep -q cudart "$pc"; then cuda_lib="-L$(dirname "$(command -v nvcc)")/../lib64"; fi
  cc "$here/main.c" -o "$work/pc_consumer" $(pkg-config --cflags ingot) \
    "$(pkg-config --variable=libdir ingot)/libingot.a" $cuda_lib \
    $(pkg-config --libs-only-l --static ingot | sed 's/-lingot//') 2>&1 | tail -n 30
  "$work/pc_consumer"
else
  echo "pkg-config not found: skipped the pkg-config consumer"
fi

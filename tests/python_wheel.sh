#!/usr/bin/env bash
# The Python package as a user gets it: builds the wheel with pip (library
# from BUILD_DIR), checks that it carries libingot.so under an honest
# platform tag, installs it into a fresh virtual environment
# (BUILD_DIR/wheel-venv, with python/requirements-test.txt), and runs
# python/tests against the installed package from a folder outside the
# repository (no PYTHONPATH, no INGOT_LIBRARY). Fails if the build wrote
# anything into the source tree.
#   tests/python_wheel.sh BUILD_DIR    (PYTHON, PYTEST_ARGS, OTHER_BUILDS from the environment)
set -euo pipefail
build=$(cd "${1:?usage: python_wheel.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
pytest_args=${PYTEST_ARGS:--q}
say() { echo "python_wheel: $*"; }
fail() { echo "python_wheel: FAILED: $*" >&2; exit 1; }

[ -f "$build/libingot.so" ] || fail "no $build/libingot.so (build the library first: make build)"

# Untracked and ignored entries of the source tree, before and after; not
# counted: the caches of pytest runs and the folders named in OTHER_BUILDS
# (the Makefile's other build trees), which `make -j test` may create meanwhile.
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  tree_state() {
    local skip='/(__pycache__|\.pytest_cache)/$' d
    for d in ${OTHER_BUILDS:-}; do skip+="|^!! ${d%/}/\$"; done
    git -C "$root" status --porcelain --ignored | grep -E '^(\?\?|!!) ' | grep -Ev "$skip" || true
  }
else
  tree_state() { echo "(not a git checkout)"; }
fi
state_before=$(tree_state)
artifacts=()  # what a setuptools build leaves in place, when it was not there before
for p in python/build python/ingot.egg-info python/ingot/lib; do
  [ -e "$root/$p" ] || artifacts+=("$p")
done

wheels=$build/wheel
venv=$build/wheel-venv
log=$build/wheel-build.log
rm -rf "$wheels" "$venv"
"$python" -m venv "$venv"
py=$venv/bin/python

# 1. The wheel, as `pip wheel ./python` makes it; the library from $build
#    (brought up to date there; the Makefile built it just before).
say "pip wheel ./python (INGOT_BUILD_DIR=$build; full log: $log)"
if ! (cd "$build" && INGOT_BUILD_DIR=$build "$py" -m pip wheel --no-deps -v -w "$wheels" "$root/python") \
    >"$log" 2>&1; then
  tail -n 60 "$log"
  fail "pip wheel ./python failed"
fi
grep -E '^ *ingot: ' "$log" | sed 's/^ */  /' || true
shopt -s nullglob
found=("$wheels"/ingot-*.whl)
shopt -u nullglob
[ "${#found[@]}" -eq 1 ] || fail "expected one ingot wheel in $wheels, found ${#found[@]}"
whl=${found[0]}

# 2. What it carries: the library of $build, byte for byte, and its tags.
"$py" - "$whl" "$build/libingot.so" <<'EOF'
import os, sys, zipfile
whl, lib = sys.argv[1:]
name = os.path.basename(whl)
problems = []
with zipfile.ZipFile(whl) as z:
    names = z.namelist()
    if "ingot/lib/libingot.so" not in names:
        problems.append("the wheel has no ingot/lib/libingot.so")
    elif z.read("ingot/lib/libingot.so") != open(os.path.realpath(lib), "rb").read():
        problems.append(f"ingot/lib/libingot.so differs from {lib}")
    meta = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
tags = [l.split(":", 1)[1].strip() for l in meta.splitlines() if l.startswith("Tag:")]
if "Root-Is-Purelib: false" not in meta:
    problems.append("WHEEL does not say Root-Is-Purelib: false")
if not tags or any(t.endswith("-any") for t in tags) or name.endswith("-any.whl"):
    problems.append(f"not a platform wheel: {name}, tags {tags}")
if problems:
    sys.exit("python_wheel: FAILED: " + name + ": " + "; ".join(problems))
print(f"python_wheel: {name}: ingot/lib/libingot.so ({len(names)} files), tags {', '.join(tags)}")
EOF

# 3. Installed into the fresh venv, with the test requirements.
say "pip install $(basename "$whl") -r python/requirements-test.txt"
"$py" -m pip install -q "$whl" -r "$root/python/requirements-test.txt"

# 4. Used from outside the repository: the installed package and its bundled
#    library, a small CPU op, then the whole test suite.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cli=()
if [ -x "$build/tools/ingot" ]; then cli=(INGOT_CLI="$build/tools/ingot"); fi
run() {
  (cd "$work" && env -u INGOT_LIBRARY -u PYTHONPATH -u PYTHONHOME -u PYTHONSTARTUP \
      INGOT_TEST_INSTALLED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1 "${cli[@]}" "$@")
}
run "$py" - "$root" <<'EOF'
import os, sys, sysconfig
import numpy as np
import ingot
root = os.path.realpath(sys.argv[1])
site = os.path.realpath(sysconfig.get_paths()["platlib"])
where = os.path.realpath(ingot.__file__)
lib = os.path.realpath(ingot.library_path)
if not where.startswith(site + os.sep) or where.startswith(os.path.join(root, "python") + os.sep):
    sys.exit(f"python_wheel: FAILED: ingot imported from {where}, not from {site}")
if lib != os.path.join(site, "ingot", "lib", "libingot.so"):
    sys.exit(f"python_wheel: FAILED: the library loaded is {lib}, not the bundled copy")
with ingot.Context("cpu") as ctx:
    x = np.linspace(-3.0, 3.0, 4 * 32, dtype=np.float32).reshape(4, 32)
    gs = ingot.nvfp4_global_scale(ctx, x)
    values, scales = ingot.nvfp4_quantize(ctx, x, gs)
    back = np.asarray(ingot.nvfp4_dequantize(ctx, values, scales, gs))
err = float(np.abs(back - x).max())
if back.shape != x.shape or not err <= 0.25 * float(np.abs(x).max()):
    sys.exit(f"python_wheel: FAILED: NVFP4 round trip on the CPU: shape {back.shape}, error {err}")
print(f"python_wheel: ingot {ingot.version()} from {where}, library {lib}; "
      f"NVFP4 round trip on the CPU: max error {err:.3g}")
EOF
say "pytest $pytest_args $root/python/tests (installed package, from $work)"
# In-process, so that afterwards no module of python/ingot may be loaded.
pytest_main='
import os, sys
import pytest
root = os.path.realpath(sys.argv[1])
code = pytest.main(["-p", "no:cacheprovider", *sys.argv[2:], os.path.join(root, "python", "tests")])
tree = os.path.join(root, "python", "ingot") + os.sep
leaked = sorted(name for name, m in list(sys.modules.items())
                if os.path.realpath(getattr(m, "__file__", None) or "/").startswith(tree))
if leaked:
    sys.exit("python_wheel: FAILED: the tests imported from the source tree: " + ", ".join(leaked))
sys.exit(code)
'
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
run "$py" -c "$pytest_main" "$root" $pytest_args

# 5. The source tree is as it was.
for p in "${artifacts[@]}"; do
  [ ! -e "$root/$p" ] || fail "the build left $p in the source tree"
done
state_after=$(tree_state)
if [ "$state_before" != "$state_after" ]; then
  diff <(echo "$state_before") <(echo "$state_after") >&2 || true
  fail "the source tree changed (git status --ignored, above: < before, > after)"
fi
say "OK (the source tree is unchanged)"

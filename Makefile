# The two commands a new user needs:
#   make bench   build, check every kernel against the CPU reference, time it
#                (on the GPU when there is one, else on the CPU, with numpy
#                and torch timed beside the CPU backend)
#   make test    build and run every test: C tests and the examples (CTest),
#                the CPU tests again under AddressSanitizer +
#                UndefinedBehaviorSanitizer, the Python tests (against the
#                source tree, then against the wheel installed in a fresh
#                venv), an install whose consumers build with CMake and
#                pkg-config, and the fuzz targets for FUZZ_SECONDS each (with
#                clang)
# Everything is built here; nothing needs installing first except a C
# compiler, CMake and Python 3 (nvcc is optional: without it the library is
# CPU-only).

BUILD       ?= build
BUILD_ASAN  ?= build-asan
BUILD_FUZZ  ?= build-fuzz
FUZZ_CC     ?= clang
FUZZ_SECONDS ?= 30
BUILD_TYPE  ?= Release
CMAKE_FLAGS ?=
BENCH_ARGS  ?=
PYTEST_ARGS ?= -q
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
GENERATOR   := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
PYTHON      ?= python3
# Python with numpy + pytest: the system one if it has them, else a venv here.
VENV        := $(BUILD)/venv
ifeq ($(CI),true)
  CMAKE_FLAGS += -DINGOT_WERROR=ON
endif

.PHONY: all build bench test test-c test-asan test-python test-wheel test-install test-fuzz python-env install clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The revision measured, recorded in the results (a tarball has no git: "unknown").
COMMIT      := $(shell git describe --always --dirty 2>/dev/null || echo unknown)

# After `ingot bench`, on a CPU run only, bench/numpy_cpu.py times numpy (and
# torch, if installed) beside ingot's CPU backend. A CPU run is what ingot
# bench itself decides: --cpu given, or ingot_backend_available(CUDA) false,
# which `ingot version` prints ("backends: cpu, cuda" only with a usable
# device). Asking the built library, not nvidia-smi or nvcc, also covers a
# CUDA build on a machine without a GPU or whose driver is unusable.
# The Python is test-python's (numpy + pytest here, else $(VENV) if made);
# without numpy the script says so and passes (`make python-env` installs
# it). Both run (not after a usage error, status 2); either one failing
# fails the target.
BENCH_PY_ARGS = $(filter --quick,$(BENCH_ARGS))

bench: build
	@echo "$(BUILD)/tools/ingot bench --commit $(COMMIT) $(BENCH_ARGS)"; rc=0; \
	$(BUILD)/tools/ingot bench --commit $(COMMIT) $(BENCH_ARGS) || rc=$$?; \
	test $$rc -ne 2 || exit 2; \
	case " $(BENCH_ARGS) " in \
	  *" --list "*|*" --help "*|*" -h "*) exit $$rc;; \
	  *" --cpu "*) ;; \
	  *) if $(BUILD)/tools/ingot version | grep -q '^backends: cpu, cuda'; then exit $$rc; fi;; \
	esac; \
	py=$(PYTHON); $$py -c "import numpy, pytest" >/dev/null 2>&1 || \
	  { test -x $(VENV)/bin/python && py=$(VENV)/bin/python; }; \
	echo; echo "$$py bench/numpy_cpu.py $(BENCH_PY_ARGS)"; \
	INGOT_LIBRARY=$(CURDIR)/$(BUILD)/libingot.so PYTHONPATH=$(CURDIR)/python \
	  $$py bench/numpy_cpu.py $(BENCH_PY_ARGS) || rc=1; \
	exit $$rc

test: test-c test-asan test-python test-wheel test-install test-fuzz

test-c: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The CPU tests under ASan + UBSan (CUDA off: the sanitizers and the CUDA
# runtime do not mix; GPU tests run under compute-sanitizer instead).
test-asan:
	cmake -S . -B $(BUILD_ASAN) $(GENERATOR) -DCMAKE_BUILD_TYPE=Debug -DINGOT_CUDA=OFF \
	  -DINGOT_BUILD_TOOLS=OFF -DINGOT_SANITIZE=address,undefined $(CMAKE_FLAGS)
	cmake --build $(BUILD_ASAN) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(BUILD_ASAN) --output-on-failure -j $(JOBS)

# The libFuzzer targets of tests/fuzz, FUZZ_SECONDS each, in a clang tree
# (CUDA off, ASan + UBSan). Skipped, with a message, where $(FUZZ_CC) or its
# libFuzzer runtime is missing; test-c and test-asan replay the corpora anyway.
test-fuzz:
	@if ! command -v $(FUZZ_CC) >/dev/null 2>&1; then \
	  echo "test-fuzz: SKIPPED: no $(FUZZ_CC) here (libFuzzer needs clang with compiler-rt;"; \
	  echo "test-fuzz: the corpora are still replayed by test-c and test-asan)"; \
	  exit 0; \
	fi; \
	mkdir -p $(BUILD_FUZZ); \
	cmake -S . -B $(BUILD_FUZZ) $(GENERATOR) -DCMAKE_C_COMPILER=$(FUZZ_CC) \
	  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DINGOT_CUDA=OFF -DINGOT_BUILD_TOOLS=OFF \
	  -DINGOT_FUZZ=ON -DINGOT_FUZZ_SECONDS=$(FUZZ_SECONDS) $(CMAKE_FLAGS) \
	  >$(BUILD_FUZZ)/configure.log 2>&1 || { cat $(BUILD_FUZZ)/configure.log; exit 1; }; \
	if ! grep -q '^INGOT_HAVE_LIBFUZZER:INTERNAL=1' $(BUILD_FUZZ)/CMakeCache.txt; then \
	  echo "test-fuzz: SKIPPED: $(FUZZ_CC) cannot link -fsanitize=fuzzer (install its libFuzzer"; \
	  echo "test-fuzz: runtime: Debian/Ubuntu libclang-rt-dev); see $(BUILD_FUZZ)/configure.log"; \
	  exit 0; \
	fi; \
	cmake --build $(BUILD_FUZZ) --target ingot_fuzz_targets -j $(JOBS) && \
	ctest --test-dir $(BUILD_FUZZ) -L fuzz-run --output-on-failure -j $(JOBS)

# Install into a temporary prefix; build consumers with find_package and pkg-config.
test-install: build
	bash tests/consumer/run.sh $(BUILD)

python-env:
	@if $(PYTHON) -c "import numpy, pytest" >/dev/null 2>&1; then \
	  echo "python: using $$(command -v $(PYTHON))"; \
	else \
	  test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV); \
	  $(VENV)/bin/python -m pip install -q -r python/requirements-test.txt; \
	fi

test-python: build python-env
	@py=$(PYTHON); $$py -c "import numpy, pytest" >/dev/null 2>&1 || py=$(VENV)/bin/python; \
	  INGOT_LIBRARY=$(CURDIR)/$(BUILD)/libingot.so PYTHONPATH=$(CURDIR)/python \
	  $$py -m pytest $(PYTEST_ARGS) python/tests

# The wheel (pip wheel ./python, libingot.so from $(BUILD)) installed into a
# fresh venv, $(BUILD)/wheel-venv, with python/requirements-test.txt (from the
# network, as python-env), and python/tests run against it from outside the
# tree. Fails if the wheel lacks the library or the source tree changed.
test-wheel: build
	PYTHON=$(PYTHON) PYTEST_ARGS="$(PYTEST_ARGS)" OTHER_BUILDS="$(BUILD_ASAN) $(BUILD_FUZZ)" \
	  bash tests/python_wheel.sh $(BUILD)

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ)

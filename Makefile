# ropepool — the newcomer's two commands:
#   make test   build everything and run every test (C, Python; CUDA tests skip without a GPU)
#   make run    build and run the benchmark on its default preset, verified against the reference
# Both install what they need: a Python virtual environment under $(BUILD)/venv with the test
# requirements, and a CMake build under $(BUILD).

BUILD       ?= build
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
PYTHON      ?= python3
CMAKE_FLAGS ?=
VENV        := $(BUILD)/venv
VENV_PY     := $(abspath $(VENV))/bin/python

.PHONY: all build test run asan tsan werror test-cuda test-aarch64 aarch64-tools install clean distclean

all: build

# Downloads are retried as whole attempts: CI once had a 216 MB wheel of torch's cut at the same
# byte on every one of pip's own resumes. pip's cache keeps the wheels an attempt finished.
# $(call retry,COMMAND): COMMAND up to three times, 30 s apart; fails when the third fails.
retry = for attempt in 1 2 3; do $(1) && break; [ $$attempt != 3 ] || exit 1; \
          echo "attempt $$attempt of 3 failed; retrying in 30 s" >&2; sleep 30; done

$(VENV)/.ready: python/requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(call retry,$(VENV_PY) -m pip install --quiet --upgrade pip)
	$(call retry,$(VENV_PY) -m pip install --quiet --retries 10 --timeout 60 \
	                       -r python/requirements-test.txt)
	touch $@

$(BUILD)/CMakeCache.txt: $(VENV)/.ready
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=$(VENV_PY) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The default preset (Llama-3-8B shapes) on the CPU, and on the GPU when there is one; every result
# verified. The table goes to the terminal, the figures to $(BUILD)/bench-results.{json,svg}.
# More: $(BUILD)/bench/ropepool-bench --help.
# Then the call users make: ropepool.rope_pool_fused from Python (NumPy, and torch when installed),
# with fresh outputs and with q_out/k_out, beside the C call in the same process, and the same step
# in plain torch compiled by Inductor.
run: build
	$(BUILD)/bench/ropepool-bench --json $(BUILD)/bench-results.json --svg $(BUILD)/bench-results.svg
	PYTHONPATH=$(abspath $(BUILD))/python $(VENV_PY) -m ropepool.bench --torch-compile

# GPU tests (label cuda: the C suites, compute-sanitizer runs, the Python CUDA tests) on a machine
# with an NVIDIA GPU. They use the system's $(PYTHON), which needs numpy, pytest and torch with
# CUDA: the test venv's torch is PyPI's default wheel (its CUDA may not match the machine's driver),
# and GPU machines are often offline. Without nvcc or a GPU it fails, saying which (the benchmark's
# probe): every GPU test would skip, or none would be registered, and ctest would still pass.
test-cuda:
	cmake -S . -B $(BUILD)-cuda -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=$$(command -v $(PYTHON)) \
	      $(CMAKE_FLAGS)
	cmake --build $(BUILD)-cuda -j $(JOBS)
	@backends=$$($(BUILD)-cuda/bench/ropepool-bench --list-backends); \
	 echo "$$backends" | grep -q '^cuda: available' || \
	 { echo "make test-cuda: needs nvcc and a GPU; $$(echo "$$backends" | grep '^cuda:')" >&2; exit 1; }
	ctest --test-dir $(BUILD)-cuda --output-on-failure -L cuda --no-tests=error

# The aarch64 build (NEON kernels) cross-compiled and its C tests run under user-mode QEMU, every
# kernel level included (cmake/aarch64-linux-gnu.cmake). Installs the Debian cross toolchain and
# QEMU when they are missing (as root, or through sudo). Emulation is ~10x slower: the long suites
# run at reduced sizes (ROPEPOOL_TEST_QUICK=1), every test still runs.
AARCH64_PACKAGES := gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
AARCH64_SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
aarch64-tools:
	@if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null || \
	    ! test -f /usr/aarch64-linux-gnu/lib/libc.so.6; then \
	  echo "installing $(AARCH64_PACKAGES)"; \
	  $(call retry,$(AARCH64_SUDO) apt-get update -qq) && \
	  $(call retry,DEBIAN_FRONTEND=noninteractive $(AARCH64_SUDO) apt-get install -y -qq \
	    --no-install-recommends $(AARCH64_PACKAGES) >/dev/null); \
	fi

test-aarch64: aarch64-tools
	cmake -S . -B $(BUILD)-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
	      -DCMAKE_BUILD_TYPE=Release -DROPEPOOL_PYTHON=OFF -DROPEPOOL_CUDA=OFF -DROPEPOOL_WERROR=ON \
	      $(CMAKE_FLAGS)
	cmake --build $(BUILD)-aarch64 -j $(JOBS)
	ROPEPOOL_TEST_QUICK=1 ctest --test-dir $(BUILD)-aarch64 --output-on-failure -j $(JOBS) -LE slow

# The C tests under AddressSanitizer + UndefinedBehaviorSanitizer.
asan:
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DROPEPOOL_SANITIZE=ON -DROPEPOOL_PYTHON=OFF \
	      -DROPEPOOL_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD)-asan -j $(JOBS)
	ctest --test-dir $(BUILD)-asan --output-on-failure -j $(JOBS) -LE slow

# The thread pool and concurrent calls under ThreadSanitizer.
tsan:
	cmake -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DROPEPOOL_TSAN=ON -DROPEPOOL_PYTHON=OFF \
	      -DROPEPOOL_CUDA=OFF -DROPEPOOL_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD)-tsan -j $(JOBS) --target test_context test_numerics
	ctest --test-dir $(BUILD)-tsan --output-on-failure -R '^(context|numerics)$$'

# Everything with warnings as errors, the Python extension included.
werror: $(VENV)/.ready
	cmake -S . -B $(BUILD)-werror -DROPEPOOL_WERROR=ON -DPython3_EXECUTABLE=$(VENV_PY) $(CMAKE_FLAGS)
	cmake --build $(BUILD)-werror -j $(JOBS)

# The C library, its header, CMake package and pkg-config file. PREFIX=DIR installs under DIR
# instead of the build's CMAKE_INSTALL_PREFIX (/usr/local by default); DESTDIR=DIR stages the
# install under DIR (cmake --install reads it from the environment). It installs the build `make`
# made when there is one; else it builds the library alone in $(BUILD)-install: going through
# `build` made the test venv first, a download of a few GB (torch, transformers, mlx) that the
# library does not use and a packager's offline machine cannot make.
INSTALL_BUILD := $(if $(wildcard $(BUILD)/CMakeCache.txt),$(BUILD),$(BUILD)-install)
install:
	$(if $(wildcard $(BUILD)/CMakeCache.txt),,cmake -S . -B $(INSTALL_BUILD) -DCMAKE_BUILD_TYPE=Release \
	  -DROPEPOOL_TESTS=OFF -DROPEPOOL_BENCH=OFF -DROPEPOOL_PYTHON=OFF $(CMAKE_FLAGS))
	cmake --build $(INSTALL_BUILD) -j $(JOBS)
	cmake --install $(INSTALL_BUILD) $(if $(PREFIX),--prefix $(PREFIX))

# clean keeps the test venv ($(BUILD)/venv: the downloads of a few GB that `make test` would make
# again); distclean removes it too.
clean:
	if [ -d $(BUILD) ]; then find $(BUILD) -mindepth 1 -maxdepth 1 ! -name venv -exec rm -rf {} +; fi
	rm -rf $(BUILD)-install $(BUILD)-asan $(BUILD)-tsan $(BUILD)-werror $(BUILD)-cuda $(BUILD)-aarch64

distclean: clean
	rm -rf $(BUILD)

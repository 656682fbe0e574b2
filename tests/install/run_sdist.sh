#!/usr/bin/env bash
# The Python package as a release makes it: an sdist of the repository (python -m build), a wheel
# built from that sdist alone (pip wheel: only what the sdist holds is there), installed apart
# from the tree and called. No network: both builds use the test venv's scikit-build-core. The
# CUDA backend is left out (the same CMake builds it in the main build, where its tests run); on a
# GPU machine, check_installed.py also takes frameworks to call the CUDA wheel with
# (bench/results/cuda-h100-stop40-sdist-wheel.log).
set -euo pipefail
python=$1 source=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$python" -m build --sdist --no-isolation --outdir "$work/dist" "$source" > "$work/sdist.log" 2>&1 ||
  { tail -20 "$work/sdist.log"; exit 1; }
sdist=$(ls "$work"/dist/ropepool-*.tar.gz)
# the sdist holds the C library: the header, the sources, the CMake files
listing=$(tar -tzf "$sdist")
for path in include/ropepool.h src/rope_pool.c CMakeLists.txt python/CMakeLists.txt pyproject.toml; do
  grep -qx "ropepool-[0-9.]*/$path" <<< "$listing" || { echo "the sdist lacks $path"; exit 1; }
done
"$python" -m pip wheel --no-deps --no-build-isolation --wheel-dir "$work/wheel" \
  -Ccmake.define.ROPEPOOL_CUDA=OFF "$sdist" > "$work/wheel.log" 2>&1 || { tail -20 "$work/wheel.log"; exit 1; }
"$python" -m pip install --quiet --no-deps --target "$work/site" "$work"/wheel/ropepool-*.whl
cd "$work" && PYTHONPATH="$work/site" "$python" "$source/tests/install/check_installed.py" "$work/site"

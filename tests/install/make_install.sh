#!/usr/bin/env bash
# `make install` in a tree `make` has not built (a packager's first command): what it would run
# (make -n) builds the C library alone, with no test venv (a pip download of a few GB).
set -euo pipefail
source=$1 work=$2
plan=$(make -n -C "$source" install BUILD="$work/build" PREFIX="$work/prefix")
if grep -E "venv|pip " <<< "$plan"; then
  echo "make install would make the test venv:"; echo "$plan"; exit 1
fi
grep -q -- "-DROPEPOOL_PYTHON=OFF" <<< "$plan" || { echo "not the library alone:"; echo "$plan"; exit 1; }
grep -q "cmake --install $work/build-install --prefix $work/prefix" <<< "$plan"
echo "ok: $plan"

#!/usr/bin/env bash
# On the device machine, one call (about 5 minutes): a change to the Python binding or the torch
# extension verified and timed against main, on torch CUDA tensors. Builds this tree (NEW, with its
# tests) and main's (OLD; the caller first puts it beside this tree: git archive main | (mkdir -p
# dev_main && tar -x -C dev_main)), runs `ctest -L cuda` on NEW (the C CUDA suites and the Python
# CUDA tests), then, NEW and OLD interleaved, two rounds of `python -m ropepool.bench --backend cuda`
# (host time per eager call, back to back, GPU time; the torch operator's out overload) and
# measure_torch_op.py (direct call vs the operator). Output: $OUT.
# Overrides: PY_BENCH (the bench's arguments).
# Stop 36: branch gpu/native-cuda (ropepool._ropepool_torch describes and allocates CUDA tensors).
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
OLD=${MAIN_TREE:-dev_main}
t0=$(date +%s)
PY=$(command -v python3)
CONF="-DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real -DPython3_EXECUTABLE=$PY"
( cmake -S $OLD -B $OLD/b $CONF -DROPEPOOL_TESTS=OFF > $OUT/old-cmake.log 2>&1 &&
  cmake --build $OLD/b -j 6 > $OUT/old-build.log 2>&1 || echo "OLD build failed" ) &
cmake -S . -B build-dev $CONF > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
cmake --build build-dev -j 10 > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; exit 1; }
wait; echo "builds $(( $(date +%s) - t0 )) s"
grep -E "ropepool: .*(skipping|torch)" $OUT/cmake.log $OUT/old-cmake.log
(cd build-dev && timeout 300 ctest --output-on-failure -j 4 -L cuda) > $OUT/cuda-tests.log 2>&1; echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*" $OUT/cuda-tests.log
B="--backend cuda ${PY_BENCH:--T 1,64,1024 --rounds 7 --profile}"
for r in 1 2; do
  for side in NEW OLD; do
    P=build-dev/python; [ $side = OLD ] && P=$OLD/b/python
    echo "== round $r $side: python -m ropepool.bench $B"
    PYTHONPATH=$P timeout 150 $PY -m ropepool.bench $B
    echo "== round $r $side: measure_torch_op.py --device cuda --dtype bfloat16"
    PYTHONPATH=$P timeout 90 $PY python/tools/measure_torch_op.py --device cuda --dtype bfloat16 --rounds 100
  done
done 2>&1 | tee $OUT/ab.log
echo "total $(( $(date +%s) - t0 )) s"

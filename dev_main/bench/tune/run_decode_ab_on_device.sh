#!/usr/bin/env bash
# On the device machine, one call (about 6 minutes): verify branch decode-position-row and time
# it against main. The caller first puts main's files beside this tree, in the repo root:
#     git archive main | (mkdir -p dev_main && tar -x -C dev_main)
# Builds this tree (NEW, with its tests) and main's (OLD, the benchmark only) side by side, runs
# `ctest -L cuda` on NEW, then times decode sizes of plain calls and the mRoPE presets (which this
# branch moves to the HALF = 0 kernels), NEW and OLD interleaved. Output: $OUT.
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
OLD=${MAIN_TREE:-dev_main}
t0=$(date +%s)
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real \
      -DPython3_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
( cmake -S $OLD -B $OLD/b -DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real -DROPEPOOL_TESTS=OFF \
        -DROPEPOOL_PYTHON=OFF > $OUT/old-cmake.log 2>&1 && cmake --build $OLD/b -j 5 --target ropepool-bench > $OUT/old-build.log 2>&1 ) &
cmake --build build-dev -j 11 > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; exit 1; }
wait; echo "builds $(( $(date +%s) - t0 )) s"
(cd build-dev && timeout 300 ctest --output-on-failure -j 6 -L cuda) > $OUT/cuda-tests.log 2>&1; echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*" $OUT/cuda-tests.log
{
for r in 1 2; do
  for side in NEW OLD; do
    X=build-dev/bench/ropepool-bench; [ $side = OLD ] && X=$OLD/b/bench/ropepool-bench
    R="timeout 60 $X --backend cuda --dtype bf16 --seconds 0.03 --no-unfused --no-verify"
    echo "== round $r $side 32/8/128 hot";  $R --shape 32/8/128 --sets 1 -T 1,16,64,256,1024
    echo "== round $r $side 32/4/64 hot";   $R --shape 32/4/64 --sets 1 -T 1,16,64,256
    echo "== round $r $side qwen2.5-vl-7b hot (mRoPE)"; $R --preset qwen2.5-vl-7b --sets 1 -T 1,64,256,1024,4096,16384
    echo "== round $r $side qwen3-vl-8b hot (mRoPE)";   $R --preset qwen3-vl-8b --sets 1 -T 1,64,256,1024,4096,16384
    echo "== round $r $side qwen3-8b --qk-norm on hot"; $R --preset qwen3-8b --qk-norm on --sets 1 -T 1,64,256,1024
  done
done
} 2>&1 | grep -E "^==|^ +[0-9]+ " | tee $OUT/decode-ab.log
echo "total $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# Stop 46: the decode kernel splitting a wide token's heads over blocks (plan.cu,
# plain_decode_heads) against the tree before it (dev_main: `git archive HEAD | tar -x -C dev_main`),
# in one short device call: NEW built with its C tests (no Python), OLD's benchmark alone; the
# CUDA suites but the sanitizer and Python ones (the kernel and plan tests), then ropepool-bench on
# both, interleaved, two rounds, hot and cold, at the decode sizes the split changes. Output: $OUT.
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
t0=$(date +%s)
CONF="-DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real -DROPEPOOL_PYTHON=OFF"
cmake -S . -B build-ab $CONF > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
( cmake -S dev_main -B dev_main/b $CONF -DROPEPOOL_TESTS=OFF > $OUT/main-cmake.log 2>&1 &&
  cmake --build dev_main/b -j 4 --target ropepool-bench > $OUT/main-build.log 2>&1 || echo "main build failed" ) &
cmake --build build-ab -j 12 > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; exit 1; }
wait; echo "builds $(( $(date +%s) - t0 )) s"
(cd build-ab && timeout 150 ctest --output-on-failure -j 8 -L cuda -E "memcheck|racecheck|python" && ctest --output-on-failure -R cuda_plan) \
  > $OUT/cuda-tests.log 2>&1; echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*" $OUT/cuda-tests.log
for r in 1 2; do
  for side in NEW OLD; do
    X=build-ab/bench/ropepool-bench; V=""; [ $side = OLD ] && { X=dev_main/b/bench/ropepool-bench; V="--no-verify"; }
    R="timeout 40 $X --backend cuda --dtype bf16 --seconds 0.02 --no-unfused $V -T 1,16,64,256"
    for s in "--preset deepseek-v3-mla" "--shape 64/8/128" "--shape 32/8/128"; do
      echo "== round $r $side $s hot"; $R $s --sets 1
      echo "== round $r $side $s cold"; $R $s
    done
  done
done 2>&1 | grep -E "^==|^ +[0-9]+ |rror|FAIL" | tee $OUT/decode-split-ab.log
echo "total $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# On the device machine, one call (about 6 minutes): the decode kernel's grid capped at one wave of
# resident blocks (plan.cu, wave_sms; stop 41) against main, where a call past one wave launched a
# second, partial one. The caller first puts main's files beside this tree:
#     git archive main | (mkdir -p dev_main && tar -x -C dev_main)
# Builds this tree (NEW, with its tests) and main's benchmark (OLD), runs `ctest -L cuda` on NEW,
# then ropepool-bench on both, interleaved, two rounds, hot (--sets 1) and cold, at the decode
# sizes the cap changes. STEPS (default: tests ab) picks steps; TOKENS and SHAPES (';'-separated
# ropepool-bench arguments) narrow the comparison; SECONDS_PER_T (0.03) sets each size's timing,
# PYTHON=OFF builds NEW without its Python package, CTEST_EXCLUDE (a regex) leaves suites out, LOG
# (decode-wave-ab) names the A/B log. Other A/Bs of the decode kernel run it so (run_s46_ab.sh).
# Output: $OUT.
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
STEPS=${STEPS:-"tests ab"}
has() { [[ " $STEPS " == *" $1 "* ]]; }
t0=$(date +%s)
CONF="-DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real"
cmake -S . -B build-dev $CONF -DROPEPOOL_PYTHON=${PYTHON:-ON} -DPython3_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
( cmake -S dev_main -B dev_main/b $CONF -DROPEPOOL_TESTS=OFF -DROPEPOOL_PYTHON=OFF > $OUT/main-cmake.log 2>&1 &&
  cmake --build dev_main/b -j 4 --target ropepool-bench > $OUT/main-build.log 2>&1 || echo "main build failed" ) &
cmake --build build-dev -j 12 > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; exit 1; }
wait; echo "builds $(( $(date +%s) - t0 )) s"
if has tests; then
  (cd build-dev && timeout 300 ctest --output-on-failure -j 6 -L cuda ${CTEST_EXCLUDE:+-E "$CTEST_EXCLUDE"} && ctest --output-on-failure -R cuda_plan) \
    > $OUT/cuda-tests.log 2>&1; echo "ctest rc $?"
  grep -E "tests passed|Failed|\*\*\*" $OUT/cuda-tests.log
fi
T=${TOKENS:-200,264,300,350,400,450,512}
SHAPE_ARGS=("--shape 32/8/128" "--shape 16/8/256" "--shape 28/4/128" "--shape 64/8/128" "--preset deepseek-v3-mla"
            "--shape 32/8/128 --kv-dtype fp8_e4m3" "--shape 32/8/128 --style gptj" "--shape 32/4/64")
[ -n "${SHAPES:-}" ] && IFS=';' read -r -a SHAPE_ARGS <<< "$SHAPES"  # e.g. SHAPES="--shape 32/8/128;--preset deepseek-v3-mla"
has ab && for r in 1 2; do
  for side in NEW OLD; do
    X=build-dev/bench/ropepool-bench; V=""; [ $side = OLD ] && { X=dev_main/b/bench/ropepool-bench; V="--no-verify"; }
    R="timeout 60 $X --backend cuda --dtype bf16 --seconds ${SECONDS_PER_T:-0.03} --no-unfused $V -T $T"
    for s in "${SHAPE_ARGS[@]}"; do
      echo "== round $r $side $s hot"; $R $s --sets 1
      echo "== round $r $side $s cold"; $R $s
    done
  done
done 2>&1 | grep -E "^==|^ +[0-9]+ |rror|FAIL" | tee $OUT/${LOG:-decode-wave-ab}.log
echo "total $(( $(date +%s) - t0 )) s"

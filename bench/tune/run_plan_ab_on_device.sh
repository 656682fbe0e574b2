#!/usr/bin/env bash
# On the device machine, one call (about 4 minutes): a plan change (plan.cu) verified and timed
# against main. Builds this tree (NEW, with its tests) and main's (OLD, benchmark only; the caller
# first puts it beside this tree: git archive main | (mkdir -p dev_main && tar -x -C dev_main)),
# runs `ctest -L cuda` on NEW, verifies NEW's rows, then times the calls in CASES (one
# ropepool-bench argument list a line) NEW and OLD interleaved, two rounds, and the sweeps in
# SWEEPS (ropepool-tune-cuda argument lists). Output: $OUT.
# Overrides: AB_CASES (cases separated by ';'), AB_BENCH (the common ropepool-bench arguments),
# and a variant tree in dev_var (timed like OLD, between NEW and OLD).
# Stop 33: prefill blocks sized so that the busiest multiprocessor's tokens are resident at once.
# Stop 35: the prefill kernel's heads after the first in batches (prefill.cu).
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
OLD=${MAIN_TREE:-dev_main}
t0=$(date +%s)
CONF="-DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real"
cmake -S . -B build-dev $CONF -DPython3_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
SIDES="NEW OLD"; [ -d dev_var ] && SIDES="NEW VAR OLD"
for tree in $OLD dev_var; do
  [ -d $tree ] || continue
  ( cmake -S $tree -B $tree/b $CONF -DROPEPOOL_TESTS=OFF -DROPEPOOL_PYTHON=OFF > $OUT/$tree-cmake.log 2>&1 &&
    cmake --build $tree/b -j 3 --target ropepool-bench > $OUT/$tree-build.log 2>&1 || echo "$tree build failed" ) &
done
cmake --build build-dev -j 12 > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; exit 1; }
wait; echo "builds $(( $(date +%s) - t0 )) s"
(cd build-dev && timeout 240 ctest --output-on-failure -j 6 -L cuda) > $OUT/cuda-tests.log 2>&1; echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*" $OUT/cuda-tests.log
CASES=(
  "--shape 32/4/64 --qk-norm on -T 200,300,395,560"
  "--shape 12/4/128 --qk-norm on -T 200,300,395,560"
  "--shape 8/1/64 --qk-norm on -T 300,395"
  "--shape 8/1/128 --qk-norm on -T 300,395"
  "--shape 16/2/128 --qk-norm on -T 300,395"
  "--shape 16/8/256 --qk-norm on -T 133,160,198,300"
  "--shape 28/4/128 --qk-norm on -T 280,330"
  "--preset qwen3-8b -T 160,256,300,1024"
  "--preset deepseek-v3-mla -T 529,600"
  "--preset gpt-j-6b -T 529,600"
  "--preset phi3-mini -T 680,800"
  "--preset llama3-8b -T 600,4096"
)
[ -n "${AB_CASES:-}" ] && IFS=';' read -r -a CASES <<< "$AB_CASES"
B="--backend cuda --dtype bf16 --no-unfused ${AB_BENCH:---seconds 0.03 --sets 1}"
for c in "${CASES[@]}"; do echo "== verify NEW $c"; timeout 60 build-dev/bench/ropepool-bench $B $c | grep -E "^ +[0-9]+ |error|FAIL"; done 2>&1 | tee $OUT/verify.log
for r in 1 2; do
  for side in $SIDES; do
    X=build-dev/bench/ropepool-bench; [ $side = OLD ] && X=$OLD/b/bench/ropepool-bench; [ $side = VAR ] && X=dev_var/b/bench/ropepool-bench
    for c in "${CASES[@]}"; do echo "== round $r $side $c"; timeout 60 $X $B --no-verify $c; done
  done
done 2>&1 | grep -E "^==|^ +[0-9]+ " | tee $OUT/ab.log
SWEEPS=()  # ropepool-tune-cuda argument lists, e.g. "--shape 32/4/64 --qk-norm -T 300 --variants plan;pf=1,y=1,hy=24"
for s in ${SWEEPS[@]+"${SWEEPS[@]}"}; do timeout 90 build-dev/bench/ropepool-tune-cuda --dtype bf16 --rounds 9 $s; done 2>&1 | tee $OUT/tune.log
echo "total $(( $(date +%s) - t0 )) s"

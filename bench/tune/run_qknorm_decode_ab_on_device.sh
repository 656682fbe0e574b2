#!/usr/bin/env bash
# On the device machine, one call (about 4 minutes): verify a QK-norm decode change and time it
# against main (stop 31: a token's heads split over blocks, grid z, weights held as bits until used,
# the slot's load first; stop 33: the decode kernel up to two tokens a multiprocessor where its
# blocks are all resident, norm_decode_heads in plan.cu; stop 40: that kernel also built for 80
# registers, for calls whose blocks then all fit). Then the fused
# call against the unfused path (python/tools/measure_unfused_qk_norm.py: rms_norm + rope/append).
# The caller first puts main's files beside this tree, in the repo root:
#     git archive main | (mkdir -p dev_main && tar -x -C dev_main)
# and optionally a variant tree in dev_var (VAR: timed like OLD). Builds this tree (NEW, with its
# tests), main's and the variant's (benchmark only) side by side, runs `ctest -L cuda` on NEW, then
# a geometry sweep (ropepool-tune-cuda) and QK-norm and plain calls, the trees interleaved, two
# rounds. STEPS (default all: tests verify tune ab unfused) picks steps; a second call on the warm
# machine (without carrying dev_main or dev_var again, which would replace their builds) rebuilds
# nothing. Output: $OUT.
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
OLD=${MAIN_TREE:-dev_main}
SIDES="NEW OLD"; [ -d dev_var ] && SIDES="NEW VAR OLD"
STEPS=${STEPS:-"tests verify tune ab unfused"}
has() { [[ " $STEPS " == *" $1 "* ]]; }
t0=$(date +%s)
CONF="-DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real"
cmake -S . -B build-dev $CONF -DPython3_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
for tree in $OLD dev_var; do
  [ -d $tree ] || continue
  ( cmake -S $tree -B $tree/b $CONF -DROPEPOOL_TESTS=OFF -DROPEPOOL_PYTHON=OFF > $OUT/$tree-cmake.log 2>&1 &&
    cmake --build $tree/b -j 3 --target ropepool-bench > $OUT/$tree-build.log 2>&1 || echo "$tree build failed" ) &
done
cmake --build build-dev -j 10 > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; exit 1; }
wait; echo "builds $(( $(date +%s) - t0 )) s"
if has tests; then
  (cd build-dev && timeout 240 ctest --output-on-failure -j 6 -L cuda) > $OUT/cuda-tests.log 2>&1; echo "ctest rc $?"
  grep -E "tests passed|Failed|\*\*\*" $OUT/cuda-tests.log
fi
B="--backend cuda --dtype bf16 --seconds 0.03 --no-unfused --sets 1"
has verify && { echo "== verify NEW"; for s in "--shape 32/4/64 --qk-norm on" "--preset qwen3-8b" "--preset qwen3-8b --kv-dtype fp8_e4m3" "--shape 16/8/256 --qk-norm on" "--shape 12/4/128 --qk-norm on" "--shape 32/8/128 --qk-norm on --style gptj" "--shape 16/8/256 --qk-norm on --kv-dtype fp8_e5m2 --dtype f16"; do
  timeout 60 build-dev/bench/ropepool-bench $B $s -T 1,16,64,128,160,176,200,256 | grep -E "^ +[0-9]+ |error|FAIL"; done; } 2>&1 | tee $OUT/verify.log
has tune && { echo "== tune NEW (pf=1,y=1: the decode kernel, hy heads a block)"
  timeout 90 build-dev/bench/ropepool-tune-cuda --dtype bf16 --preset qwen3-8b --rounds 9 -T 1,64,128,176,200,256,264,300 \
    --variants 'plan;nt=512;nt=768;pf=1,y=1,hy=16,nt=768;pf=1,y=1,hy=24,nt=768;pf=1,y=1,hy=48,nt=768'
  timeout 90 build-dev/bench/ropepool-tune-cuda --dtype bf16 --shape 16/8/256 --qk-norm --rounds 9 -T 1,64,128,160,200,240 \
    --variants 'plan;nt=512;nt=768;pf=1,y=1,hy=8,nt=768;pf=1,y=1,hy=16,nt=768;pf=1,y=1,hy=32,nt=768'; } 2>&1 | tee $OUT/tune.log
has ab && for r in 1 2; do
  for side in $SIDES; do
    X=build-dev/bench/ropepool-bench; [ $side = OLD ] && X=$OLD/b/bench/ropepool-bench; [ $side = VAR ] && X=dev_var/b/bench/ropepool-bench
    R="timeout 60 $X $B --no-verify"
    echo "== round $r $side qwen3-8b qk-norm hot";        $R --preset qwen3-8b -T 1,16,64,128,176,200,256,264,300,1024
    echo "== round $r $side qwen3-8b no norm hot";        $R --preset qwen3-8b --qk-norm off -T 1,16,64,128,176,200,256,264,300,1024
    echo "== round $r $side qwen3-8b qk-norm fp8 hot";    $R --preset qwen3-8b --kv-dtype fp8_e4m3 -T 1,64,176,256
    echo "== round $r $side 16/8/256 qk-norm hot";        $R --shape 16/8/256 --qk-norm on -T 1,64,133,160,198,256
    echo "== round $r $side 32/4/64 qk-norm hot";         $R --shape 32/4/64 --qk-norm on -T 1,64,160,263,300,400
    echo "== round $r $side 32/8/128 gptj qk-norm hot";   $R --shape 32/8/128 --qk-norm on --style gptj -T 1,64,256
    echo "== round $r $side 32/8/128 plain hot";          $R --shape 32/8/128 -T 1,64,256
  done
done 2>&1 | grep -E "^==|^ +[0-9]+ " | tee $OUT/qknorm-ab.log
has unfused && PYTHONPATH=build-dev/python timeout 150 python3 python/tools/measure_unfused_qk_norm.py 2>&1 | tee $OUT/unfused-qk-norm.log
echo "total $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# On the device machine: a change verified and timed against main, side by side in one call.
# Builds this tree (NEW, build-dev, with its tests) and main's (OLD, build-old; the caller first
# puts main's tree beside this one: git archive main | (mkdir -p dev_main && tar -x -C dev_main)).
# Both build folders survive between calls while the machine stays warm, so a second call with
# other STEPS rebuilds nothing. Env: TARGETS (build only these targets in NEW, only the benchmarks
# in OLD), PYTHON=OFF (no Python extension), ROUNDS (the qknorm step's rounds), CTEST_ARGS,
# TEST_TIMEOUT, PY_BENCH. Steps (STEPS, default all, run in the order given; each writes its log
# to $OUT):
#   probe   before building: which C++ compiler can build the native torch extension
#           (ropepool._ropepool_torch) against this machine's torch; the first that can (of CXX,
#           g++, clang++ and versioned g++) builds both trees; each one's first error is printed
#   tests   ctest -L cuda on NEW (CTEST_ARGS: other ctest arguments) (the C CUDA suites, memcheck/racecheck, the Python CUDA tests)
#   qknorm  ropepool-bench, QK-norm calls (Qwen3-8B preset, 16/8/256; bf16, f16, fp8 pools) and the
#           same shapes without it, NEW and OLD interleaved, ROUNDS rounds (default 2; issue 14's ratio)
#   fp8     ropepool-bench, fp8 e4m3 pools (cold, verified), NEW and OLD interleaved, two rounds:
#           16/8/256 (head_dim 256) and 32/8/128 (a control), with the bf16-pool row of 16/8/256
#   mla     ropepool-tune-cuda on NEW: DeepSeek-V3 MLA at TP 8 and 16/8/256 fp8 at large T, the
#           plan against other geometries and the in-run copy floor (its roofline)
#   python  python -m ropepool.bench --backend cuda --profile and measure_torch_op.py --device
#           cuda, NEW and OLD interleaved, two rounds (host time per eager call)
# Stop 39: NEW was a branch (QK-norm kernels compiled for head_dim 128 with fp8 pools, then for
# head_dim 256), OLD main; the python step A/B-tested the operator kernel against the commit before.
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
OLD=${MAIN_TREE:-dev_main}
STEPS=${STEPS:-"probe tests qknorm fp8 mla python"}
has() { [[ " $STEPS " == *" $1 "* ]]; }
t0=$(date +%s)
PY=$(command -v python3)
CONF="-DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real -DPython3_EXECUTABLE=$PY -DROPEPOOL_PYTHON=${PYTHON:-ON}"
# TARGETS: build only these in NEW (and only the benchmarks in OLD), where device time is short
NEW_TARGETS=${TARGETS:+--target $TARGETS}; OLD_TARGETS=${TARGETS:+--target ropepool-bench ropepool-tune-cuda}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt 2>&1
if has probe; then
  for cxx in ${CXX:-} g++ clang++ g++-14 g++-13 g++-12 g++-11; do
    command -v $cxx > /dev/null || continue
    echo "== $cxx: $($cxx --version | head -1)"
    rm -rf /tmp/probe; cmake -S . -B /tmp/probe -DCMAKE_CXX_COMPILER=$(command -v $cxx) -DROPEPOOL_CUDA=OFF \
      -DROPEPOOL_TESTS=OFF -DROPEPOOL_BENCH=OFF -DPython3_EXECUTABLE=$PY 2>&1 | grep "ropepool:.*torch"
    if [ -f /tmp/probe/python/torch_probe.log ]; then grep -m4 "error" /tmp/probe/python/torch_probe.log
    else echo "using $(command -v $cxx)"; break; fi
  done 2>&1 | tee $OUT/probe.log
  CXX=$(sed -n 's/^using //p' $OUT/probe.log); [ -n "$CXX" ] && export CXX
  [ "$STEPS" = probe ] && exit 0
fi
( { [ -f build-old/CMakeCache.txt ] || cmake -S $OLD -B build-old $CONF -DROPEPOOL_TESTS=OFF; } > $OUT/old-build.log 2>&1 &&
  cmake --build build-old -j 6 $OLD_TARGETS >> $OUT/old-build.log 2>&1 || echo "OLD build failed" ) &
{ [ -f build-dev/CMakeCache.txt ] || cmake -S . -B build-dev $CONF; } > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
cmake --build build-dev -j 10 $NEW_TARGETS >> $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; exit 1; }
wait; echo "builds $(( $(date +%s) - t0 )) s"
step_tests() {
  (cd build-dev && timeout ${TEST_TIMEOUT:-240} ctest --output-on-failure -j 6 ${CTEST_ARGS:--L cuda}) > $OUT/cuda-tests.log 2>&1
  echo "ctest rc $? ($(( $(date +%s) - t0 )) s)"; grep -E "tests passed|Failed|\*\*\*" $OUT/cuda-tests.log
}
step_qknorm() {
  for r in $(seq ${ROUNDS:-2}); do
    for side in NEW OLD; do
      B=build-dev; [ $side = OLD ] && B=build-old
      R="timeout 60 $B/bench/ropepool-bench --backend cuda --dtype bf16 --seconds 0.03 --no-unfused --sets 1"
      echo "== round $r $side qwen3-8b (QK-norm)"; $R --preset qwen3-8b -T 1,64,256,1024,4096,16384
      echo "== round $r $side qwen3-8b no norm"; $R --preset qwen3-8b --qk-norm off -T 1,64,256,1024,4096,16384
      echo "== round $r $side qwen3-8b fp8_e4m3"; $R --preset qwen3-8b --kv-dtype fp8_e4m3 -T 1,64,256,1024,4096,16384
      echo "== round $r $side qwen3-8b fp8_e4m3 no norm"; $R --preset qwen3-8b --kv-dtype fp8_e4m3 --qk-norm off -T 1,64,256,1024,4096,16384
      echo "== round $r $side 16/8/256 QK-norm"; $R --shape 16/8/256 --qk-norm on -T 1,1024,16384
      echo "== round $r $side 16/8/256 QK-norm f16"; $R --shape 16/8/256 --qk-norm on --dtype f16 -T 1024,16384
    done
  done > $OUT/qknorm.log 2>&1
  echo "qknorm done ($(( $(date +%s) - t0 )) s)"
}
step_fp8() {
  for r in 1 2; do
    for side in NEW OLD; do
      B=build-dev; [ $side = OLD ] && B=build-old
      R="timeout 60 $B/bench/ropepool-bench --backend cuda --dtype bf16 --seconds 0.03 --no-unfused"
      echo "== round $r $side 16/8/256 fp8_e4m3"; $R --shape 16/8/256 --kv-dtype fp8_e4m3 -T 1,64,1024,4096,16384,65536
      echo "== round $r $side 32/8/128 fp8_e4m3"; $R --shape 32/8/128 --kv-dtype fp8_e4m3 -T 1,1024,16384,65536
      [ $r = 1 ] && { echo "== round $r $side 16/8/256 bf16 pools"; $R --shape 16/8/256 -T 16384,65536; }
    done
  done > $OUT/fp8.log 2>&1
  echo "fp8 done ($(( $(date +%s) - t0 )) s)"
}
step_mla() {
  TU="timeout 120 build-dev/bench/ropepool-tune-cuda --rounds 15"
  { echo "== MLA TP 8"
    $TU --preset deepseek-v3-mla-tp8 -T 16384,65536 \
        --variants 'plan;floor-copy;hy=2;hy=8;hy=4,y=8;hy=4,y=2;hy=8,y=2;hy=8,y=8;pf=1;pf=1,hy=8'
    echo "== 16/8/256 fp8"
    $TU --shape 16/8/256 --kv-dtype fp8_e4m3 -T 16384,65536 \
        --variants 'plan;floor-copy;hy=4;hy=8;hy=12;hy=16;y=2;pf=1;pf=1,hy=16'
  } > $OUT/mla-tune.log 2>&1
  echo "mla done ($(( $(date +%s) - t0 )) s)"
}
step_python() {
  B="--backend cuda ${PY_BENCH:--T 1,64,1024 --rounds 7 --profile}"
  for r in 1 2; do
    for side in NEW OLD; do
      P=build-dev/python; [ $side = OLD ] && P=build-old/python
      echo "== round $r $side: python -m ropepool.bench $B"
      PYTHONPATH=$P timeout 150 $PY -m ropepool.bench $B
      echo "== round $r $side: measure_torch_op.py --device cuda --dtype bfloat16"
      PYTHONPATH=$P timeout 90 $PY python/tools/measure_torch_op.py --device cuda --dtype bfloat16 --rounds 100
    done
  done > $OUT/python-ab.log 2>&1
  echo "python done ($(( $(date +%s) - t0 )) s)"
}
for step in $STEPS; do [ $step = probe ] || step_$step; done
echo "total $(( $(date +%s) - t0 )) s"

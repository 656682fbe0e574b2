#!/usr/bin/env bash
# On the device machine's host CPU, one call (about 6 minutes): the CPU kernels on a host with
# AVX-512 (the development VM may have none), tested and timed against main. Builds this tree
# (NEW, CPU only, with its C tests) and main's benchmark (OLD: the caller first puts it beside
# this tree: git archive main | (mkdir -p dev_main && tar -x -C dev_main)), runs every C test on
# every kernel level the host supports, then times NEW against OLD in paired rounds
# (bench/tune/ab_cpu.py, one thread) for each argument list in CASES. Output: $OUT.
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
OLD=${MAIN_TREE:-dev_main}
{ lscpu | grep -E "Model name|^CPU\(s\)"; echo "avx512: $(grep -o -w 'avx512[a-z0-9_]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"; } | tee $OUT/cpu.txt
CONF="-DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA=OFF -DROPEPOOL_PYTHON=OFF"
t0=$(date +%s)
( cmake -S $OLD -B $OLD/b $CONF -DROPEPOOL_TESTS=OFF && cmake --build $OLD/b -j 4 --target ropepool-bench ) > $OUT/old-build.log 2>&1 &
{ cmake -S . -B build-cpu $CONF && cmake --build build-cpu -j 12; } > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; exit 1; }
wait; echo "builds $(( $(date +%s) - t0 )) s"
(cd build-cpu && timeout 300 ctest --output-on-failure -j 12) > $OUT/cpu-tests.log 2>&1; echo "ctest rc $?"
grep -E "tests passed|Failed|Skipped" $OUT/cpu-tests.log
CASES=(
  "--preset qwen3-8b --dtype bf16 -T 1,16,256,4096"
  "--preset qwen3-8b --dtype f16 -T 16,256"
  "--preset qwen3-8b --dtype f32 -T 16,256"
  "--preset qwen3-8b --dtype bf16 --kv-dtype fp8_e4m3 -T 16,256"
  "--preset qwen3-8b --dtype bf16 --qk-norm off -T 16,256"
  "--preset llama3-8b --dtype bf16 -T 16,256,4096"
)
# AB_CASES="args;args": these argument lists instead of CASES
[ -n "${AB_CASES:-}" ] && IFS=';' read -r -a CASES <<< "$AB_CASES"
for c in "${CASES[@]}"; do
  echo "== $c (one thread; old = main, new = this tree)"
  timeout 120 python3 bench/tune/ab_cpu.py $OLD/b/bench/ropepool-bench build-cpu/bench/ropepool-bench 4 --threads 1 $c
done 2>&1 | tee $OUT/ab.log
echo "total $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# On the device machine (the lent H200), from a copy of this tree: build for sm_90a, run the GPU
# test suites, check the plan against the floor kernels, and run the benchmarks whose results are
# committed under bench/results/ (cuda-h200*.json/svg/log, cuda-tests.log). Output goes to $OUT
# (the device tool's folder; set OUT=somewhere elsewhere).
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
B=build-dev
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real \
      -DPython3_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
cmake --build $B -j 16 > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; exit 1; }
(cd $B && ctest --output-on-failure -L cuda) > $OUT/cuda-tests.log 2>&1; echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*" $OUT/cuda-tests.log
R=$B/bench/ropepool-bench
{
$B/bench/ropepool-tune-cuda -T 1,64,256,1024,4096,16384 --variants 'plan;floor-empty-pdl;floor-copy'
set -x
timeout 100 $R --backend cuda --dtype bf16 --sets 1 -T 1,64,256,1024,4096,16384 --seconds 0.1 --json $OUT/hot.json
timeout 400 $R --backend cuda --dtype bf16,f16,f32 --seconds 0.1 --json $OUT/cold.json --svg $OUT/cold.svg
timeout 60 $R --backend cuda --preset tinyllama-1.1b --dtype bf16 --seconds 0.1 --json $OUT/tinyllama.json
timeout 60 $R --backend cuda --preset gemma2-9b --dtype bf16 --seconds 0.1 --json $OUT/gemma.json
timeout 40 $R --backend cuda --preset tinyllama-1.1b --dtype bf16 --sets 1 -T 1,64,4096 --seconds 0.1 --no-unfused
timeout 40 $R --backend cuda --preset gemma2-9b --dtype bf16 --sets 1 -T 1,64,4096 --seconds 0.1 --no-unfused
} > $OUT/bench.log 2>&1
grep -vE "^\+" $OUT/bench.log | tail -90

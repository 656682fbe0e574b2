#!/usr/bin/env bash
# On the device machine (the lent H200), from a checkout that holds branch mrope: builds for sm_90a
# without Python, runs the CUDA C suites mRoPE touches (cuda_mrope, cuda_numerics, cuda_pools,
# cuda_layouts; no sanitizers), then times the two mRoPE presets beside the plain call of the same
# shape and rope_base. Results go to $OUT; bench/results/mrope.md quotes them with this command.
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
B=build-dev
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt 2>&1
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real -DROPEPOOL_PYTHON=OFF \
      > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
timeout 200 cmake --build $B -j16 > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; exit 1; }
(cd $B && timeout 150 ctest --output-on-failure -R '^cuda_(mrope|numerics|pools|layouts)$') > $OUT/cuda-tests.log 2>&1
echo "ctest rc $?"; grep -E "tests passed|Failed|\*\*\*|Test +#|CHECK" $OUT/cuda-tests.log | head -40
R="timeout 40 $B/bench/ropepool-bench --backend cuda --dtype bf16 --sets 1 --seconds 0.04 --no-unfused -T 1,64,1024,4096,16384"
{
echo "== plain 32/8/128, rope_base 5e6"; $R --shape 32/8/128 --rope-base 5000000
echo "== preset qwen3-vl-8b"; $R --preset qwen3-vl-8b
echo "== plain 28/4/128, rope_base 1e6"; $R --shape 28/4/128 --rope-base 1000000
echo "== preset qwen2.5-vl-7b"; $R --preset qwen2.5-vl-7b
} > $OUT/bench.log 2>&1
grep -E "^==|^ *[0-9]+ |rror|FAIL|rope:" $OUT/bench.log

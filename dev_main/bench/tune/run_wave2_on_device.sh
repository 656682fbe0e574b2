#!/usr/bin/env bash
# On the device machine (the lent H200), from a copy of this tree: the second wave's GPU checks.
# Builds for sm_90a with the Python package, runs every CUDA test suite (C, sanitizers, the Python
# CUDA tests: torch op, CUDA graphs, the engine), then times on the GPU: the seed's call, the RoPE
# variants, paged (NHD / HND) and fp8 pools on the three shapes of the pools issues, the Python
# call's overhead and the torch engine's decode step. Results go to $OUT (the device tool's folder;
# OUT=somewhere elsewhere); bench/results/cuda-h200-wave2.md quotes them with these commands.
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
B=build-dev
{ python3 -c "import sys, torch, numpy; print(sys.version.split()[0], 'torch', torch.__version__, 'numpy', numpy.__version__)"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.mem --format=csv,noheader; } > $OUT/env.txt 2>&1
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real \
      -DPython3_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
cmake --build $B -j 16 > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; exit 1; }
(cd $B && timeout ${TEST_TIMEOUT:-300} ctest --output-on-failure -L cuda) > $OUT/cuda-tests.log 2>&1
echo "ctest rc $?"; grep -E "tests passed|Failed|\*\*\*|Test +#" $OUT/cuda-tests.log
R="timeout 60 $B/bench/ropepool-bench --backend cuda --dtype bf16 --seconds ${SECONDS_PER_T:-0.03}"
TS=1,16,64,256,1024,4096,16384,65536
{
echo "== seed call, Llama-3-8B, with the unfused baseline"; $R -T 1,64,256,1024,4096,16384,65536
for shape in 32/8/128 16/8/256 32/4/64; do
  for pools in "" "--kv-layout NHD --block-size 16" "--kv-layout HND --block-size 16" \
               "--kv-dtype fp8_e4m3" "--kv-dtype fp8_e4m3 --kv-layout NHD --block-size 16"; do
    echo "== $shape ${pools:-flat}"; $R --shape $shape $pools -T $TS --no-unfused
  done
done
for bs in 1 128; do echo "== 32/8/128 NHD block $bs"; $R --shape 32/8/128 --kv-layout NHD --block-size $bs -T $TS --no-unfused; done
for p in deepseek-v3-mla deepseek-v3-mla-tp8; do
  for pools in "" "--kv-layout NHD --block-size 64" "--kv-dtype fp8_e4m3"; do
    echo "== preset $p ${pools:-flat}"; $R --preset $p $pools -T 1,16,64,256,1024,4096,16384,65536 --no-unfused
  done
done
for p in qwen3-8b qwen2.5-vl-7b qwen3-vl-8b llama3.1-8b qwen2.5-7b-yarn gpt-j-6b gpt-neox-20b; do echo "== preset $p"; $R --preset $p -T 1,64,1024,4096,16384 --no-unfused; done
} > $OUT/bench.log 2>&1
grep -E "^==|^ *[0-9]+ |rror|FAIL" $OUT/bench.log
export PYTHONPATH=$PWD/$B/python
{
echo "== python -m ropepool.bench --backend cuda --profile"; timeout 90 python3 -m ropepool.bench --backend cuda --profile
echo "== measure_torch_op.py --device cuda --dtype bfloat16"; timeout 60 python3 python/tools/measure_torch_op.py --device cuda --dtype bfloat16
echo "== torch_engine_bench.py --device cuda --dtype bfloat16"; (cd examples && timeout 90 python3 torch_engine_bench.py --device cuda --dtype bfloat16)
} > $OUT/python.log 2>&1
tail -80 $OUT/python.log

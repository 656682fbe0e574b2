#!/usr/bin/env bash
# On the device machine (the lent H200), from a copy of this tree: one call that builds for sm_90a
# with the Python package, runs every CUDA test suite, then times what the open issues ask for
# (STEPS, default all: tests shapes mrope mla qknorm engine python; also variants, paged). With
# REQUIRE=H200 it stops at once on any other GPU (the tool often lends an H100 for an H200 request,
# and these figures are the H200's). Every step has its own time limit
# and writes its log to $OUT (the device tool's folder; OUT=somewhere elsewhere), so a step that
# runs long costs only itself. bench/results/cuda-h200-mla-engine.md quotes these logs with the
# commands. The whole script takes about 9 minutes; name fewer STEPS to fit a call's limit.
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
B=build-dev
STEPS=${STEPS:-"tests shapes mrope mla qknorm engine python"}
has() { [[ " $STEPS " == *" $1 "* ]]; }
{ python3 -c "import sys, torch, numpy; print(sys.version.split()[0], 'torch', torch.__version__, 'numpy', numpy.__version__)"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.mem --format=csv,noheader; git log -1 --format=%h 2>/dev/null; } > $OUT/env.txt 2>&1
if [ -n "${REQUIRE:-}" ] && ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q "$REQUIRE"; then
  echo "not an $REQUIRE: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 0
fi
t0=$(date +%s)
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real \
      -DPython3_EXECUTABLE=$(command -v python3) > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
timeout ${BUILD_TIMEOUT:-300} cmake --build $B -j 16 >> $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; exit 1; }
echo "build $(( $(date +%s) - t0 )) s" | tee $OUT/build-time.txt
if has tests; then
  (cd $B && timeout ${TEST_TIMEOUT:-240} ctest --output-on-failure -j 6 -L cuda) > $OUT/cuda-tests.log 2>&1
  echo "ctest rc $?"; grep -E "tests passed|Failed|\*\*\*|Test +#|CHECK|FAIL|identical" $OUT/cuda-tests.log | head -60
fi
R="timeout 60 $B/bench/ropepool-bench --backend cuda --dtype bf16 --seconds ${SECONDS_PER_T:-0.03}"
{
if has mrope; then
  H="--sets 1 --no-unfused -T 1,64,256,1024,4096,16384,65536"
  echo "== plain 32/8/128 rope_base 5e6 (hot)"; $R --shape 32/8/128 --rope-base 5000000 $H
  echo "== preset qwen3-vl-8b (hot)"; $R --preset qwen3-vl-8b $H
  echo "== plain 28/4/128 rope_base 1e6 (hot)"; $R --shape 28/4/128 --rope-base 1000000 $H
  echo "== preset qwen2.5-vl-7b (hot)"; $R --preset qwen2.5-vl-7b $H
fi
if has shapes; then
  H="--sets 1 --no-unfused -T 1,64,1024,4096,16384,65536"
  echo "== plain 28/4/128 rope_base 1e6 (hot)"; $R --shape 28/4/128 --rope-base 1000000 $H
  echo "== preset qwen2.5-vl-7b (hot)"; $R --preset qwen2.5-vl-7b $H
  echo "== plain 32/4/64 (hot)"; $R --shape 32/4/64 $H
  echo "== plain 32/8/128 (hot)"; $R --shape 32/8/128 $H
fi
if has mla; then
  for p in ${MLA_PRESETS:-deepseek-v3-mla deepseek-v3-mla-tp8}; do
    for pools in "" "--kv-layout NHD --block-size 64" "--kv-dtype fp8_e4m3"; do
      echo "== preset $p ${pools:-flat} (cold)"; $R --preset $p $pools -T 1,16,64,256,1024,4096,16384,65536 --no-unfused
    done
    echo "== preset $p flat (hot)"; $R --preset $p --sets 1 -T 1,16,64,256,1024,4096 --no-unfused
  done
fi
if has variants; then  # issue 9: GPT-J and partial rotary against NeoX, hot, as FlashInfer's figures were taken
  H="--sets 1 --no-unfused -T 1,64,1024,4096,16384"
  for S in 32/8/128 16/8/256 32/4/64; do
    D=${S##*/}
    for v in "--style neox" "--style gptj" "--rotary-dim $((D / 2))"; do echo "== $S $v (hot)"; $R --shape $S $v $H; done
  done
fi
if has paged; then    # issue 17: NHD block 16 against flat, hot to T = 1024 and cold
  for S in 32/8/128 16/8/256 32/4/64; do
    for L in "" "--kv-layout NHD --block-size 16"; do
      echo "== $S ${L:-flat} (hot)"; $R --shape $S $L --sets 1 --no-unfused -T 1,16,64,256,1024
      echo "== $S ${L:-flat} (cold)"; $R --shape $S $L --no-unfused -T 64,256,1024,4096,16384
    done
  done
fi
if has qknorm; then
  for n in on off; do
    echo "== preset qwen3-8b --qk-norm $n (hot)"; $R --preset qwen3-8b --qk-norm $n --sets 1 -T 1,64,256,1024,4096,16384
    echo "== preset qwen3-8b --qk-norm $n (cold)"; $R --preset qwen3-8b --qk-norm $n -T 1,64,256,1024,4096,16384,65536 --no-unfused
  done
fi
} > $OUT/bench.log 2>&1
grep -E "^==|^ *[0-9]+ |rror|FAIL" $OUT/bench.log | head -150
export PYTHONPATH=$PWD/$B/python
if has engine; then
  { echo "== torch_engine_bench.py --device cuda --dtype bfloat16 --profile"
    (cd examples && timeout 150 python3 torch_engine_bench.py --device cuda --dtype bfloat16 --profile)
  } > $OUT/engine.log 2>&1
  tail -100 $OUT/engine.log
fi
if has python; then
  { echo "== python -m ropepool.bench --backend cuda --profile"; timeout 90 python3 -m ropepool.bench --backend cuda --profile
    echo "== measure_torch_op.py --device cuda --dtype bfloat16"; timeout 60 python3 python/tools/measure_torch_op.py --device cuda --dtype bfloat16
  } > $OUT/python.log 2>&1
  tail -60 $OUT/python.log
fi

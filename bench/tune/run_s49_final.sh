#!/usr/bin/env bash
# Stop 49's last device call. On an H200: the tables issues 19 (MLA), 20 (the Python call) and 14
# (QK-norm) quote for that card (run_session_on_device.sh STEPS="mla python qknorm"). On another
# GPU: how many tokens a prefill block should take (ropepool-tune-cuda y=2 / y=4 against the plan)
# over the shapes whose tokens are narrower than the plan's 64-thread block floor, hot and cold.
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
G=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "GPU: $G"
if echo "$G" | grep -q H200; then
  STEPS="mla python qknorm" bash bench/tune/run_session_on_device.sh 2>&1 | tail -40
  exit 0
fi
t0=$(date +%s)
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real -DROPEPOOL_PYTHON=OFF > $OUT/build.log 2>&1 &&
  cmake --build build-dev -j 16 --target ropepool-tune-cuda >> $OUT/build.log 2>&1 || { grep error $OUT/build.log | head; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
X="timeout 60 build-dev/bench/ropepool-tune-cuda --dtype bf16 --rounds 7 --variants plan;y=2;y=4"
{
for s in "--preset deepseek-v3-mla-tp8" "--shape 32/4/64" "--shape 8/1/128" "--shape 32/8/128" "--shape 28/4/128" "--shape 16/8/256"; do
  echo "== $s hot"; $X $s -T 1024,2048,4096,8192
  echo "== $s cold"; $X $s --sets 16 -T 1024,2048,4096,8192
done
} 2>&1 | tee $OUT/tune-y.log | grep -E "^==|plan |y=" 
echo "total $(( $(date +%s) - t0 )) s"

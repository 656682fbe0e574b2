#!/usr/bin/env bash
# Stop 49's last device calls. Default: the CUDA suites on this tree and the MLA tables (issue 19),
# with the Python call's (issue 20) on an H200 (run_session_on_device.sh STEPS="tests mla
# [python]"). PART=y (on an H100, stop 49): how many tokens a prefill block should take
# (ropepool-tune-cuda y=2 / y=4 against the plan) over the shapes whose tokens are narrower than
# the plan's 64-thread block floor, hot and cold.
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
G=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "GPU: $G"
if [ "${PART:-}" != y ]; then
  S="tests mla"; echo "$G" | grep -q H200 && S="tests mla python"
  STEPS="$S" bash bench/tune/run_session_on_device.sh 2>&1 | tail -60
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

#!/usr/bin/env bash
# Stop 49: DeepSeek-V3 MLA's plan at decode and mid T (issue 19), and Qwen3-8B QK-norm's around
# T = 256 (issue 14): ropepool-tune-cuda's variants of the library's plan, hot (one set) and cold
# (sets enough to leave L2), each a CUDA graph, median of ROUNDS. Builds only the tools.
set -uo pipefail
OUT=${OUT:-out-device}; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DROPEPOOL_CUDA_ARCHITECTURES=90a-real -DROPEPOOL_PYTHON=OFF > $OUT/build.log 2>&1 &&
  cmake --build build-dev -j 16 --target ropepool-tune-cuda >> $OUT/build.log 2>&1 || { grep error $OUT/build.log | head; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
X="timeout 100 build-dev/bench/ropepool-tune-cuda --dtype bf16 --rounds ${ROUNDS:-9}"
M='plan;grid=100000;pf=2;pf=4;gb=2;gb=1;hy=69;hy=46;pf=2,grid=100000;pf=2,y=2'
{
echo "== MLA Hq128 hot"; $X --preset deepseek-v3-mla -T 1,16,64,128,256,512,1024 --variants "$M"
echo "== MLA Hq128 cold"; $X --preset deepseek-v3-mla --sets 32 -T 16,64,128,256,512,1024 --variants "$M"
P='plan;grid=100000;pf=2;pf=4;y=2;y=4;gb=2;gb=1;pf=2,y=2'
echo "== MLA tp8 hot"; $X --preset deepseek-v3-mla-tp8 -T 16,64,256,1024,4096 --variants "$P"
echo "== MLA tp8 cold"; $X --preset deepseek-v3-mla-tp8 --sets 32 -T 64,256,1024,4096 --variants "$P"
echo "== qwen3-8b qk-norm hot"; $X --preset qwen3-8b -T 1,64,256,384 --variants 'plan;nt=512;nt=768;pf=2;pf=1,y=1,hy=24,nt=768;pf=1,y=1,hy=48,nt=768'
} 2>&1 | tee $OUT/tune.log | grep -v "^ *$"
echo "total $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# Stop 46: the decode kernel splitting a wide token's heads over blocks (plan.cu,
# plain_decode_heads) against the tree before it (dev_main: `git archive HEAD | tar -x -C dev_main`),
# in one short device call: NEW built with its C tests (no Python), OLD's benchmark alone; the
# CUDA suites but the sanitizer and Python ones (the kernel and plan tests), then ropepool-bench on
# both, interleaved, two rounds, hot and cold, at the decode sizes the split changes. Output: $OUT
# (decode-split-ab.log).
PYTHON=OFF CTEST_EXCLUDE="memcheck|racecheck|python" SECONDS_PER_T=0.02 TOKENS=1,16,64,256 \
SHAPES="--preset deepseek-v3-mla;--shape 64/8/128;--shape 32/8/128" LOG=decode-split-ab \
  exec bash "$(dirname "$0")/run_decode_wave_ab_on_device.sh"

#!/usr/bin/env bash
# stop 44, second device call: DEEP_CALL_HEADS_PER_THREAD 4 -> 3. Build this tree, run the CUDA
# tests, then time the new plan against the old geometry (as a tune override) on every kind of
# shape whose deep-call geometry the change moves, and MLA TP 8 through ropepool-bench (cold).
OUT=${OUT:-out-device}
STEPS="tests" OUT=$OUT TEST_TIMEOUT=200 bash bench/tune/run_session_on_device.sh
X="timeout 100 build-dev/bench/ropepool-tune-cuda --rounds 10 --sets 2 -T 8192,16384,65536"
{
echo "== variants: plan (new) / old geometry as override"
$X --dtype bf16 --preset deepseek-v3-mla-tp8 --variants 'plan;hy=4,y=4;floor-copy'
$X --dtype bf16 --shape 24/1/64 --variants 'plan;hy=4,y=4;floor-copy'
$X --dtype bf16 --shape 8/2/128 --variants 'plan;hy=2,y=4;floor-copy'
$X --dtype bf16 --shape 8/8/64 --variants 'plan;hy=4,y=4;floor-copy'
$X --dtype bf16 --shape 32/8/80 --variants 'plan;hy=6,y=2;floor-copy'
$X --dtype bf16 --shape 16/2/96 --variants 'plan;hy=2,y=5;floor-copy'
$X --dtype f32 --shape 4/1/128 --variants 'plan;hy=1,y=4;floor-copy'
$X --dtype f32 --shape 12/4/96 --variants 'plan;hy=2,y=2;floor-copy'
echo "== unchanged shapes (plan must equal main's geometry)"
$X --dtype bf16 --shape 8/1/128 --variants 'plan;hy=2,y=4'
$X --dtype bf16 --shape 32/4/64 --variants 'plan;hy=8,y=2'
R="timeout 60 build-dev/bench/ropepool-bench --backend cuda --dtype bf16 --seconds 0.03 --no-unfused"
for pools in "" "--kv-layout NHD --block-size 64" "--kv-dtype fp8_e4m3"; do
  echo "== deepseek-v3-mla-tp8 ${pools:-flat} (cold)"; $R --preset deepseek-v3-mla-tp8 $pools -T 4096,6144,8192,16384,65536
done
} > $OUT/deep.log 2>&1
grep -v "^$" $OUT/deep.log | cut -c1-100

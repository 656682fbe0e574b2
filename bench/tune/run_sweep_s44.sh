#!/usr/bin/env bash
# stop 44 device call: the session script (build, tests, benches), then a geometry sweep of the
# deep calls that miss issue 19's roofline goal (MLA TP 8) and issue 9's GPT-J cells.
OUT=${OUT:-out-device}
STEPS="${STEPS:-tests variants qknorm paged python}" OUT=$OUT TEST_TIMEOUT=200 bash bench/tune/run_session_on_device.sh
X="timeout 150 build-dev/bench/ropepool-tune-cuda --dtype bf16 --rounds 10 --sets 2"
{
echo "== MLA TP 8"
$X --preset deepseek-v3-mla-tp8 -T 8192,16384,32768,65536 --variants 'plan;floor-copy;hy=8,y=2;hy=8,y=4;hy=8,y=1;hy=7,y=2;hy=7,y=4;hy=6,y=4;hy=6,y=2;hy=5,y=4;hy=5,y=8;hy=4,y=2;hy=4,y=8;hy=3,y=8;hy=2,y=8;hy=2,y=16;hy=13,y=2,pf=2;hy=9,y=2,pf=2;hy=4,y=4,pf=2;hy=16,y=2,pf=2'
echo "== MLA Hq 128"
$X --preset deepseek-v3-mla -T 16384,65536 --variants 'plan;floor-copy;hy=12;hy=24;hy=35;hy=46'
echo "== GPT-J 16/8/256"
$X --shape 16/8/256 --style gptj -T 1024,4096 --variants 'plan;floor-copy;hy=3;hy=4;hy=6;hy=8;hy=12;y=2;pf=2'
echo "== GPT-J 32/4/64"
$X --shape 32/4/64 --style gptj -T 4096 --variants 'plan;floor-copy;hy=10;hy=8;hy=6,y=4;hy=5,y=2;pf=2'
} > $OUT/sweep.log 2>&1
cat $OUT/sweep.log | cut -c1-110

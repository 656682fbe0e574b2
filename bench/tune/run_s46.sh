#!/usr/bin/env bash
# Stop 46's device calls. Call 1: the CUDA suites (stop 45's Python-binding changes had not run on
# a GPU) and the Python call's figures; on an H200 also the MLA presets (issue 19's goals are the
# H200's). Call 2 (PART=2, same warm machine, build kept): on an H200 the QK-norm and variants
# figures issues 14 and 9 quote for that card, on another GPU QK-norm only.
G=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "GPU: $G"
H200=$(echo "$G" | grep -c H200)
if [ "${PART:-1}" = 1 ]; then
  if [ "$H200" = 1 ]; then S="tests python mla"; else S="tests python"; fi
else
  if [ "$H200" = 1 ]; then S="qknorm variants"; else S="qknorm"; fi
fi
echo "STEPS=$S"; STEPS="$S" bash bench/tune/run_session_on_device.sh 2>&1 | tail -150

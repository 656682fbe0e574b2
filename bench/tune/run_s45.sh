#!/usr/bin/env bash
# Stop 45's device call: the CUDA suites and the MLA presets on whatever GPU the tool lends; on an
# H200 also the QK-norm, variants and Python-call figures the open issues quote for that card.
G=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "GPU: $G"
if echo "$G" | grep -q H200; then S="tests mla qknorm variants python"; else S="tests mla"; fi
echo "STEPS=$S"; STEPS="$S" bash bench/tune/run_session_on_device.sh 2>&1 | tail -120

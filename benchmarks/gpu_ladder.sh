#!/usr/bin/env bash
# The size ladder's GPU rungs: four seeds of Bert-base at Table 1's size (12 x 384), then Bert-large (24 x 512),
# then GPT (12 x 768), as far as the deadline allows, each trained on the same epoch of the Brown corpus as the
# CPU rungs (the same 310 steps of 32 sequences), bf16 through the torch engine, probed with the default probe,
# with its untrained towers probed as the control. Each finished probe is exported as the CPU rungs' are.
#
# The device reaches no package registry: prepare the ladder's data here first and carry it with the wheels
#     python -m studies.ladder --rungs 1x96 --seeds 0      # prepares runs/ladder/data/prepared (14 MB)
# then one call of the device tool:
#     run(command="BUDGET=8m bash benchmarks/gpu_ladder.sh", carry=["runs/ladder/data", ".whl"], timeout_s=560)
# Its exports come back under $OUT/ladder/probes/<rung>/; copy them into results/ladder/probes/ with the call's
# output as results/ladder/gpu-<date>.log, then `python -m studies.ladder --report-only`.
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
mkdir -p "${OUT:-results}/ladder"
python3 -m studies.ladder --gpu --deadline "${BUDGET:-8m}" --threads 8 --results "${OUT:-results}/ladder" \
    2>&1 | grep -v "step/s" || true
ls -R "${OUT:-results}/ladder/probes" || true

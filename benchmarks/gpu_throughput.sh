#!/usr/bin/env bash
# The throughput issue's GPU part, one prepared call on one H100 (about 8 minutes):
#   1. the trainer's two engines at Table 1 sizes, bf16, sequence length 128: tokens/s, model FLOPs
#      utilisation, memory (bench_gpu.py --engines deepspeed torch);
#   2. their first 200 training losses from the same weights and batches, per family (--compare-steps);
#   3. the GPU tests.
# Everything lands in $OUT/gpu/ (or results/gpu/); commit it with the device and versions it records.
# Not yet run on a GPU (no device was lent to the session that wrote it).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 DS_ACCELERATOR=cuda
out="${OUT:-results}/gpu"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/env_engines.txt"
python -c "import torch, deepspeed, transformers; print(torch.__version__, torch.version.cuda, deepspeed.__version__, transformers.__version__)" | tee -a "$out/env_engines.txt"
cd benchmarks
timeout 330 python bench_gpu.py --engines deepspeed torch --precisions bf16 --steps 5 \
    --out "../$out/bench_engines.json" 2>&1 | tee "../$out/bench_engines.log" || echo "bench stopped: $?"
timeout 150 python bench_gpu.py --compare-steps 200 --micro-batch 32 --elmo-micro-batch 32 \
    --out "../$out/engine_losses.json" 2>&1 | tee "../$out/engine_losses.log" || echo "comparison stopped: $?"
cd ..
timeout 120 python -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tail -20 | tee "$out/gpu_tests_engines.log" || true

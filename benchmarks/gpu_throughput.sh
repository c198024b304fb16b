#!/usr/bin/env bash
# The throughput issue's GPU part, one prepared call on one H100 (about 9 minutes, at most 9.5):
#   1. the trainer's two engines at Table 1 sizes, bf16, sequence length 128: tokens/s, model FLOPs
#      utilisation, memory (bench_gpu.py --engines deepspeed torch);
#   2. the torch engine with its forward pass compiled (torch-compile), GPT and Bert-large: one lever alone;
#   3. the first 200 training losses of DeepSpeed, torch and torch-compile from the same weights and batches,
#      per family (--compare-steps);
#   4. the GPU tests.
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
timeout 270 python bench_gpu.py --engines deepspeed torch --precisions bf16 --steps 5 \
    --out "../$out/bench_engines.json" 2>&1 | tee "../$out/bench_engines.log" || echo "bench stopped: $?"
timeout 110 python bench_gpu.py --families gpt bert-large --engines torch-compile --precisions bf16 --steps 5 \
    --out "../$out/bench_compile.json" 2>&1 | tee "../$out/bench_compile.log" || echo "compile bench stopped: $?"
timeout 110 python bench_gpu.py --compare-steps 200 --engines torch torch-compile --micro-batch 32 --elmo-micro-batch 32 \
    --out "../$out/engine_losses.json" 2>&1 | tee "../$out/engine_losses.log" || echo "comparison stopped: $?"
cd ..
timeout 80 python -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tail -20 | tee "$out/gpu_tests_engines.log" || true

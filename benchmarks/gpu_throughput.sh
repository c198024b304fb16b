#!/usr/bin/env bash
# The throughput issue's GPU part: one prepared call on one H100 or H200, under 9.5 minutes in all.
# Every part has its own time limit and the whole call a deadline, in order of what matters most:
#   1. DeepSpeed's engine at Table 1 sizes, bf16, sequence length 128, the paper's 3,840 sequences per
#      optimizer step (micro-batches of 256, ELMo 128, accumulated): tokens/s, model FLOPs utilisation,
#      memory, the optimizer step's share (bench_engines_deepspeed.json);
#   2. the torch engine (`train --engine torch`) the same way, each family's micro-batch profiled
#      (how busy the GPU is, its kernels: profiles.tar.gz) (bench_engines_torch.json);
#   3. the first 200 training losses of DeepSpeed and the torch engine from the same weights and batches,
#      per family, Table 1 sizes, bf16 (engine_losses.json);
#   4. one lever alone: the forward pass compiled (`--engine torch-compile`) (bench_compile.json);
#   5. one lever alone: the decoder's columns padded to a multiple of 64 (`--vocab-multiple 64`)
#      (bench_vocab64.json);
#   6. the torch-engine GPU tests (gpu_tests.log).
# Everything lands in $OUT/ (or results/gpu/new/); run.log holds the whole output and the versions.
# The device cannot reach the package registries: carry DeepSpeed, transformers and their missing
# dependencies as wheels in .whl/ (results/gpu/README.md says which; benchmarks/gpu_env.sh installs them).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-results/gpu/new}"
mkdir -p "$out"
deadline=$((SECONDS + ${BUDGET_S:-540}))

part() {  # part SECONDS COMMAND...: run with the smaller of its limit and what the deadline leaves
    local left=$((deadline - SECONDS)) limit=$1
    shift
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 20 ]; then echo "== skipped (deadline): $*"; return; fi
    echo "== $(date +%T) limit ${limit}s: $*"
    timeout "$limit" "$@" || echo "== stopped: status $?"
}

main() {
    source benchmarks/gpu_env.sh

    bench="python3 benchmarks/bench_gpu.py --precisions bf16 --steps 1"
    order="gpt bert-large bert-base elmo"
    part 120 $bench --engines deepspeed --families $order --out "$out/bench_engines_deepspeed.json"
    part 100 $bench --engines torch --families $order --profile-dir "$out/profiles" --out "$out/bench_engines_torch.json"
    part 80 python3 benchmarks/bench_gpu.py --compare-steps 200 --engines torch --families $order --micro-batch 32 \
        --elmo-micro-batch 32 --out "$out/engine_losses.json"
    part 130 $bench --engines torch-compile --families gpt bert-large bert-base --out "$out/bench_compile.json"
    part 60 $bench --engines torch --families gpt bert-large bert-base --model-option vocab_multiple=64 \
        --out "$out/bench_vocab64.json"
    part 60 python3 -m pytest -q -m gpu tests/test_gpu.py -k "torch_engine" -p no:cacheprovider 2>&1 | tail -15 \
        | tee "$out/gpu_tests.log"
    if [ -d "$out/profiles" ]; then tar -czf "$out/profiles.tar.gz" -C "$out" profiles && rm -rf "$out/profiles"; fi
    echo "== done at $SECONDS s"
}
main 2>&1 | tee "$out/run.log"

#!/usr/bin/env bash
# The throughput issue's GPU part: one prepared call on one H100 or H200, under 9.5 minutes in all.
# Every part has its own time limit and the whole call a deadline, in order of what matters most, so that a call
# cut short keeps the goals' measurement. At Table 1 sizes, bf16, sequence length 128, the paper's 3,840 sequences
# per optimizer step (micro-batches of 256, ELMo's 128, accumulated):
#   1. the goals, through `train` as a user types it (benchmarks/bench_train_path.py): per family GPT, Bert-large,
#      Bert-base, ELMo, the engine and levers the `paper` profile names (`FASTEST_ENGINES`, positions padded to
#      1024, decoder columns to 64), one warm-up step (the compilation) and three timed steps, each step's own
#      seconds from the run's log (train.json);
#   2. numerics: the first 100 training losses of DeepSpeed and of the compiled path from the same weights and
#      batches (losses.json);
#   3. each lever alone, as far as the deadline allows (the 28 Nov round measured the others: results/gpu/levers/):
#      the regions replayed as CUDA graphs (`--engine torch-graphs`) for the BERT families, whose steps wait on the
#      host (graphs.json) and that engine's GPU tests; the BERT families with both towers in one batched call
#      (`fuse_towers`) under whole-model compile, after its GPU test under flash and memory-efficient attention
#      (fused.json); Bert-base at micro-batches of 768 (micro768.json); ELMo with its LSTMs on CUDA streams of their
#      own (streams.json) and its LSTM tests; the torch-engine GPU tests (their output is in run.log).
# The device reaches no package registry: carry DeepSpeed, transformers and their missing dependencies as wheels in
# .whl/ (benchmarks/gpu_env.sh installs them), and a corpus prepared at the paper's vocabulary; `make device-carry`
# builds both (and the ladder's corpus) on a fresh machine in about two minutes. Then one call:
#     run(command="BUDGET_S=530 bash benchmarks/gpu_throughput.sh", carry=[".whl", "runs/throughput/data"],
#         timeout_s=590)
# What comes back: $OUT/run.log (the whole output and the versions) and $OUT/bench.tar.gz (the JSON files and the
# profiles; the device returns at most 8 files). Unpack it into results/gpu/users-path/ (the Paper scale page and
# the GPU-hours read that folder), then `python -m studies.paper_scale book` and `python -m twotower_lib publish
# --readme`. $OUT defaults to results/gpu/new/.
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

    bench="python3 benchmarks/bench_gpu.py --precisions bf16 --steps 3"
    transformers="bert-base bert-large gpt"
    levers="--label-bucket 1024 --model-option vocab_multiple=64"
    parts="$out/parts"
    mkdir -p "$parts"
    runs=/tmp/train_path
    [ -d /dev/shm ] && runs=/dev/shm/train_path   # each run writes gigabytes of checkpoints, removed once read
    part 340 python3 benchmarks/bench_train_path.py --data runs/throughput/data --runs "$runs" --family-timeout 170 \
        --out "$parts/train.json"
    part 150 python3 benchmarks/bench_gpu.py --compare-steps 100 --engines torch-compile-layers $levers \
        --families $transformers --out "$parts/losses.json"
    part 90 $bench --engines torch-graphs --families bert-base bert-large $levers --out "$parts/graphs.json"
    part 45 python3 -m pytest -q -m gpu tests/test_gpu.py -k "compiled_torch_engine and torch-graphs" \
        -p no:cacheprovider 2>&1 | tail -8
    part 40 python3 -m pytest -q -m gpu tests/test_gpu.py -k "fused_bert" -p no:cacheprovider 2>&1 | tail -6
    part 120 $bench --engines torch-compile --families bert-base bert-large $levers --model-option fuse_towers=true \
        --out "$parts/fused.json"
    part 80 $bench --engines torch-compile-layers --families bert-base $levers --micro-batch 768 \
        --out "$parts/micro768.json"
    part 60 $bench --engines torch-compile-layers --families elmo $levers --model-option lstm_streams=true \
        --out "$parts/streams.json"
    part 40 python3 -m pytest -q -m gpu tests/test_gpu.py -k "elmo_lstms" -p no:cacheprovider 2>&1 | tail -8
    part 90 python3 -m pytest -q -m gpu tests/test_gpu.py -k "torch_engine and not torch-graphs" -p no:cacheprovider \
        2>&1 | tail -15
    tar -czf "$out/bench.tar.gz" -C "$out" parts $( [ -d "$out/profiles" ] && echo profiles ) && rm -rf "$parts" "$out/profiles"
    echo "== done at $SECONDS s"
}
main 2>&1 | tee "$out/run.log"

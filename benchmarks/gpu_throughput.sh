#!/usr/bin/env bash
# The throughput issue's GPU part: one prepared call on one H100 or H200, under 9.5 minutes in all.
# Every part has its own time limit and the whole call a deadline, in order of what matters most
# (the first round, 28 Nov, measured both engines' baselines, the engines' losses and one lever at a time:
# results/gpu/engines/), so that a call cut short keeps the goals' measurement. At Table 1 sizes, bf16, sequence
# length 128, the paper's 3,840 sequences per optimizer step (micro-batches of 256, ELMo's 128, accumulated):
#   1. after: the levers together: the forward pass compiled region by region (`--engine torch-compile-layers`:
#      the embedding, each layer, the decoder with its loss; sooner compiled than the whole model:
#      results/compile/), BERT's predicted positions padded to a multiple of 1024 so that the shapes
#      repeat and it compiles once (`--label-bucket 1024`), the decoder's columns padded to a multiple of 64
#      (`--vocab-multiple 64`), each weight cast to bf16 once a step, ELMo's LSTMs in bf16, profiled; ELMo last
#      (after.json; profiles/; each row's warm-up step holds its compilation);
#   2. the same regions replayed as CUDA graphs (`--engine torch-graphs`) for the BERT families, whose steps wait
#      on the host (graphs.json), and the GPU tests of that engine against the eager one with accumulated
#      micro-batches (their output is in run.log);
#   3. numerics: the first 100 training losses of DeepSpeed and of the new path from the same weights and
#      batches at the same micro-batches as 1 (so that Inductor's cache can serve the compiled graphs)
#      (losses.json);
#   4. before, on this machine: the torch engine without levers (eager; the positions found on the host, not
#      padded; the weights cast to bf16 every micro-batch, `--cast-each-micro-batch`) for the four families,
#      each micro-batch profiled (before.json); then the BERT families and GPT with the trainer's autocast region
#      open over a whole step, so that each weight is cast once a step (casts.json: that lever alone);
#   5. one lever more each: ELMo with every LSTM of both towers on a CUDA stream of its own (`lstm_streams`:
#      their per-time-step kernels overlap), against 1's ELMo (streams.json), and the GPU tests of ELMo's LSTMs
#      (bf16 under bf16 autocast, streams; their output is in run.log); the GPU test of BERT's fused towers
#      under flash and memory-efficient attention, then the BERT families with both towers in one batched call
#      (`fuse_towers`, `bert.towers_together`: half the kernels, each twice as large), compiled as one graph, the
#      engine measured fastest for them (fused.json, against whole.json's unfused row); Bert-base,
#      host-bound, at micro-batches of 768 (micro768.json); ELMo at micro-batches of 256, its recurrent products
#      reading the 4096-wide weights once a time step for twice the rows (elmo256.json); GPT compiled as one graph
#      (`--engine torch-compile`) against 1's regions, for speed and compilation time (whole.json); ELMo's loss
#      comparison, 100 steps (losses_elmo.json);
#   6. the torch-engine GPU tests (their output is in run.log).
# What comes back: $OUT/run.log (the whole output and the versions) and $OUT/bench.tar.gz (the JSON files and
# the profiles; the device returns at most 8 files). $OUT defaults to results/gpu/new/.
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
    transformers="bert-base bert-large gpt"
    levers="--label-bucket 1024 --model-option vocab_multiple=64"
    compiled=torch-compile-layers
    parts="$out/parts"
    mkdir -p "$parts"
    part 240 $bench --engines $compiled --families $transformers elmo $levers --profile-dir "$out/profiles" \
        --out "$parts/after.json"
    part 90 $bench --engines torch-graphs --families bert-base bert-large $levers --out "$parts/graphs.json"
    part 45 python3 -m pytest -q -m gpu tests/test_gpu.py -k "compiled_torch_engine and torch-graphs" \
        -p no:cacheprovider 2>&1 | tail -8
    part 150 python3 benchmarks/bench_gpu.py --compare-steps 100 --engines $compiled $levers \
        --families $transformers --out "$parts/losses.json"
    part 100 $bench --engines torch --families $transformers elmo --cast-each-micro-batch \
        --profile-dir "$out/profiles" --out "$parts/before.json"
    part 45 $bench --engines torch --families $transformers --out "$parts/casts.json"
    part 60 $bench --engines $compiled --families elmo $levers --model-option lstm_streams=true --out "$parts/streams.json"
    part 40 python3 -m pytest -q -m gpu tests/test_gpu.py -k "elmo_lstms" -p no:cacheprovider 2>&1 | tail -8
    part 40 python3 -m pytest -q -m gpu tests/test_gpu.py -k "fused_bert" -p no:cacheprovider 2>&1 | tail -6
    part 120 $bench --engines torch-compile --families bert-base bert-large $levers --model-option fuse_towers=true \
        --out "$parts/fused.json"
    part 80 $bench --engines $compiled --families bert-base $levers --micro-batch 768 --out "$parts/micro768.json"
    part 60 $bench --engines $compiled --families elmo --elmo-micro-batch 256 $levers --out "$parts/elmo256.json"
    part 120 $bench --engines torch-compile --families gpt $levers --out "$parts/whole.json"
    part 60 python3 benchmarks/bench_gpu.py --compare-steps 100 --engines torch --families elmo --elmo-micro-batch 32 \
        --out "$parts/losses_elmo.json"
    part 90 python3 -m pytest -q -m gpu tests/test_gpu.py -k "torch_engine and not torch-graphs" -p no:cacheprovider \
        2>&1 | tail -15
    tar -czf "$out/bench.tar.gz" -C "$out" parts $( [ -d "$out/profiles" ] && echo profiles ) && rm -rf "$parts" "$out/profiles"
    echo "== done at $SECONDS s"
}
main 2>&1 | tee "$out/run.log"

#!/usr/bin/env bash
# The decisive BERT call: three seeds of Table 1's Bert-large (24 x 512) with the learning recipe the CPU pilots ranked
# (`studies.bert_recipe`; the ladder rung `24x512-pre`: pre-LN layers, the relative position bias, 40% of the positions
# all [MASK], steps of 256 sequences, a wall-clock budget a seed), bf16 through the torch engine, on the ladder's Brown epoch. After each
# seed's training the context gate is checked first (`paper.CONTEXT_RULE`, `studies.ladder.runner.context_learned`,
# written to results/ladder/context/); only a seed past it is probed, in fp32, trained and untrained, and a seed
# below it stops the rung (no further seed is trained). It replaces the old-recipe call of `gpu_ladder.sh`.
#
# Prepare here (`make device-carry`: runs/ladder/data/prepared and .whl/), then one call of the device tool:
#     run(command="BUDGET=5m bash benchmarks/gpu_bert_recipe.sh", carry=["runs/ladder/data/prepared", ".whl"],
#         timeout_s=540)
# BUDGET: no seed starts after it (each seed is about 80 s of training, the gate and two fp32 probes of ~30 s).
# The device returns files at most two folders deep: exports and context records come back as
# $OUT/bert_recipe_gpu.tar (rewritten every 15 s, so a call stopped at its limit keeps what finished). Unpack it into
# results/ladder/, save the call's output as results/ladder/gpu-bert-recipe-<date>.log, then
# `python -m studies.ladder --report-only`.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
out="${OUT:-results}"
rung="${RUNG:-24x512-pre}"
mkdir -p "$out/ladder/probes" "$out/ladder/context"
pack() { tar -C "$out/ladder" -cf "$out/.bert_recipe_gpu.tar" probes context && mv "$out/.bert_recipe_gpu.tar" "$out/bert_recipe_gpu.tar"; }
( while sleep 15; do pack; done ) &
packer=$!
python3 -m studies.ladder --gpu --rungs "$rung" --seeds "${SEEDS:-1,2,3}" --deadline "${BUDGET:-5m}" --threads 5 \
    --results "$out/ladder" 2>&1 | grep -v "step/s"
kill "$packer"
pack
tar -tf "$out/bert_recipe_gpu.tar"

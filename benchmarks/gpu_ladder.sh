#!/usr/bin/env bash
# The size ladder's GPU rungs: four seeds each of Bert-base at Table 1's size (12 x 384), Bert-large (24 x 512)
# and GPT (12 x 768), the three rungs in three processes side by side on the one GPU (each run's micro-batches of
# 32 leave it mostly idle), each trained on the same epoch of the Brown corpus as the CPU rungs (the same 310
# steps of 32 sequences), bf16 through the torch engine, probed with the default probe, with its untrained towers
# probed as the control. No run starts after the deadline.
#
# The device reaches no package registry: prepare the ladder's data here first and carry it with the wheels
# (`make device-carry` builds both on a fresh machine: runs/ladder/data/prepared, 14 MB, and .whl/, 18 MB; not
# the register rungs' sources beside it, which the GPU rungs do not read),
# then one call of the device tool:
#     run(command="BUDGET=6m bash benchmarks/gpu_ladder.sh", carry=["runs/ladder/data/prepared", ".whl"], timeout_s=560)
# The BERT rungs here train the ladder's recipe, which learned no context at any size: the next BERT call is
# `benchmarks/gpu_bert_recipe.sh` (Table 1's Bert-large with the piloted recipe, the context gate first).
# RUNGS names the rungs, one process each; RUNG:SEEDS shares a rung's seeds among processes. The next call: every GPU
# rung again in fp32 (the 28 Nov probes took bf16 under "auto": the BERT rungs' failed, GPT's is another measurement),
# with BERT's token axis at Bert-base's size (four passes over the epoch; one epoch taught it nothing beyond word
# frequencies; its untrained towers are 12x384's, whose exports it copies once they exist), most important first;
# what the deadline leaves undone, the next call resumes:
#     run(command="RUNGS='12x384 12x384x4:1,2 12x384x4:3,4 24x512 12x768' BUDGET=6m bash benchmarks/gpu_ladder.sh",
#         carry=["runs/ladder/data/prepared", ".whl"], timeout_s=560)
# The device returns files at most two folders deep: the exports come back as $OUT/ladder_probes.tar (rewritten
# every 15 s, so a call stopped at its limit keeps what finished). Unpack it into results/ladder/ (it holds
# probes/<rung>/...), save the call's output as results/ladder/gpu-<date>.log, then
# `python -m studies.ladder --report-only`.
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
out="${OUT:-results}"
mkdir -p "$out/ladder/probes"
rungs="${RUNGS:-12x384 24x512 12x768}"
# A call resumes the committed ladder: its rungs' exports start in $out, so a (rung, family, seed) already probed with
# today's probe is skipped and one probed otherwise (the 28 Nov BERT rungs, in bf16) is made again.
if [ "$out" != results ]; then
    for entry in $rungs; do
        if [ -d "results/ladder/probes/${entry%%:*}" ]; then
            mkdir -p "$out/ladder/probes/${entry%%:*}"
            cp -n "results/ladder/probes/${entry%%:*}"/*.json "$out/ladder/probes/${entry%%:*}/"
        fi
    done
fi
pack() { tar -C "$out/ladder" -cf "$out/.ladder_probes.tar" probes && mv "$out/.ladder_probes.tar" "$out/ladder_probes.tar"; }
( while sleep 15; do pack; done ) &
packer=$!
log() { echo "$out/ladder_$(echo "$1" | tr ':,' '_-').log"; }
for entry in $rungs; do
    seeds=()
    [[ "$entry" == *:* ]] && seeds=(--seeds "${entry#*:},")
    python3 -m studies.ladder --gpu --rungs "${entry%%:*}" "${seeds[@]}" --deadline "${BUDGET:-6m}" --threads 5 \
        --results "$out/ladder" > "$(log "$entry")" 2>&1 &
done
wait $(jobs -p | grep -v "^$packer$")
kill "$packer"
pack
for entry in $rungs; do echo "== $entry"; grep -v "step/s" "$(log "$entry")" | tail -20; done
tar -tf "$out/ladder_probes.tar"

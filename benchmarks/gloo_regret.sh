#!/usr/bin/env bash
# Planner regret on CPU gloo, world 2 (issue 4), on a quiet machine (~9 min on 2 cores):
#   1. calibrate this machine (gloo, 1 thread per rank; ~50 s) -> the profile prediction uses;
#   2. bench every strategy of the six issue sites (benchmarks/gloo_world2.sh, ITERS=6; ~7.5 min);
#   3. planner_regret with that profile (prediction alone with the model-error allowance, and
#      with --no-uncertainty for comparison).
# The profile comes from separate microbenchmarks: no scored measurement calibrates the model.
# Writes under $DIR (default benchmarks/results/gloo_regret): profile, results lines, regret tables.
set -euo pipefail
DIR=${DIR:-benchmarks/results/gloo_regret}
mkdir -p "$DIR"
echo "load before: $(uptime)" | tee "$DIR/regret.txt"
hocket calibrate --world 2 --backend gloo --threads-per-rank 1 --no-progress --out "$DIR/cpu_gloo_w2_profile.json" \
    > "$DIR/calibrate.log"
OUT="$DIR/gloo_world2.jsonl" ITERS=${ITERS:-6} bash benchmarks/gloo_world2.sh > "$DIR/bench.log"
python benchmarks/planner_regret.py "$DIR/gloo_world2.jsonl" --profile "$DIR/cpu_gloo_w2_profile.json" \
    --json "$DIR/regret.json" | tee -a "$DIR/regret.txt"
echo "--- without the model-error allowance:" | tee -a "$DIR/regret.txt"
python benchmarks/planner_regret.py "$DIR/gloo_world2.jsonl" --profile "$DIR/cpu_gloo_w2_profile.json" \
    --no-uncertainty | tee -a "$DIR/regret.txt"
echo "load after: $(uptime)" | tee -a "$DIR/regret.txt"

#!/usr/bin/env bash
# The one-GPU offload bench (benchmarks/bench_single_gpu.py, --configs rule --variants operator) at two commits,
# interleaved on one lease and priced with one calibration profile, then paired (benchmarks/paired_commits.py).
#
#   bash benchmarks/regression_1gpu.sh BASE_DIR MAIN_DIR MAIN_COMMIT ROUNDS SHAPES OUT_DIR
#
# BASE_DIR and MAIN_DIR hold each commit's hocket/ and benchmarks/ (e.g. `git archive b64b422 hocket benchmarks
# pyproject.toml | tar -x -C .base`); odd rounds run BASE first, even rounds MAIN first, so an order effect
# shows as a spread rather than a bias. Commands of each use: benchmarks/results/h200/2026-12-01_house-regression.md.
set -uo pipefail
BASE=$(realpath "$1"); MAIN=$(realpath "$2"); MAIN_COMMIT=$3; ROUNDS=$4; SHAPES=$5; OUT_DIR=$6
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 HOCKET_TIMEOUT_S=60
mkdir -p "$OUT_DIR"
(cd "$MAIN" && PYTHONPATH=$MAIN HOCKET_GIT_HASH=$MAIN_COMMIT python3 -m hocket.cli.main calibrate --world 1 \
    --no-progress --out "$OUT_DIR/profile.json" > "$OUT_DIR/calibrate.log" 2>&1); tail -1 "$OUT_DIR/calibrate.log"
bases=(); mains=()
for r in $(seq 1 "$ROUNDS"); do
  order=$([ $((r % 2)) = 1 ] && echo "base main" || echo "main base")
  for tree in $order; do
    dir=$([ "$tree" = base ] && echo "$BASE" || echo "$MAIN")
    hash=$([ "$tree" = base ] && (cd "$dir" && git rev-parse --short HEAD 2>/dev/null || echo base) || echo "$MAIN_COMMIT")
    (cd "$dir" && PYTHONPATH=$dir HOCKET_GIT_HASH=$hash HOCKET_PROFILE=$OUT_DIR/profile.json \
      timeout 300 python3 benchmarks/bench_single_gpu.py --shapes "$SHAPES" --configs rule --variants operator \
      --iters 30 --out "$OUT_DIR/${tree}_r$r.jsonl" > "$OUT_DIR/${tree}_r$r.log" 2>&1); echo "$tree r$r rc=$?"
  done
  bases+=("$OUT_DIR/base_r$r.jsonl"); mains+=("$OUT_DIR/main_r$r.jsonl")
done
python3 "$MAIN/benchmarks/paired_commits.py" --base "${bases[@]}" --main "${mains[@]}" | tee "$OUT_DIR/paired.md"

#!/usr/bin/env bash
# Issue 2's CPU benchmark: every strategy of the three operators on gloo, world 2, one
# compute thread per rank, at the all-gather+matmul shapes and, for the
# reduce-scatter/all-reduce operators, the matching backward shapes (m, k=n, n=k: the
# same FLOPs and the same bytes on the wire). Appends JSON lines to $OUT.
# Run it on a quiet machine: `uptime` first, since other processes skew CPU timings.
# Candidates take turns one iteration at a time (bench's default --rounds = --iters), so a
# change in machine load during the run hits every candidate alike.
set -euo pipefail
OUT=${OUT:-benchmarks/results/cpu/gloo_world2.jsonl}
ITERS=${ITERS:-10}
common=(--world 2 --backend gloo --threads-per-rank 1 --dtype fp32 --iters "$ITERS" --warmup 2
        --chunks 2 4 8 --out "$OUT")
echo "load before: $(uptime)"
hocket bench ag_mm --m 2048 --k 4096 --n 1024 "${common[@]}"
hocket bench ag_mm --m 4096 --k 8192 --n 512 "${common[@]}"
hocket bench mm_rs --m 2048 --k 1024 --n 4096 "${common[@]}"
hocket bench mm_rs --m 4096 --k 512 --n 8192 "${common[@]}"
hocket bench mm_ar --m 2048 --k 1024 --n 4096 "${common[@]}"
hocket bench mm_ar --m 4096 --k 512 --n 8192 "${common[@]}"
echo "load after: $(uptime)"

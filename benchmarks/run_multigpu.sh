#!/usr/bin/env bash
# The multi-GPU runs of issue 6 (and, with NPROC=4/8 and CASES=..., issue 8), from the repo root:
#   PHASES="tests nvlink host" NPROC=2 CASES=issue6 benchmarks/run_multigpu.sh [extra bench_multigpu.py args]
# calibrate: hocket calibrate on this lease (host issue costs differ between leases) -> $OUT/profile.json,
#         which the nvlink phase's planner then uses
# calibrate_host: the same with NCCL_P2P_DISABLE=1 (NCCL through host memory, as the host phase's baselines
#         run; the host relay's curve and issue costs too) -> $OUT/profile_host.json, which the host phase's
#         planner then uses (without it the host phase keeps the datasheet model)
# tests:  the NCCL operator tests (tests/gpu/test_ops_nccl.py)            -> $OUT/gpu_nccl_tests.log
# nvlink: bench_multigpu.py --link nvlink --calibrate                      -> $OUT/bench_multigpu_nvlink.*
# host:   NCCL_P2P_DISABLE=1 bench_multigpu.py --link host_staged (a separate launch) -> *_host_staged.*
# GRAPH=1: the nvlink and host phases time every call replayed from a CUDA graph (bench_multigpu.py --graph)
#         -> *_nvlink_graph.*, *_host_staged_graph.*
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HOCKET_TIMEOUT_S="${HOCKET_TIMEOUT_S:-60}"
OUT="${OUT:-benchmarks/results/h200x2}"
NPROC="${NPROC:-2}"
CASES="${CASES:-issue6}"
PHASES="${PHASES:-tests nvlink host}"
PY="${PYTHON:-python3}"
GRAPH_ARGS=() G=""
[ "${GRAPH:-0}" = 1 ] && GRAPH_ARGS=(--graph) G="_graph"
mkdir -p "$OUT"
status=0
for phase in $PHASES; do
  PROFILE_ARGS=()
  [ -f "$OUT/profile.json" ] && PROFILE_ARGS=(--profile "$OUT/profile.json")
  case "$phase" in
    calibrate)
      timeout "${CALIBRATE_TIMEOUT_S:-240}" "$PY" -m hocket.cli.main calibrate --world "$NPROC" --backend nccl \
        --no-progress --out "$OUT/profile.json" > "$OUT/calibrate.log" 2>&1 || status=1
      tail -n 12 "$OUT/calibrate.log" ;;
    calibrate_host)
      NCCL_P2P_DISABLE=1 timeout "${CALIBRATE_TIMEOUT_S:-240}" "$PY" -m hocket.cli.main calibrate --world "$NPROC" \
        --backend nccl --no-progress --out "$OUT/profile_host.json" > "$OUT/calibrate_host.log" 2>&1 || status=1
      tail -n 12 "$OUT/calibrate_host.log" ;;
    tests)
      timeout "${TEST_TIMEOUT_S:-420}" "$PY" -m pytest tests/gpu/test_ops_nccl.py -q -x -rA -p no:cacheprovider \
        > "$OUT/gpu_nccl_tests.log" 2>&1 || status=1
      tail -n 25 "$OUT/gpu_nccl_tests.log" ;;
    nvlink)
      timeout "${NVLINK_TIMEOUT_S:-420}" torchrun --nproc_per_node "$NPROC" benchmarks/bench_multigpu.py --link nvlink \
        --cases "$CASES" --calibrate --out "$OUT/bench_multigpu_nvlink$G.jsonl" "${PROFILE_ARGS[@]}" "${GRAPH_ARGS[@]}" "$@" \
        > "$OUT/bench_multigpu_nvlink$G.log" 2>&1 || status=1
      grep -v "^W[0-9]" "$OUT/bench_multigpu_nvlink$G.log" | tail -n 40 ;;
    host)
      HOST_PROFILE_ARGS=()
      [ -f "$OUT/profile_host.json" ] && HOST_PROFILE_ARGS=(--profile "$OUT/profile_host.json")
      NCCL_P2P_DISABLE=1 timeout "${HOST_TIMEOUT_S:-420}" torchrun --nproc_per_node "$NPROC" benchmarks/bench_multigpu.py \
        --link host_staged --cases "$CASES" --calibrate --out "$OUT/bench_multigpu_host_staged$G.jsonl" \
        "${HOST_PROFILE_ARGS[@]}" "${GRAPH_ARGS[@]}" "$@" \
        > "$OUT/bench_multigpu_host_staged$G.log" 2>&1 || status=1
      grep -v "^W[0-9]" "$OUT/bench_multigpu_host_staged$G.log" | tail -n 30 ;;
    *) echo "unknown phase $phase (use calibrate, calibrate_host, tests, nvlink, host)"; status=2 ;;
  esac
done
exit $status

"""Does an NCCL all-gather slow down beside a GEMM only when it starts after the GEMM?

    torchrun --nproc_per_node 2 benchmarks/contention_order.py --iters 30 --json out.json

``hocket calibrate`` times a transfer beside a background loop of GEMMs that never pauses (its
kernels fill every SM): NCCL measured 2.6x slower there on 2xH200. In an overlap pipeline the
collective is often launched *before* the GEMM it hides behind, or while the GEMM stream waits for
the previous piece. This script times one all-gather (NCCL stream) and one GEMM (main stream),
forked from one point, with the all-gather or the GEMM held back by a device-side sleep
(``torch.cuda._sleep``) so that one of them starts first, eager and replayed from a CUDA graph.
Each op is timed by CUDA events on its own stream (graph replays: external event nodes), each
iteration from an idle device behind a barrier, max over ranks, medians of ``--iters``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist

GEMMS = {"small": (4096, 4096, 1536), "large": (8192, 8192, 8192)}
AG_MIB = (4, 16)  # per-rank input of the all-gather
OFFSETS_US = (-30, 0, 15, 40)  # all-gather start minus GEMM start (negative: the all-gather first)


def sleep_cycles_per_us(device) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 20_000_000
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize(device)
    return cycles / (start.elapsed_time(end) * 1e3)


class Pattern:
    """One all-gather beside one GEMM, forked from the main stream; ``offset_us`` delays the one
    that should start second."""

    def __init__(self, shard, gathered, a, b, c, offset_us: float, per_us: float, *, graph: bool):
        self.args = shard, gathered, a, b, c
        self.offset_us, self.per_us, self.graph = offset_us, per_us, graph
        self.side = torch.cuda.Stream()
        self.events = [torch.cuda.Event(enable_timing=True, external=graph) for _ in range(4)]
        self.cuda_graph = None
        if graph:
            for _ in range(2):  # warm-up on a side stream, as torch.cuda.graph wants
                self.body()
            torch.cuda.synchronize()
            self.cuda_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.cuda_graph):
                self.body()

    def body(self) -> None:
        shard, gathered, a, b, c = self.args
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)
        e = self.events
        with torch.cuda.stream(self.side):
            if self.offset_us > 0:
                torch.cuda._sleep(int(self.offset_us * self.per_us))
            e[0].record()
            dist.all_gather_into_tensor(gathered, shard)
            e[1].record()
        if self.offset_us < 0:
            torch.cuda._sleep(int(-self.offset_us * self.per_us))
        e[2].record()
        torch.mm(a, b, out=c)
        e[3].record()
        main.wait_stream(self.side)

    def __call__(self) -> tuple[float, float]:
        if self.cuda_graph is not None:
            self.cuda_graph.replay()
        else:
            self.body()
        torch.cuda.synchronize()
        e = self.events
        return e[0].elapsed_time(e[1]), e[2].elapsed_time(e[3])


def alone(fn, iters: int) -> float:
    out = []
    for _ in range(iters):
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end))
    return statistics.median(out)


def max_over_ranks(value: float) -> float:
    t = torch.tensor([value], device="cuda", dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    world = dist.get_world_size()
    per_us = sleep_cycles_per_us(torch.cuda.current_device())
    rows = []
    for gname, (m, k, n) in GEMMS.items():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        gemm_ms = max_over_ranks(alone(lambda: torch.mm(a, b, out=c), args.iters))
        for mib in AG_MIB:
            shard = torch.randn(mib * 2**19, device="cuda", dtype=torch.bfloat16)
            gathered = torch.empty(world * shard.numel(), device="cuda", dtype=torch.bfloat16)
            dist.all_gather_into_tensor(gathered, shard)
            assert torch.equal(gathered[rank * shard.numel():(rank + 1) * shard.numel()], shard)
            ag_ms = max_over_ranks(alone(lambda: dist.all_gather_into_tensor(gathered, shard), args.iters))
            for graph in (False, True):
                for offset in OFFSETS_US:
                    pattern = Pattern(shard, gathered, a, b, c, offset, per_us, graph=graph)
                    samples = []
                    for _ in range(args.iters):
                        dist.barrier()
                        samples.append(pattern())
                    ag = max_over_ranks(statistics.median(s[0] for s in samples))
                    mm = max_over_ranks(statistics.median(s[1] for s in samples))
                    rows.append({"gemm": gname, "m": m, "k": k, "n": n, "ag_mib": mib, "graph": graph,
                                 "offset_us": offset, "ag_alone_ms": ag_ms, "gemm_alone_ms": gemm_ms,
                                 "ag_ms": ag, "gemm_ms": mm, "ag_slowdown": ag / ag_ms, "gemm_slowdown": mm / gemm_ms})
                    del pattern
    if rank == 0:
        print(f"{'gemm':6s} {'ag MiB':>6s} {'mode':6s} {'offset':>7s} {'ag alone':>9s} {'ag':>8s} {'x':>6s}"
              f" {'mm alone':>9s} {'mm':>8s} {'x':>6s}")
        for r in rows:
            print(f"{r['gemm']:6s} {r['ag_mib']:6d} {'graph' if r['graph'] else 'eager':6s} {r['offset_us']:7d}"
                  f" {r['ag_alone_ms']:9.4f} {r['ag_ms']:8.4f} {r['ag_slowdown']:6.2f}"
                  f" {r['gemm_alone_ms']:9.4f} {r['gemm_ms']:8.4f} {r['gemm_slowdown']:6.2f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "world": world,
                           "iters": args.iters, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

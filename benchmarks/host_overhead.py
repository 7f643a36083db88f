"""Host time per operator call: raw torch ops vs hocket's public API, its custom op and its direct implementation.

    python benchmarks/host_overhead.py                                  # 1 gloo rank on CPU
    torchrun --nproc_per_node 2 benchmarks/host_overhead.py             # 2 ranks (NCCL on GPUs, else gloo)

Each row is the median over ``--repeats`` of (host time of ``--calls`` calls) / calls, in
microseconds, with the ranks barrier-synchronised before every repeat. Nothing waits for
the device inside the timed loop (one ``synchronize`` after it, outside the clock), so on
GPUs this is the issue cost the host pays per call; on CPU (gloo) the collective itself
runs on the host and is part of it. Methods:

* ``raw``: what the sequential plan does with torch alone (``torch.mm`` + the collective);
* ``public``: ``hocket.ops.<op>(..., plan=<plan>)`` (the eager fast path when it applies);
* ``custom_op``: ``torch.ops.hocket.<op>`` (the torch.library dispatch path);
* ``direct``: the ``run_*`` implementation behind the custom op.

Rank 0 prints the table; ``--out FILE`` appends one JSON line per row (with versions and git hash).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

import hocket.ops as H
from hocket.bench.provenance import command_line, git_hash, versions
from hocket.launch import detect_torchrun, init_torchrun
from hocket.ops.all_gather_matmul import run_all_gather_matmul
from hocket.ops.matmul_all_reduce import run_matmul_all_reduce
from hocket.ops.matmul_reduce_scatter import run_matmul_reduce_scatter

_all_gather_into = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_into = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _init() -> None:
    """torchrun's group (NCCL on GPUs, each rank on cuda:LOCAL_RANK) or one in-process gloo rank."""
    if detect_torchrun() is not None:
        init_torchrun()
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def _device() -> torch.device:
    if torch.cuda.is_available() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_us_per_call(fns: dict[str, Callable[[], object]], device: torch.device, *, calls: int, repeats: int,
                     warmup: int) -> dict[str, float]:
    """Per method: median over ``repeats`` of the host time of ``calls`` back-to-back calls, per call (us).

    The methods take turns inside every repeat, so a slow stretch of a shared machine hits them alike.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    _sync(device)
    per_call_us: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            dist.barrier()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            per_call_us[name].append((time.perf_counter() - start) / calls * 1e6)
            _sync(device)
    return {name: statistics.median(values) for name, values in per_call_us.items()}


def methods(kind: str, plan: str, *, m: int, k: int, n: int, dtype: torch.dtype,
            device: torch.device) -> dict[str, Callable[[], object]]:
    """The four ways to run one ``kind`` call on this rank's random operands."""
    pg = dist.group.WORLD
    gn, w = pg.group_name, dist.get_world_size()
    B = torch.randn(k, n, device=device, dtype=dtype)
    if kind == "ag_mm":
        A = torch.randn(m, k, device=device, dtype=dtype)
        gathered = torch.empty(m * w, k, device=device, dtype=dtype)
        return {
            "raw": lambda: (_all_gather_into(gathered, A, group=pg), torch.mm(gathered, B)),
            "public": lambda: H.all_gather_matmul(A, [B], 0, pg, plan=plan),
            "custom_op": lambda: torch.ops.hocket.all_gather_matmul(A, [B], 0, gn, True, True, plan, "forward"),
            "direct": lambda: run_all_gather_matmul(A, [B], 0, gn, True, True, plan, "forward"),
        }
    A = torch.randn(m * w, k, device=device, dtype=dtype)
    if kind == "mm_rs":
        out = torch.empty(m, n, device=device, dtype=dtype)
        return {
            "raw": lambda: _reduce_scatter_into(out, torch.mm(A, B), group=pg),
            "public": lambda: H.matmul_reduce_scatter(A, B, "sum", 0, pg, plan=plan),
            "custom_op": lambda: torch.ops.hocket.matmul_reduce_scatter(A, B, "sum", 0, gn, plan, "forward"),
            "direct": lambda: run_matmul_reduce_scatter(A, B, "sum", 0, gn, plan, "forward"),
        }
    return {
        "raw": lambda: dist.all_reduce(torch.mm(A, B), group=pg),
        "public": lambda: H.matmul_all_reduce(A, B, "sum", pg, plan=plan),
        "custom_op": lambda: torch.ops.hocket.matmul_all_reduce(A, B, "sum", gn, plan, "forward"),
        "direct": lambda: run_matmul_all_reduce(A, B, "sum", gn, plan, "forward"),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kinds", default="ag_mm,mm_rs,mm_ar")
    p.add_argument("--plans", default="sequential,chunked")
    # not --m/--k/--n: torchrun's own parser would read them as abbreviations of its options
    p.add_argument("--rows", type=int, default=8, help="m per rank (m/w of the gathered / scattered side)")
    p.add_argument("--inner", type=int, default=16, help="k")
    p.add_argument("--cols", type=int, default=8, help="n")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--out", default=None, help="append JSON lines here (rank 0)")
    args = p.parse_args(argv)
    for name in ("rows", "inner", "cols", "calls", "repeats"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}")
    _init()
    device = _device()
    dtype = getattr(torch, args.dtype)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234 + rank)
    rows = []
    with torch.no_grad():
        for kind in args.kinds.split(","):
            for plan in args.plans.split(","):
                fns = methods(kind, plan, m=args.rows, k=args.inner, n=args.cols, dtype=dtype, device=device)
                timed = host_us_per_call(fns, device, calls=args.calls, repeats=args.repeats, warmup=args.warmup)
                rows += [dict(kind=kind, plan=plan, method=method, host_us_per_call=round(us, 2))
                         for method, us in timed.items()]
    if rank == 0:
        print(f"host time per call (median of {args.repeats} x {args.calls} calls), world {world}, "
              f"{dist.get_backend()} on {device}, m/w, k, n = {args.rows}, {args.inner}, {args.cols} {args.dtype}")
        print(f"{'kind':6s} {'plan':11s} {'raw_us':>9s} {'public_us':>10s} {'custom_op_us':>13s} {'direct_us':>10s}")
        for kind in args.kinds.split(","):
            for plan in args.plans.split(","):
                by = {r["method"]: r["host_us_per_call"] for r in rows if r["kind"] == kind and r["plan"] == plan}
                print(f"{kind:6s} {plan:11s} {by['raw']:9.1f} {by['public']:10.1f} {by['custom_op']:13.1f} "
                      f"{by['direct']:10.1f}")
        if args.out:
            common = dict(world=world, backend=dist.get_backend(), device=str(device), m=args.rows * world,
                          k=args.inner, n=args.cols, dtype=args.dtype, calls=args.calls, repeats=args.repeats,
                          versions=versions(), git=git_hash(), command=command_line())
            with open(args.out, "a") as fh:
                for row in rows:
                    fh.write(json.dumps({**row, **common}) + "\n")
    dist.barrier()
    H.close_contexts()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

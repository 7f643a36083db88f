"""Uneven-shard operators against the padded-even way of running the same uneven problem, on CPU.

gloo, world 2, one thread per rank. The problem: rank 0 holds (ag_mm) or receives (mm_rs) 3/4 of the rows,
rank 1 the rest. "padded-even" pads every rank's shard to the largest with zeros, runs the even operator
and slices the real rows out (what a caller does without uneven shards); the uneven rows run hocket's
uneven executors (``shard_rows``), exact and padded ways. Prints a markdown table of medians (ms).

    .venv/bin/python benchmarks/uneven_shards.py [--reps 15] [--rows 2048] [--k 512] [--n 512]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

from hocket.launch import RankPool

PLANS = [("bulk", None), ("bulk", "padded"), ("chunked", None), ("chunked", "padded"), ("ring", None)]


def _interleaved(variants: list[tuple[str, str, object]], reps: int) -> list[tuple[str, str, float, float]]:
    """Each variant timed ``reps`` times, the variants interleaved (one round runs each once), so that load
    from elsewhere on the host falls on all of them alike; (op, label, median ms, interquartile range ms)."""
    for _, _, fn in variants:
        for _ in range(3):
            fn()
    samples: list[list[float]] = [[] for _ in variants]
    for _ in range(reps):
        for i, (_, _, fn) in enumerate(variants):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            samples[i].append((time.perf_counter() - t0) * 1e3)
    out = []
    for (op, label, _), times in zip(variants, samples):
        q = statistics.quantiles(times, n=4)
        out.append((op, label, statistics.median(times), q[2] - q[0]))
    return out


def _plan(strategy: str, splits) -> dict:
    return {"strategy": strategy, "chunks": 4 if strategy == "chunked" else 1, **({"splits": splits} if splits else {}),
            **({"transport": "p2p"} if strategy == "ring" else {})}


def measure(case: dict) -> list[tuple[str, str, float, float]]:
    import hocket.ops as H

    torch.manual_seed(dist.get_rank())
    rank, rows, k, n = dist.get_rank(), case["rows"], case["k"], case["n"]
    sizes = [rows * 3 // 4, rows - rows * 3 // 4]
    top = max(sizes)
    group = dist.group.WORLD
    A, B = torch.randn(sizes[rank], k), torch.randn(k, n)
    padded_A = torch.zeros(top, k)
    A2 = torch.randn(rows, k)
    padded_full = torch.zeros(2 * top, k)
    variants = []
    for strategy, splits in PLANS:
        plan = _plan(strategy, splits)
        label = f"{strategy}{':' + splits if splits else ''}"
        variants.append(("ag_mm", f"uneven {label}", lambda p=plan: H.all_gather_matmul(
            A, [B], 0, group, plan=p, return_A=False, shard_rows=sizes)))
        if splits is None:
            def ag_padded_even(p=plan):
                padded_A[:sizes[rank]].copy_(A)
                _, (o,) = H.all_gather_matmul(padded_A, [B], 0, group, plan=p, return_A=False)
                return torch.cat([o[:sizes[0]], o[top:top + sizes[1]]])

            variants.append(("ag_mm", f"padded-even {label}", ag_padded_even))
    for strategy, splits in PLANS:
        plan = _plan(strategy, splits)
        label = f"{strategy}{':' + splits if splits else ''}"
        variants.append(("mm_rs", f"uneven {label}", lambda p=plan: H.matmul_reduce_scatter(
            A2, B, "sum", 0, group, plan=p, shard_rows=sizes)))
        if splits is None:
            def rs_padded_even(p=plan):
                padded_full[:sizes[0]].copy_(A2[:sizes[0]])
                padded_full[top:top + sizes[1]].copy_(A2[sizes[0]:])
                return H.matmul_reduce_scatter(padded_full, B, "sum", 0, group, plan=p)[:sizes[rank]]

            variants.append(("mm_rs", f"padded-even {label}", rs_padded_even))
    return _interleaved(variants, case["reps"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--n", type=int, default=512)
    args = parser.parse_args()
    case = dict(rows=args.rows, k=args.k, n=args.n, reps=args.reps)
    with RankPool(2, backend="gloo", threads_per_rank=1, timeout_s=600, start_method="spawn") as pool:
        results = pool.run(measure, case)
    print(f"rows={args.rows} (split {args.rows * 3 // 4}/{args.rows - args.rows * 3 // 4}) k={args.k} n={args.n} "
          f"fp32, gloo world 2, 1 thread/rank, median of {args.reps} interleaved rounds (ms, the slower rank's)\n")
    print("| op | way | median ms | IQR ms |\n|---|---|---|---|")
    for i, (op, label, _, _) in enumerate(results[0]):
        slow = max(results, key=lambda r: r[i][2])[i]
        print(f"| {op} | {label} | {slow[2]:.2f} | {slow[3]:.2f} |")


if __name__ == "__main__":
    main()

"""Hierarchical (``hierarchy="intra_first"``) plans against flat ones on gloo world 4 described as two nodes of two
ranks (the ``cpu-2node`` preset), on one CPU host.

Both "nodes" are processes of the same machine, so the intra-node and the inter-node phases share one loopback:
this measures the hierarchy's correctness and its overhead (one more call per collective, the reorder copy, the
sub-groups' smaller rings), not a faster network path. Per operator and shape, every rank runs each plan once to
check it against the flat plan's result and to make the sub-groups, then ``--repeats`` timed calls, plan after
plan in turn; a sample is the slowest rank's time (a barrier before each call). It also times the three
collectives alone, flat (``TorchDistTransport``) against hierarchical (``HierarchicalTransport``), and prints
the cost model's price of each plan on ``cpu-2node`` beside the measurement.

    python benchmarks/hierarchy_cpu.py --smoke
    python benchmarks/hierarchy_cpu.py --repeats 15 --json out.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

CLUSTER = "cpu-2node"
WORLD = 4
SHAPES = {"ag_mm": (2048, 1024, 512), "mm_rs": (2048, 512, 1024), "mm_ar": (1024, 512, 1024)}
"""m x k x n of each operator (m: the gathered / reduced rows; fp32)."""
STRATEGIES = {"ag_mm": [("sequential", 1, "natural"), ("bulk", 1, "natural"), ("chunked", 4, "natural"),
                        ("chunked", 4, "local_first")],
              "mm_rs": [("sequential", 1, "natural"), ("bulk", 1, "natural"), ("chunked", 4, "natural"),
                        ("chunked", 4, "local_first")],
              "mm_ar": [("sequential", 1, "natural"), ("bulk", 1, "natural"), ("chunked", 4, "natural"),
                        ("substituted", 4, "natural")]}


def plan_of(strategy: str, chunks: int, order: str, hierarchy: str | None) -> dict:
    plan = {"strategy": strategy, "chunks": chunks, "hierarchy": hierarchy}
    if order != "natural":
        plan["order"] = order
    if strategy == "substituted":
        plan["substitute"] = "rs_ag"
    return plan


def label(plan: dict) -> str:
    text = plan["strategy"] + (f"({plan['chunks']})" if plan["strategy"] in ("chunked", "substituted") else "")
    text += f"[{plan['order']}]" if plan.get("order") else ""
    return text + ("/intra_first" if plan["hierarchy"] else "")


def _slowest_ms(start: float) -> float:
    elapsed = torch.tensor([(time.perf_counter() - start) * 1e3])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed)


def _operator_call(kind: str, m: int, k: int, n: int, rank: int):
    import hocket.ops as H

    gen = torch.Generator().manual_seed(rank)
    group = dist.group.WORLD
    if kind == "ag_mm":
        A, B = torch.randn(m // WORLD, k, generator=gen), torch.randn(k, n, generator=gen)
        return lambda plan: H.all_gather_matmul(A, [B], 0, group, return_A=False, plan=plan)[1][0]
    A, B = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    if kind == "mm_rs":
        return lambda plan: H.matmul_reduce_scatter(A, B, "sum", 0, group, plan=plan)
    return lambda plan: H.matmul_all_reduce(A, B, "sum", group, plan=plan)


def run_operators(rank: int, world: int, case: dict) -> dict:
    import hocket.ops as H
    from hocket.hardware import load_cluster
    from hocket.ops.live import LivePlanner, set_process_planner

    torch.set_num_threads(1)
    set_process_planner(LivePlanner(cluster=load_cluster(CLUSTER)))
    kind, (m, k, n) = case["kind"], case["shape"]
    call = _operator_call(kind, m, k, n, rank)
    plans = [plan_of(*s, h) for s in STRATEGIES[kind] for h in (None, "intra_first")]
    reference = call(plans[0])
    for plan in plans:  # check, warm up, make the sub-groups
        H.assert_close(call(plan), reference, world=world, what=label(plan))
    samples: dict[str, list[float]] = {label(p): [] for p in plans}
    for _ in range(case["repeats"]):
        for plan in plans:
            dist.barrier()
            start = time.perf_counter()
            call(plan)
            samples[label(plan)].append(_slowest_ms(start))
    return samples


def run_collectives(rank: int, world: int, case: dict) -> dict:
    from hocket.transport.group import resolve_group
    from hocket.transport.hierarchical import hierarchical_transport
    from hocket.transport.torch_dist import TorchDistTransport

    torch.set_num_threads(1)
    group = resolve_group(dist.group.WORLD)
    flat, hier = TorchDistTransport(group), hierarchical_transport(group, (0, 0, 1, 1), cluster_name=CLUSTER)
    numel = case["bytes"] // 4
    big, block = torch.randn(numel), torch.randn(numel // world)
    gathered, scattered = torch.empty(numel), torch.empty(numel // world)

    def ops(t):
        return {"all_gather": lambda: t.all_gather(gathered, block).wait(),
                "reduce_scatter": lambda: t.reduce_scatter(scattered, big).wait(),
                "all_reduce": lambda: t.all_reduce(big.clone()).wait()}

    runs = {f"{op} {name}": fn for name, t in (("flat", flat), ("intra_first", hier)) for op, fn in ops(t).items()}
    for fn in runs.values():
        fn()
    samples: dict[str, list[float]] = {key: [] for key in runs}
    for _ in range(case["repeats"]):
        for key, fn in runs.items():
            dist.barrier()
            start = time.perf_counter()
            fn()
            samples[key].append(_slowest_ms(start))
    return samples


def predicted_ms(kind: str, shape: tuple[int, int, int], plan: dict) -> float:
    from hocket.core.plan import Plan
    from hocket.core.site import Site
    from hocket.hardware import load_cluster
    from hocket.strategies import predict

    m, k, n = shape
    site = Site(kind=kind, m=m, k=k, n=n, dtype="float32", world=WORLD)
    return predict(site, Plan.from_dict({k_: v for k_, v in plan.items() if v is not None}),
                   load_cluster(CLUSTER)).total_ms


def main(argv: list[str] | None = None) -> None:
    from hocket.launch import spawn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--collective-bytes", type=int, default=4 << 20)
    parser.add_argument("--smoke", action="store_true", help="small shapes, three repeats")
    parser.add_argument("--json", default=None, help="append one JSON line per plan to this file")
    args = parser.parse_args(argv)
    shapes = dict(SHAPES)
    if args.smoke:
        shapes = {kind: (m // 8, k // 4, n // 4) for kind, (m, k, n) in SHAPES.items()}
        args.repeats, args.collective_bytes = 3, 1 << 18
    lines = []
    print(f"gloo world {WORLD} as {CLUSTER} (two nodes of two ranks on one host: both phases share the loopback)")
    print(f"{'op':<7} {'m x k x n':<16} {'plan':<34} {'median ms':>10} {'p10-p90':>17} {'vs flat':>8} "
          f"{'predicted':>10}")
    for kind, shape in shapes.items():
        out = spawn(run_operators, world_size=WORLD, backend="gloo", args=({"kind": kind, "shape": shape,
                                                                            "repeats": args.repeats},),
                    threads_per_rank=1, timeout_s=900)[0]
        for strategy in STRATEGIES[kind]:
            flat_plan, hier_plan = plan_of(*strategy, None), plan_of(*strategy, "intra_first")
            flat_ms = statistics.median(out[label(flat_plan)])
            for plan in (flat_plan, hier_plan):
                values = sorted(out[label(plan)])
                med = statistics.median(values)
                lo, hi = values[len(values) // 10], values[(len(values) * 9) // 10 - (1 if len(values) >= 10 else 0)]
                pred = predicted_ms(kind, shape, plan)
                print(f"{kind:<7} {'x'.join(map(str, shape)):<16} {label(plan):<34} {med:>10.2f} "
                      f"{lo:>8.2f}-{hi:<8.2f} {flat_ms / med:>7.2f}x {pred:>10.2f}")
                lines.append({"what": "operator", "kind": kind, "shape": list(shape), "plan": plan,
                              "median_ms": med, "samples_ms": values, "predicted_ms": pred})
    out = spawn(run_collectives, world_size=WORLD, backend="gloo",
                args=({"bytes": args.collective_bytes, "repeats": args.repeats},), threads_per_rank=1,
                timeout_s=900)[0]
    print(f"\ncollectives alone, {args.collective_bytes / 2**20:.2f} MiB buffers (fp32)")
    for key, values in out.items():
        op, how = key.split()
        flat_ms = statistics.median(out[f"{op} flat"])
        med = statistics.median(values)
        print(f"{op:<16} {how:<12} {med:>10.2f} ms {flat_ms / med:>7.2f}x")
        lines.append({"what": "collective", "op": op, "hierarchy": how, "bytes": args.collective_bytes,
                      "median_ms": med, "samples_ms": sorted(values)})
    if args.json:
        with open(args.json, "a") as fh:
            for line in lines:
                fh.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()

"""`hocket predict`: predicted time of one site on a described cluster, every candidate plan and the best.

Shapes are per rank in DESIGN.md's convention (m k n; m after the gather for ag_mm,
before the scatter for mm_rs; k local for mm_rs and mm_ar). Nothing runs: the cost
model prices each plan from the cluster preset (and a calibration profile if given).

  hocket predict ag_mm --m 4096 --k 12288 --n 6144 --world 8 --dtype bf16 --cluster h800x8
  hocket predict mm_rs --m 8192 --k 3584 --n 8192 --world 8 --cluster h200x8 --strategy chunked --chunks 4 --json
  hocket predict mm_d2h --m 8192 --k 8192 --n 7168 --cluster h200x1
  hocket predict halo --grid 4096x4096 --procs 2 --radius 2 --steps 4 --cluster cpu-host
  hocket predict moe --hidden 4096 --ffn 14336 --experts 8 --topk 2 --tokens 4096 --world 8 --cluster h200x8

``moe`` is the two expert-parallel sites of one MoE layer (``hocket.ops.moe_experts``: ``a2a_mm`` dispatch + first
grouped GEMM, ``mm_a2a`` second grouped GEMM + combine): ``--hidden``, ``--ffn``, ``--experts``, ``--topk``,
``--tokens`` (per rank), ``--world`` and ``--skew`` (uniform or zipf:S) instead of --m/--k/--n; its candidates
are ``hocket.plan.moe``'s (every strategy x split mode x transport x chunk count), each priced on both halves of
the layer as ``plan=None`` chooses (``--moe-site both``: each site on its own), and ``--splits`` sets the split
mode of a plan given by the plan flags.

``halo`` is a halo-exchange stencil (``hocket.ops.stencil_steps``): ``--grid``, ``--procs`` (the process
grid, product = ranks) and ``--radius`` instead of --m/--k/--n; its candidates are ``hocket.plan.halo``'s
and a step's compute is estimated from the grid (a program's ``plan=None`` call times its ``step_fn``).

``h2d_mm`` / ``mm_d2h`` are the single-device offloads (``hocket.ops.matmul_from_host`` /
``matmul_to_host``: A from, or C to, pinned host memory); their candidates are
``hocket.plan.offload``'s (what ``plan=None`` chooses among) and ``--world`` is 1.

Candidates priced alike are one row of the table: candidates whose printed prices (total,
compute, comm, exposed, and replayed with ``--eager-graphs``) all agree within relative
``hocket.graph.report.ALIKE_REL_TOL`` (1e-9) form a group, shown on the row of its first
candidate in ranked order with the others named after it (``also: /sms=16, [reverse]``).
``--json`` still lists every candidate; each has ``group`` (the index in ``candidates`` of
its group's first candidate) and ``also`` (the labels of the rest of its group).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hocket.cli import _halo, _moe, _shards
from hocket.cli._clusters import add_cluster_arguments
from hocket.cli._ranks import positive_int
from hocket.graph.report import also_text, priced_alike
from hocket.plan.labels import plan_label

COLLECTIVE_KINDS = ("ag_mm", "mm_rs", "mm_ar")
OFFLOAD_KINDS = ("h2d_mm", "mm_d2h")
KINDS = COLLECTIVE_KINDS + OFFLOAD_KINDS + ("halo", "moe")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "predict", help="predicted time of one site: sequential, every candidate plan, the best",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=KINDS, help="all-gather+matmul, matmul+reduce-scatter, matmul+all-reduce, "
                                                    "a single-device offload (from / to pinned host memory), "
                                                    "a halo-exchange stencil, or an expert-parallel MoE "
                                                    "layer")
    parser.add_argument("--m", type=positive_int, default=None, help="rows (after the gather for ag_mm); "
                                                                     "required but for halo and moe")
    parser.add_argument("--k", type=positive_int, default=None, help="inner dim (local k for mm_rs/mm_ar)")
    parser.add_argument("--n", type=positive_int, default=None, help="columns of B (per rank)")
    parser.add_argument("--world", type=positive_int, default=None,
                        help="ranks in the group (required for ag_mm, mm_rs, mm_ar; 1 for the offloads)")
    parser.add_argument("--dtype", default="bf16", help="bf16, fp16, fp32, fp8 (default bf16)")
    parser.add_argument("--num-b", type=positive_int, default=1, help="B matrices sharing the gathered A (ag_mm)")
    parser.add_argument("--first-rank", type=int, default=0,
                        help="global rank of the group's first member (the group is contiguous)")
    add_cluster_arguments(parser, required=True)
    parser.add_argument("--profile", default=None, help="calibration profile JSON of that cluster")
    group = parser.add_argument_group("one plan to price (besides the candidates)")
    group.add_argument("--strategy", default=None, help="sequential, bulk, chunked, ring, bidir_ring, tile_fused, "
                                                        "substituted; moe: token_blocks, per_source, "
                                                        "expert_groups, shared_overlap")
    group.add_argument("--chunks", type=positive_int, default=None, help="pieces / ring sub-steps / flag groups")
    group.add_argument("--transport", default=None, help="collective, p2p, copy_engine, host_staged")
    group.add_argument("--order", default=None, help="natural, local_first, reverse")
    group.add_argument("--comm-sms", type=positive_int, default=None, help="SMs an SM-driven transfer may use")
    group.add_argument("--hierarchy", default=None, help="intra_first (groups spanning nodes)")
    group.add_argument("--protocol", default=None, help="pull, put, push (chunked over copy_engine)")
    group.add_argument("--plan", default=None, help="a Plan as a JSON file path or inline JSON")
    parser.add_argument("--steady-state", action="store_true",
                        help="price one call of a loop with the host ahead (a training step), not one call from "
                             "an idle GPU (hocket.cost.steady)")
    parser.add_argument("--eager-graphs", action="store_true",
                        help="also price each candidate replayed from hocket's own CUDA graph (HOCKET_EAGER_GRAPHS: "
                             "the replay plus copying its inputs in and outputs out); `auto` replays where that is "
                             "below the issued call")
    parser.add_argument("--variants", action="store_true",
                        help="also list the variants a plan stands for (each named copy-engine peer protocol), "
                             "as autotuning times them; prediction alone runs the automatic protocol")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    _shards.add_shards_argument(parser)
    _halo.add_arguments(parser)
    _moe.add_arguments(parser)
    parser.set_defaults(func=run)


def requested_plan(args):
    """The plan named by --plan or the plan flags, or None when neither was given."""
    from hocket.core.plan import Plan

    fields = {"strategy": args.strategy, "chunks": args.chunks, "transport": args.transport, "order": args.order,
              "comm_sms": args.comm_sms, "hierarchy": args.hierarchy, "protocol": args.protocol,
              "splits": getattr(args, "splits", None)}
    given = {k: v for k, v in fields.items() if v is not None}
    if args.plan is not None:
        if given:
            raise ValueError(f"--plan was given together with {sorted('--' + k for k in given)}; use one or the other")
        from hocket.core.files import ConfigFileError, parse_json, read_bounded

        text = args.plan.strip()
        source = "--plan (inline JSON)"
        if not text.startswith("{"):
            path = Path(text).expanduser()
            if not path.exists():
                raise ValueError(f"--plan {args.plan!r} is neither inline JSON nor an existing file")
            text, source = read_bounded(path, what="plan file (one Plan as JSON)"), str(path)
        data = parse_json(text, source)
        if not isinstance(data, dict):
            raise ConfigFileError(source, f"holds JSON of a {type(data).__name__}; a plan is one JSON object like "
                                          f'{{"strategy": "chunked", "chunks": 4}}')
        try:
            return Plan.from_dict(data)
        except (TypeError, ValueError) as exc:
            raise ConfigFileError(source, f"is not a valid plan ({exc})") from None
    return Plan(**given) if given else None


def build(args) -> dict:
    """Everything `hocket predict` reports, as plain data (the --json object)."""
    from hocket.core.site import Site
    from hocket.cost.calibration import calibration_view
    from hocket.hardware import load_cluster
    from hocket.plan.search import search
    from hocket.strategies import predict

    if args.kind == "halo":
        args.requested = requested_plan(args)
        return _halo.build(args)
    if args.kind == "moe":
        args.requested = requested_plan(args)
        return _moe.build(args)
    missing = [f"--{name}" for name in ("m", "k", "n") if getattr(args, name) is None]
    if missing:
        raise ValueError(f"{args.kind} needs {', '.join(missing)} (the per-rank m, k, n)")
    cluster = load_cluster(args.cluster)
    offload = args.kind in OFFLOAD_KINDS
    if offload and args.world not in (None, 1):
        raise ValueError(f"--world {args.world}: {args.kind} runs on one device and its host link; use --world 1 "
                         f"(or leave it out)")
    if not offload and args.world is None:
        raise ValueError(f"--world is required for {args.kind} (ranks in the group)")
    world = 1 if offload else args.world
    if args.kind in ("ag_mm", "mm_rs") and args.m % world:
        fit = args.m + (-args.m) % world
        raise ValueError(f"--m {args.m} is not divisible by --world {world}: {args.kind} splits its m rows evenly over "
                         f"the ranks (the operators and `hocket bench` reject it); use --m {fit} (pad the rows) or "
                         f"--m {args.m - args.m % world or world}")
    if args.first_rank < 0 or args.first_rank + world > cluster.world_size:
        raise ValueError(f"--first-rank {args.first_rank} with --world {world} does not fit cluster "
                         f"{cluster.name!r} ({cluster.world_size} ranks); use a smaller group or a larger cluster")
    ranks = tuple(range(args.first_rank, args.first_rank + world)) if args.first_rank else ()
    site = Site(kind=args.kind, m=args.m, k=args.k, n=args.n, dtype=args.dtype, world=world,
                num_b=args.num_b, ranks=ranks)
    profile = None
    if args.profile:
        from hocket.hardware.profile import load_profile

        profile = load_profile(args.profile, expected=None)
    view = calibration_view(profile)
    requested = requested_plan(args)
    # the planner's candidate space, priced once each (hocket.plan.search keeps the sequential baseline)
    predictions = {}

    def cost(site, plan):
        predictions[plan] = predict(site, plan, cluster, view, steady_state=args.steady_state)
        return predictions[plan].total_ms

    if offload:  # hocket.plan.offload's candidates, in the order plan=None prices them (sequential first)
        from hocket.plan.offload import offload_candidates

        plans = list(offload_candidates(site))
        for plan in plans:
            cost(site, plan)
        plans = plans[:1] + sorted(plans[1:], key=lambda p: predictions[p].total_ms)
    else:
        from hocket.plan.space import SpaceConfig

        result = search(site, cluster, cost_fn=cost, space_config=SpaceConfig(variants=args.variants))
        plans = [result.sequential] + [s.plan for s in result.ranked if s.plan != result.sequential]
    rows = [{"plan": plan.to_dict(), "label": plan_label(plan), **predictions[plan].to_dict()} for plan in plans]
    if getattr(args, "eager_graphs", False):
        if offload:
            raise ValueError(f"--eager-graphs prices the multi-rank operators' replays; {args.kind} has none")
        for plan, row in zip(plans, rows):
            row["replayed_ms"] = replayed_ms(site, plan, cluster, view)
            row["auto_replays"] = row["replayed_ms"] is not None and row["replayed_ms"] < row["total_ms"]
    sequential = rows[0]
    for row in rows:
        row["speedup"] = sequential["total_ms"] / row["total_ms"] if row["total_ms"] > 0 else 1.0
    groups = priced_alike([_prices(row) for row in rows])
    for index, row in enumerate(rows):
        row["group"] = groups[index]
        row["also"] = [other["label"] for j, other in enumerate(rows) if groups[j] == groups[index] and j != index]
    best = min(rows, key=lambda r: r["total_ms"])
    out = {
        "site": site.to_dict(), "cluster": cluster.name, "profile": args.profile, "steady_state": args.steady_state,
        "sequential_ms": sequential["total_ms"], "sequential_plan": sequential["plan"],
        "best_ms": best["total_ms"], "best_plan": best["plan"], "best_label": best["label"], "best_group": best["group"],
        "candidates": rows,
    }
    if getattr(args, "shards", False):
        if offload:
            raise ValueError(f"--shards sizes a tensor-parallel group's weight split; {args.kind} runs on one device")
        out["shards"] = _shards.site_shards(site, cluster, view, steady_state=args.steady_state)
    if requested is not None:
        pred = predict(site, requested, cluster, view, steady_state=args.steady_state)
        out["requested"] = {"plan": requested.to_dict(), "label": plan_label(requested), **pred.to_dict(),
                            "speedup": sequential["total_ms"] / pred.total_ms if pred.total_ms > 0 else 1.0}
    return out


def _prices(row: dict) -> tuple[float | None, ...]:
    """What the table prints of a candidate's price: the fields two candidates must share to be one row."""
    return (row["total_ms"], row["compute_ms"], row["comm_ms"], row["exposed_comm_ms"], row.get("replayed_ms"))


def replayed_ms(site, plan, cluster, view) -> float | None:
    """``plan``'s call replayed from hocket's own CUDA graph (``HOCKET_EAGER_GRAPHS``): the replay
    (``predict(..., captured=True)``) plus its copies (:func:`hocket.plan.eager_graphs.graph_copy_ms`);
    None where a graph cannot capture the plan."""
    from hocket.plan.eager_graphs import graph_copy_ms, replayable
    from hocket.strategies import predict

    if not replayable(site, plan):
        return None
    return predict(site, plan, cluster, view, captured=True).total_ms + graph_copy_ms(site, cluster)


def format_table(result: dict) -> str:
    site = result["site"]
    lines = [f"{site['kind']} m={site['m']} k={site['k']} n={site['n']} {site['dtype']} world={site['world']} "
             f"on {result['cluster']}" + (f" (profile {result['profile']})" if result["profile"] else ""),
             f"{'plan':<40} {'total_ms':>10} {'compute_ms':>11} {'comm_ms':>9} {'exposed_ms':>11} {'speedup':>8}"]
    best_group = result.get("best_group")
    rows = [row for index, row in enumerate(result["candidates"]) if row.get("group", index) == index]
    graphs = any("replayed_ms" in row for row in rows)
    if graphs:
        lines[-1] += f" {'replayed_ms':>12}"
    if "requested" in result:
        rows = [dict(result["requested"], label="requested: " + result["requested"]["label"])] + rows
    for index, row in enumerate(rows):
        requested = index == 0 and "requested" in result
        best = not requested and (row.get("group") == best_group if best_group is not None
                                  else row["plan"] == result["best_plan"])
        mark = " *" if best else ""
        also = "" if requested else also_text(row["label"], row.get("also", ()))
        lines.append(f"{row['label'] + mark:<40} {row['total_ms']:>10.4f} {row['compute_ms']:>11.4f} "
                     f"{row['comm_ms']:>9.4f} {row['exposed_comm_ms']:>11.4f} {row['speedup']:>8.3f}"
                     + (_replayed_cell(row) if graphs else "") + (f"  {also}" if also else ""))
    lines.append(f"sequential: {result['sequential_ms']:.4f} ms   best: {result['best_label']} "
                 f"{result['best_ms']:.4f} ms ({result['sequential_ms'] / result['best_ms']:.3f}x)")
    if graphs:
        lines.append("replayed_ms: the call replayed from hocket's own CUDA graph with its copies "
                     "(HOCKET_EAGER_GRAPHS); R: auto would replay it; —: a graph cannot capture the plan")
    if "shards" in result:
        lines.append(_shards.shards_text(result["shards"]))
    return "\n".join(lines)


def _replayed_cell(row: dict) -> str:
    ms = row.get("replayed_ms")
    if ms is None:
        return f" {'—':>12}" if "replayed_ms" in row else ""
    return f" {ms:>10.4f}{' R' if row.get('auto_replays') else '  '}"


def run(args) -> int:
    try:
        result = build(args)
    except (ValueError, TypeError) as exc:
        print(f"hocket predict: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, sort_keys=True))
    elif args.kind == "halo":
        print(_halo.format_table(result))
    elif args.kind == "moe":
        print(_moe.format_table(result))
    else:
        print(format_table(result))
    return 0

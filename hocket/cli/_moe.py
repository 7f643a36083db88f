"""``hocket predict moe``: the two expert-parallel sites of one MoE layer (``hocket.ops.moe_experts``), every
candidate plan of each.

  hocket predict moe --hidden 4096 --ffn 14336 --experts 8 --topk 2 --tokens 4096 --world 8 --cluster h200x8
  hocket predict moe --hidden 2048 --ffn 768 --experts 128 --topk 8 --tokens 2048 --world 2 --skew zipf:1.2 \\
      --dtype fp32 --cluster cpu-host
  hocket predict moe ... --shared-ffn 2048 --moe-site a2a_mm --plan '{"strategy": "token_blocks", "chunks": 4}'

``a2a_mm`` is the dispatch and the first grouped GEMM, ``mm_a2a`` the second grouped GEMM and the combine; one
plan runs both, so by default (``--moe-site layer``) every plan is priced on the two together, as ``plan=None``
chooses; ``--moe-site both`` prices each site on its own;
``--tokens`` are per rank; ``--skew`` the router (``uniform``, or ``zipf:S``: expert ``e`` chosen in proportion
to ``1 / (e + 1) ** S``, the same popularity on every rank). ``--shared-ffn`` gives the ``a2a_mm`` site a
shared expert of that width (its call computes it). Nothing runs: the plans are priced by
``hocket.strategies.moe.predict_moe`` and chosen by ``hocket.plan.moe.search_moe``.
"""

from __future__ import annotations

import argparse

MOE_SITES = ("layer", "both", "a2a_mm", "mm_a2a")


def skew(text: str) -> str:
    """``uniform`` or ``zipf:S`` (S a number >= 0), checked."""
    from hocket.core.moe import parse_skew

    try:
        parse_skew(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from hocket.cli._ranks import positive_int

    group = parser.add_argument_group("MoE layers (kind moe: the a2a_mm and mm_a2a sites of one layer)")
    group.add_argument("--hidden", type=positive_int, default=None, help="model width (rows the all-to-all moves)")
    group.add_argument("--ffn", type=positive_int, default=None, help="routed expert's intermediate width")
    group.add_argument("--experts", type=positive_int, default=None, help="routed experts (divisible by --world)")
    group.add_argument("--topk", type=positive_int, default=None, help="experts each token is routed to")
    group.add_argument("--tokens", type=int, default=None, help="tokens per rank (>= 0)")
    group.add_argument("--skew", type=skew, default="uniform", help="uniform (default) or zipf:S, e.g. zipf:1.0")
    group.add_argument("--shared-ffn", type=int, default=0, help="shared expert's width on a2a_mm (default 0: none)")
    group.add_argument("--moe-site", choices=MOE_SITES, default="layer",
                       help="layer (default: both halves under one plan, what plan=None chooses by), both (each "
                            "site on its own), a2a_mm or mm_a2a")
    group.add_argument("--backward", action="store_true", help="price the sites' backward (data + weight grads)")
    group.add_argument("--splits", default=None, choices=("exchanged", "padded"),
                       help="split mode of the plan given by the plan flags (MoE only)")


def sites(args) -> list:
    """The MoeSites ``args`` describe (a2a_mm first)."""
    from hocket.core.moe import MoeSite, routing_counts

    missing = [flag for flag, value in (("--hidden", args.hidden), ("--ffn", args.ffn), ("--experts", args.experts),
                                        ("--topk", args.topk), ("--tokens", args.tokens), ("--world", args.world))
               if value is None]
    if missing:
        raise ValueError(f"predict moe needs {', '.join(missing)}")
    if args.tokens < 0:
        raise ValueError(f"--tokens {args.tokens} must be >= 0 (tokens per rank)")
    if args.shared_ffn < 0:
        raise ValueError(f"--shared-ffn {args.shared_ffn} must be >= 0 (0: no shared expert)")
    if args.experts % args.world:
        raise ValueError(f"--experts {args.experts} does not divide over --world {args.world} ranks; expert "
                         f"parallelism puts experts / world on each rank: use a world that divides it")
    if args.topk > args.experts:
        raise ValueError(f"--topk {args.topk} is above --experts {args.experts}: a token picks distinct experts")
    counts = routing_counts(args.skew, tokens=args.tokens, topk=args.topk, experts=args.experts, world=args.world)
    kinds = ("a2a_mm", "mm_a2a") if args.moe_site == "both" else \
        ("a2a_mm",) if args.moe_site == "layer" else (args.moe_site,)
    direction = "backward" if args.backward else "forward"
    return [MoeSite(kind=kind, tokens=args.tokens, hidden=args.hidden, ffn=args.ffn, experts=args.experts,
                    topk=args.topk, world=args.world, dtype=args.dtype, counts=counts, direction=direction,
                    shared_ffn=args.shared_ffn if kind == "a2a_mm" else 0)
            for kind in kinds]


def price_site(site, cluster, view, requested=None, *, layer: bool = False, steady_state: bool = False) -> dict:
    """One site's report (``layer``: the site's layer, both halves under each plan): the chosen plan,
    sequential, every candidate, the pruned plans and why."""
    from hocket.plan.labels import plan_label
    from hocket.plan.moe import search_moe
    from hocket.strategies import priced_for
    from hocket.strategies.moe import moe_plan, predict_moe, predict_moe_layer

    def price(x, plan):
        return (predict_moe_layer if layer else predict_moe)(x, plan, cluster, view, steady_state=steady_state)

    result = search_moe(site, cluster, profile=view, layer=layer, steady_state=steady_state)
    moe_names = set(priced_for(site.kind))
    plans = [result.sequential] + [s.plan for s in result.ranked if s.plan != result.sequential]
    reasons = {s.plan: s.reason for s in result.ranked}
    rows = []
    for plan in plans:
        pred = price(site, plan)
        rows.append({"plan": plan.to_dict(), "label": plan_label(plan), **pred.to_dict(), "reason": reasons[plan]})
    for row in rows:
        row["speedup"] = rows[0]["total_ms"] / row["total_ms"] if row["total_ms"] > 0 else 1.0
    out = {"site": site.to_dict(), "layer": layer, "key": site.key, "skew_class": site.skew_class,
           "busiest_rank": site.busiest_rank, "sequential_ms": result.sequential_ms,
           "chosen_plan": result.chosen.to_dict(), "chosen_label": plan_label(result.chosen),
           "chosen_ms": result.chosen_ms, "candidates": rows,
           "pruned": [{"plan": p.plan.to_dict(), "label": plan_label(p.plan), "reason": p.reason,
                       "moe": p.plan.strategy in moe_names} for p in result.pruned]}
    if requested is not None:
        plan = moe_plan(requested)
        pred = price(site, plan)
        out["requested"] = {"plan": plan.to_dict(), "label": plan_label(plan), **pred.to_dict(),
                            "speedup": result.sequential_ms / pred.total_ms if pred.total_ms > 0 else 1.0}
    return out


def build(args) -> dict:
    """The --json object of ``hocket predict moe``."""
    from hocket.cost.calibration import calibration_view
    from hocket.hardware import load_cluster

    described = sites(args)
    cluster = load_cluster(args.cluster)
    cluster.check_world(args.world, arg="--world")
    profile = None
    if args.profile:
        from hocket.hardware.profile import load_profile

        profile = load_profile(args.profile, expected=None)
    view = calibration_view(profile)
    requested = getattr(args, "requested", None)
    return {"cluster": cluster.name, "profile": args.profile, "skew": args.skew,
            "steady_state": bool(getattr(args, "steady_state", False)),
            "sites": [price_site(site, cluster, view, requested, layer=args.moe_site == "layer",
                                 steady_state=bool(getattr(args, "steady_state", False))) for site in described]}


def format_table(result: dict) -> str:
    lines = []
    for report in result["sites"]:
        site = report["site"]
        what = "layer (a2a_mm + mm_a2a, one plan)" if report["layer"] else site["kind"]
        lines.append(f"{what} ({site['direction']}) tokens={site['tokens']} hidden={site['hidden']} "
                     f"ffn={site['ffn']} experts={site['experts']} topk={site['topk']} world={site['world']} "
                     f"{site['dtype']} skew={result['skew']} (class {report['skew_class']}, busiest rank "
                     f"{report['busiest_rank']})" + (f" shared_ffn={site['shared_ffn']}" if site["shared_ffn"] else "")
                     + f" on {result['cluster']}")
        lines.append(f"{'plan':<36} {'total_ms':>10} {'compute_ms':>11} {'comm_ms':>9} {'exposed_ms':>11} "
                     f"{'speedup':>8}  why")
        rows = list(report["candidates"])
        if "requested" in report:
            rows = [dict(report["requested"], label="requested: " + report["requested"]["label"], reason="")] + rows
        for row in rows:
            chosen = row["plan"] == report["chosen_plan"] and not row["label"].startswith("requested")
            mark = " *" if chosen else ""
            lines.append(f"{row['label'] + mark:<36} {row['total_ms']:>10.4f} {row['compute_ms']:>11.4f} "
                         f"{row['comm_ms']:>9.4f} {row['exposed_comm_ms']:>11.4f} {row['speedup']:>8.3f}  "
                         f"{row['reason']}")
        others = 0
        for p in report["pruned"]:
            if p["moe"]:
                lines.append(f"pruned {p['label']}: {p['reason']}")
            else:
                others += 1
        if others:
            lines.append(f"({others} plans of strategies that serve no MoE site left out; --json lists them)")
        lines.append(f"sequential: {report['sequential_ms']:.4f} ms   chosen: {report['chosen_label']} "
                     f"{report['chosen_ms']:.4f} ms ({report['sequential_ms'] / report['chosen_ms']:.3f}x)   "
                     f"* chosen (beats sequential by more than the margin)")
        lines.append("")
    return "\n".join(lines).rstrip()

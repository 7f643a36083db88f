"""``hocket predict halo``: a halo-exchange stencil site (``hocket.ops.stencil_steps``), every candidate plan.

  hocket predict halo --grid 4096x4096 --procs 2 --radius 2 --cluster cpu-host
  hocket predict halo --grid 256x256x256 --procs 2x2 --radius 4 --fields 1 --carried 2 --steps 8 --cluster h200x8

The compute of a step is estimated from the grid (``hocket.cost.halo.estimated_compute``: a star stencil
of order ``2 * radius``, eager slice arithmetic); a program's ``plan=None`` call times its own ``step_fn``.
"""

from __future__ import annotations

import argparse


def dims(text: str) -> tuple[int, ...]:
    """``"64x64x32"`` (or ``64,64,32``) as a tuple of positive ints."""
    try:
        values = tuple(int(v) for v in text.replace(",", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not dims like 256x256 (positive ints joined by x)") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every dim must be >= 1")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("halo sites (kind halo)")
    group.add_argument("--grid", type=dims, default=None, help="global grid, e.g. 1024x1024")
    group.add_argument("--procs", type=dims, default=None,
                       help="process grid: its dim d splits grid dim d, e.g. 2 or 2x2 (product = world)")
    group.add_argument("--radius", type=int, default=None, help="stencil radius (space order 2/4/8: 1/2/4)")
    group.add_argument("--boundary", default="fixed", choices=("fixed", "periodic"), help="default fixed")
    group.add_argument("--fields", type=int, default=1, help="fields exchanged per step (default 1)")
    group.add_argument("--carried", type=int, default=0,
                       help="fields carried or static, not exchanged (default 0)")
    group.add_argument("--steps", type=int, default=1, help="steps per call (default 1)")


def build(args) -> dict:
    """The --json object of ``hocket predict halo``."""
    from hocket.core.halo import HaloSite
    from hocket.core.plan import Plan
    from hocket.cost.calibration import calibration_view
    from hocket.hardware import load_cluster
    from hocket.plan.halo import search_halo
    from hocket.plan.labels import plan_label
    from hocket.strategies.halo import predict_halo

    missing = [flag for flag, value in (("--grid", args.grid), ("--procs", args.procs), ("--radius", args.radius))
               if value is None]
    if missing:
        raise ValueError(f"predict halo needs {', '.join(missing)}")
    site = HaloSite(grid=args.grid, procs=args.procs, radius=args.radius, dtype=args.dtype, boundary=args.boundary,
                    fields=args.fields, carried=args.carried, steps=args.steps)
    cluster = load_cluster(args.cluster)
    cluster.check_world(site.world, arg="--procs")
    profile = None
    if args.profile:
        from hocket.hardware.profile import load_profile

        profile = load_profile(args.profile, expected=None)
    view = calibration_view(profile)
    result = search_halo(site, cluster, profile=view)
    plans = [result.sequential] + [s.plan for s in result.ranked if s.plan != result.sequential]
    rows = []
    for plan in plans:
        pred = predict_halo(site, plan, cluster, view)
        rows.append({"plan": plan.to_dict(), "label": plan_label(plan), **pred.to_dict()})
    for row in rows:
        row["speedup"] = rows[0]["total_ms"] / row["total_ms"] if row["total_ms"] > 0 else 1.0
    best = min(rows, key=lambda r: r["total_ms"])
    out = {"site": site.to_dict(), "cluster": cluster.name, "profile": args.profile,
           "sequential_ms": rows[0]["total_ms"], "best_ms": best["total_ms"], "best_plan": best["plan"],
           "best_label": best["label"], "chosen_plan": result.chosen.to_dict(), "candidates": rows,
           "pruned": [{"plan": p.plan.to_dict(), "reason": p.reason} for p in result.pruned
                      if p.plan.strategy in ("overlap", "deep_halo")]}
    requested = getattr(args, "requested", None)
    if isinstance(requested, Plan):
        pred = predict_halo(site, requested, cluster, view)
        out["requested"] = {"plan": requested.to_dict(), "label": plan_label(requested), **pred.to_dict(),
                            "speedup": rows[0]["total_ms"] / pred.total_ms if pred.total_ms > 0 else 1.0}
    return out


def format_table(result: dict) -> str:
    site = result["site"]
    grid = "x".join(map(str, site["grid"]))
    procs = "x".join(map(str, site["procs"]))
    lines = [f"halo grid={grid} procs={procs} radius={site['radius']} {site['dtype']} {site['boundary']} "
             f"fields={site['fields']} carried={site['carried']} steps={site['steps']} on {result['cluster']}",
             f"{'plan':<32} {'total_ms':>10} {'compute_ms':>11} {'comm_ms':>9} {'exposed_ms':>11} {'speedup':>8}"]
    rows = list(result["candidates"])
    if "requested" in result:
        rows = [dict(result["requested"], label="requested: " + result["requested"]["label"])] + rows
    for row in rows:
        mark = " *" if row["plan"] == result["chosen_plan"] and not row["label"].startswith("requested") else ""
        lines.append(f"{row['label'] + mark:<32} {row['total_ms']:>10.4f} {row['compute_ms']:>11.4f} "
                     f"{row['comm_ms']:>9.4f} {row['exposed_comm_ms']:>11.4f} {row['speedup']:>8.3f}")
    for p in result["pruned"]:
        lines.append(f"pruned {p['plan']['strategy']}({p['plan'].get('chunks', 1)}): {p['reason']}")
    lines.append(f"sequential: {result['sequential_ms']:.4f} ms   best: {result['best_label']} "
                 f"{result['best_ms']:.4f} ms ({result['sequential_ms'] / result['best_ms']:.3f}x)   "
                 f"* chosen (beats sequential by more than the margin)")
    return "\n".join(lines)

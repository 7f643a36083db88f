"""Printing helpers for per-rank shard sizes (``--shards`` of ``hocket predict`` and ``hocket plan``) and the
hypothetical-transport what-if (``hocket simulate --what-if triggered``).

The sizing is :mod:`hocket.plan.shards`'s, the what-if :mod:`hocket.sim.what_if`'s; this module picks the
blocks of a model's step that share one split and turns results into table lines and JSON.

A model's tensor-parallel blocks (:func:`model_blocks`): the MLP (``mlp.up``'s columns are ``mlp.down``'s rows,
and their input gradients share them), in units of 64 columns of the FFN; the attention (``attn.qkv``'s
columns are ``attn.out``'s rows), in whole GQA groups (one KV head and its query heads: ``(q/kv + 2) x
head_size`` columns of ``attn.qkv``, ``q/kv x head_size`` rows of ``attn.out``). The attention core follows
the heads a rank holds; the sizing prices the GEMM sites only.
"""

from __future__ import annotations

from collections.abc import Mapping

SHARDS_HELP = ("also recommend per-rank shard sizes from the group's device speeds (hocket.plan.shards): the "
               "weight split that minimises the slowest rank's compute plus exposed communication")
WHAT_IF_HELP = ("price a HYPOTHETICAL transport on the step: 'triggered' (T3-style: the device issues a GEMM's "
                "reduce-scatter itself, no SM, no host work); the cluster must declare it (e.g. h200x8-triggered)")


def add_shards_argument(parser) -> None:
    parser.add_argument("--shards", action="store_true", help=SHARDS_HELP)


def add_what_if_argument(parser) -> None:
    from hocket.sim.what_if import WHAT_IFS

    parser.add_argument("--what-if", dest="what_if", choices=WHAT_IFS, default=None, help=WHAT_IF_HELP)


# -- one site (hocket predict) --------------------------------------------------------------------------------
def site_shards(site, cluster, profile=None, *, steady_state: bool = False) -> dict:
    """``hocket predict --shards``: the recommendation for one site as JSON-able data (``site.m`` rows of an
    ``ag_mm``/``mm_rs`` stay even: the split sized is the weight's)."""
    from hocket.plan.shards import recommend_shards

    rec = recommend_shards(site, cluster, profile, steady_state=steady_state)
    return {**rec.to_dict(), "lines": _lines(rec)}


def shards_text(section: Mapping) -> str:
    """The lines of a ``site_shards``/``model_shards`` section."""
    if "blocks" in section:
        out = [f"per-rank shard sizes on {section['cluster']} (tp {section['tp']}, hocket.plan.shards):"]
        for block in section["blocks"]:
            out += [f"[{block['block']}]"] + list(block["lines"])
        out += [f"note: {note}" for note in section.get("notes", ())]
        return "\n".join(out)
    return "\n".join(section["lines"])


def _lines(rec) -> list[str]:
    from hocket.plan.shards import shard_lines

    return shard_lines(rec)


# -- a model's step (hocket plan) -----------------------------------------------------------------------------
def model_blocks(model, *, tp: int, seq: int, batch: int = 1, dtype: str = "bfloat16", cluster=None,
                 stage: int = 0) -> dict[str, tuple[tuple, tuple[int, ...]]]:
    """``{"mlp": (sites, multiples), "attn": (sites, multiples)}`` of pipeline stage ``stage`` of one step
    (module docstring): forward sites and their input gradients, with each site's unit."""
    from hocket.models.catalog import load_model
    from hocket.models.step import model_step_sites
    from hocket.plan.shards import block_units

    spec = load_model(model)
    step = model_step_sites(spec, tp=tp, pp=1, dp=1, seq=seq, batch=batch, dtype=dtype,
                            cluster=None if cluster is None or cluster.world_size != tp else cluster)
    by_name = {}
    for node in step.stages[stage].nodes:
        op = node.op
        name = getattr(op, "name", "")
        if name and hasattr(op, "kind") and name not in by_name and getattr(op, "m", None):
            by_name[name] = op
    every = block_units(spec)
    blocks = {}
    for block in ("mlp", "attn"):
        units = every[block]
        sites = [by_name[n] for n in units if n in by_name]
        if sites:
            blocks[block] = (tuple(sites), tuple(units[s.name] for s in sites))
    return blocks


def model_shards(model, cluster, *, tp: int, seq: int, batch: int = 1, dtype: str = "bfloat16", profile=None,
                 first_rank: int = 0, steady_state: bool = False) -> dict:
    """``hocket plan --shards``: one recommendation per block of the TP group ``first_rank ..
    first_rank + tp - 1`` (the first pipeline stage's layer blocks), each over its forward and backward sites."""
    from dataclasses import replace

    from hocket.plan.shards import recommend_block_shards

    if first_rank < 0 or first_rank + tp > cluster.world_size:
        raise ValueError(f"the TP group {first_rank}..{first_rank + tp - 1} does not fit cluster {cluster.name!r} "
                         f"({cluster.world_size} ranks)")
    ranks = tuple(range(first_rank, first_rank + tp))
    out = {"cluster": cluster.name, "tp": tp, "ranks": list(ranks), "blocks": [],
           "notes": ["shards size the weight split (FFN columns, GQA groups of heads); activation rows stay even; "
                     "the attention core follows the heads a rank holds and is not in the prices"]}
    for name, (sites, multiples) in model_blocks(model, tp=tp, seq=seq, batch=batch, dtype=dtype,
                                                 cluster=cluster).items():
        sites = tuple(replace(s, ranks=ranks) for s in sites)
        rec = recommend_block_shards(sites, cluster, profile, multiple=multiples, steady_state=steady_state)
        out["blocks"].append({"block": name, **rec.to_dict(), "lines": _lines(rec)})
    return out


# -- the what-if (hocket simulate) ------------------------------------------------------------------------------
def what_if_text(section: Mapping) -> str:
    """The lines ``hocket simulate --what-if`` prints (every one marked hypothetical)."""
    ref = section["reference"]
    lines = [f"WHAT-IF, HYPOTHETICAL: {section['label']} on {section['cluster']} (no hardware runs it; "
             f"hocket.cost.triggered prices a lower bound, so the saving is an upper bound)",
             f"  step: {section['step_ms']:.3f} ms as planned -> {section['what_if_step_ms']:.3f} ms with triggered "
             f"(saves {section['saving_ms']:.3f} ms, {section['saving']:.1%})",
             f"  {ref['paper']}: {ref['sublayer_speedup_geomean']:.0%} geomean (up to "
             f"{ref['sublayer_speedup_max']:.0%}) faster communication-heavy sublayers",
             f"  {'site':<24} {'kind':<6} {'x/step':>6} {'plan':<28} {'planned_ms':>10} {'triggered_ms':>12}"]
    for row in section["sites"]:
        if row["triggered_ms"] is None:
            continue
        lines.append(f"  {row['name']:<24} {row['kind']:<6} {row['count']:>6} {row['plan']:<28} "
                     f"{row['planned_ms']:>10.4f} {row['triggered_ms']:>12.4f}")
    unserved = sorted({row["kind"] for row in section["sites"] if row["triggered_ms"] is None})
    if unserved:
        lines.append(f"  not served: {', '.join(unserved)} (a triggered transfer follows a producer GEMM's writes)")
    return "\n".join(lines)


def what_if_section(step, cluster, *, plan=None, profile=None, transport: str = "triggered",
                    baseline_ms: float | None = None) -> dict:
    """``hocket simulate --what-if``'s JSON section (:func:`hocket.sim.what_if.what_if_step`)."""
    from hocket.sim.what_if import what_if_step

    return what_if_step(step, cluster, plan=plan, profile=profile, transport=transport,
                        baseline_ms=baseline_ms).to_dict()

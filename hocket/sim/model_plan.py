"""Plan every site of a model's training step on a described cluster (``hocket plan``).

:func:`plan_model` returns plain, JSON-able data (the schema ``hocket simulate`` reads):

``model``, ``cluster``, ``parallel`` (tp, pp, dp, seq, batch, micro_batches), ``dtype``,
``margin``, ``sites`` (one entry per distinct site of each pipeline stage: ``name``,
``stage``, ``kind``, ``m``, ``k``, ``n``, ``num_b``, ``dtype``, ``world``, ``ranks``,
``direction``, ``count`` (occurrences per step on one rank of that stage), ``key``,
``plan``, ``plan_label``, ``predicted_ms`` {``sequential``, ``chosen``} per occurrence,
``saving_ms`` per occurrence, ``candidates`` priced, ``pruned`` count), ``moe_sites`` (an MoE model with
``ep > 1``: one entry per distinct expert-parallel site of each stage, :class:`hocket.core.moe.MoeSite`
planned by ``hocket.plan.moe.search_moe``: ``name``, ``stage``, ``kind``, ``tokens``, ``hidden``, ``ffn``,
``experts``, ``topk``, ``shared_ffn``, ``dtype``, ``world``, ``ranks``, ``direction``, ``count``, ``key``,
``skew``, and ``plan`` to ``pruned`` as for ``sites``), ``per_stage``
(per stage: ``layers``, ``per_layer_ms`` and ``sites_ms`` {sequential, chosen}: one
layer's sites for one micro-batch, and every site of the stage over the step, MoE sites included; in an
MoE model with dense layers ``per_layer_ms`` is the stage's first layer's), and
``predicted_step_ms`` {sequential, chosen}.

``predicted_step_ms`` {sequential, chosen} is a step time: every stage's sites plus its
non-communicating compute (attention cores, weight-gradient GEMMs, norms, embedding and
loss, priced like ``hocket simulate`` prices them: ``hocket.sim.pricing``) per
micro-batch, one after another on a rank, times the micro-batches, plus the 1F1B
pipeline fill and drain (``pp - 1`` micro-batch slots of the slowest stage):

    step = max over stages (micro_batches * per_mb[s] + once_per_step[s]) + (pp - 1) * max over stages per_mb[s]

Pipeline sends and the data-parallel gradient sync are left out (``hocket simulate``
schedules them); ``predicted_step_ms`` also carries ``sites_only`` (the former figure:
the busiest stage's site time per step), ``compute_ms`` and ``bubble_ms``. Each
``per_stage`` entry adds ``compute_ms`` {per_micro_batch, per_step} and ``step_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from hocket.core.moe import MoeSite
from hocket.core.site import Site
from hocket.plan.labels import plan_label
from hocket.plan.search import SearchConfig, SearchResult, search_sites
from hocket.plan.space import SpaceConfig

REPORT_VERSION = 2
"""2: predicted_step_ms is a step time (sites + compute + pipeline fill/drain); sites_only added."""


def _stage_sites(graph) -> list[tuple[int, Site, list[int | None]]]:
    """(stage, site with count summed over the stage, layers it occurs in) per distinct key per stage."""
    out: list[tuple[int, Site, list[int | None]]] = []
    for stage in graph.stages:
        merged: dict[str, tuple[Site, list[int | None]]] = {}
        for node in stage.nodes:
            if not isinstance(node.op, Site):
                continue
            site = node.op
            if site.key in merged:
                old, layers = merged[site.key]
                merged[site.key] = (Site.from_dict({**old.to_dict(), "count": old.count + site.count}), layers)
                layers.append(node.layer)
            else:
                merged[site.key] = (site, [node.layer])
        out.extend((stage.index, site, layers) for site, layers in merged.values())
    return out


def _stage_moe_sites(graph) -> list[tuple[int, MoeSite, list[int | None]]]:
    """(stage, MoE site with count summed over the stage, layers it occurs in) per distinct key per stage."""
    from dataclasses import replace

    out: list[tuple[int, MoeSite, list[int | None]]] = []
    for stage in graph.stages:
        merged: dict[str, tuple[MoeSite, list[int | None]]] = {}
        for node in stage.nodes:
            if not isinstance(node.op, MoeSite):
                continue
            site = node.op
            if site.key in merged:
                old, layers = merged[site.key]
                merged[site.key] = (replace(old, count=old.count + site.count), layers)
                layers.append(node.layer)
            else:
                merged[site.key] = (site, [node.layer])
        out.extend((stage.index, site, layers) for site, layers in merged.values())
    return out


def _moe_entry(stage: int, site: MoeSite, result: SearchResult) -> dict:
    return {
        "name": site.name, "stage": stage, "kind": site.kind, "tokens": site.tokens, "hidden": site.hidden,
        "ffn": site.ffn, "experts": site.experts, "topk": site.topk, "shared_ffn": site.shared_ffn,
        "dtype": site.dtype, "world": site.world, "ranks": list(site.group_ranks), "direction": site.direction,
        "count": site.count, "key": site.key, "skew": site.skew_class,
        "plan": result.chosen.to_dict(), "plan_label": plan_label(result.chosen),
        "predicted_ms": {"sequential": result.sequential_ms, "chosen": result.chosen_ms},
        "saving_ms": result.sequential_ms - result.chosen_ms, "candidates": len(result.ranked),
        "pruned": len(result.pruned),
    }


def search_moe_sites(sites, cluster, *, profile=None) -> dict[str, SearchResult]:
    """``hocket.plan.moe.search_moe`` of every distinct MoE site (by ``MoeSite.key``)."""
    from hocket.plan.moe import search_moe

    out: dict[str, SearchResult] = {}
    for site in sites:
        if site.key not in out:
            out[site.key] = search_moe(site, cluster, profile=profile)
    return out


def _site_entry(stage: int, site: Site, result: SearchResult) -> dict:
    return {
        "name": site.name, "stage": stage, "kind": site.kind, "m": site.m, "k": site.k, "n": site.n,
        "num_b": site.num_b, "dtype": site.dtype, "world": site.world, "ranks": list(site.group_ranks),
        "direction": site.direction, "count": site.count, "key": site.key,
        "plan": result.chosen.to_dict(), "plan_label": plan_label(result.chosen),
        "predicted_ms": {"sequential": result.sequential_ms, "chosen": result.chosen_ms},
        "saving_ms": result.saving_ms, "candidates": len(result.ranked), "pruned": len(result.pruned),
    }


def plan_model(model: object, cluster: object, *, tp: int, pp: int = 1, dp: int = 1, seq: int, batch: int = 1,
               micro_batches: int | None = None, dtype: str = "bfloat16", stages: object = None,
               profile: object = None, config: SearchConfig | None = None,
               space_config: SpaceConfig | None = None, cp: int = 1, recompute: str = "none",
               ep: int = 1, moe_zipf: float = 0.0) -> dict:
    """Plan every site of one training step (see the module docstring for the schema); ``cp``,
    ``recompute``, ``ep`` and ``moe_zipf`` as ``hocket.models.step.model_step_sites`` takes them (written to
    ``parallel`` when set)."""
    from hocket.models.step import model_step_sites

    config = config or SearchConfig()
    started = time.perf_counter()
    graph = model_step_sites(model, tp=tp, pp=pp, dp=dp, seq=seq, batch=batch, micro_batches=micro_batches,
                             cluster=cluster, dtype=dtype, stages=stages, cp=cp, recompute=recompute, ep=ep,
                             moe_zipf=moe_zipf)
    staged = _stage_sites(graph)
    results = search_sites((site for _, site, _ in staged), cluster, profile=profile, config=config,
                           space_config=space_config)
    entries = [_site_entry(stage, site, results[site.key]) for stage, site, _ in staged]
    moe_staged = _stage_moe_sites(graph)
    moe_results = search_moe_sites((site for _, site, _ in moe_staged), cluster, profile=profile)
    moe_entries = [_moe_entry(stage, site, moe_results[site.key]) for stage, site, _ in moe_staged]
    per_stage = []
    for stage in graph.stages:
        rows = [(e, layers) for e, (_, _, layers) in zip(entries, staged) if e["stage"] == stage.index]
        rows += [(e, layers) for e, (_, _, layers) in zip(moe_entries, moe_staged) if e["stage"] == stage.index]
        layer = stage.first_layer
        per_layer = {"sequential": 0.0, "chosen": 0.0}
        totals = {"sequential": 0.0, "chosen": 0.0}
        for entry, layers in rows:
            for which in totals:
                totals[which] += entry["count"] * entry["predicted_ms"][which]
                if layer in layers:
                    per_layer[which] += entry["predicted_ms"][which] * layers.count(layer)
        per_stage.append({"stage": stage.index, "layers": stage.layers, "first_layer": stage.first_layer,
                          "ranks": list(stage.ranks), "per_layer_ms": per_layer, "sites_ms": totals})
    _add_compute(graph, cluster, profile, per_stage)
    busiest = max(per_stage, key=lambda s: s["sites_ms"]["sequential"])
    step = step_totals(per_stage, micro_batches=graph.micro_batches, pp=len(graph.stages))
    return {
        "version": REPORT_VERSION,
        "model": getattr(graph.model, "name", str(model)),
        "cluster": getattr(cluster, "name", str(cluster)),
        "parallel": {"tp": tp, "pp": pp, "dp": dp, "seq": seq, "batch": batch,
                     "micro_batches": graph.micro_batches,
                     **({"cp": cp} if cp != 1 else {}), **({"recompute": recompute} if recompute != "none" else {}),
                     **({"ep": ep} if ep != 1 else {}), **({"moe_zipf": moe_zipf} if moe_zipf else {})},
        "dtype": graph.dtype,
        "margin": config.margin,
        "sites": entries,
        **({"moe_sites": moe_entries} if moe_entries else {}),
        "per_stage": per_stage,
        "predicted_step_ms": {
            **step,
            "sites_only": {"sequential": busiest["sites_ms"]["sequential"],
                           "chosen": max(s["sites_ms"]["chosen"] for s in per_stage),
                           "busiest_stage": busiest["stage"]},
            "scope": "sites + non-communicating compute of the busiest stage per step, plus the 1F1B "
                     "pipeline fill/drain; pipeline sends and DP gradient sync excluded (hocket simulate)"},
        "searches": len({id(r.ranked) for r in results.values()}) + len(moe_results),
        "notes": list(graph.notes),
        "planning_s": time.perf_counter() - started,
    }


def _add_compute(graph, cluster, profile, per_stage: list[dict]) -> None:
    """Add each stage's non-communicating compute (per micro-batch, per step) and step time."""
    from hocket.core.plan import Plan
    from hocket.models.graph import ComputeOp
    from hocket.sim.pricing import Pricer

    pricer = Pricer(cluster, profile=profile, choose_plan=lambda site: Plan())
    for stage, entry in zip(graph.stages, per_stage):
        devices = {cluster.device(rank) for rank in stage.ranks}

        def ms(nodes) -> float:
            ops = [node.op for node in nodes if isinstance(node.op, ComputeOp)]
            return max(sum(pricer.compute(op, device).ms for op in ops) for device in devices)

        per_mb, once = ms(stage.nodes), ms(stage.step_nodes)
        entry["compute_ms"] = {"per_micro_batch": per_mb, "per_step": per_mb * graph.micro_batches + once,
                               "once_per_step": once}
        entry["step_ms"] = {which: entry["sites_ms"][which] + entry["compute_ms"]["per_step"]
                            for which in ("sequential", "chosen")}


def step_totals(per_stage: list[dict], *, micro_batches: int, pp: int) -> dict:
    """``{sequential, chosen, compute_ms, bubble_ms, busiest_stage}`` of one 1F1B step (module doc)."""
    out: dict = {}
    for which in ("sequential", "chosen"):
        slot = max(s["sites_ms"][which] / micro_batches + s["compute_ms"]["per_micro_batch"] for s in per_stage)
        busiest = max(per_stage, key=lambda s: s["step_ms"][which])
        out[which] = busiest["step_ms"][which] + (pp - 1) * slot
        if which == "chosen":
            out["bubble_ms"] = (pp - 1) * slot
            out["compute_ms"] = busiest["compute_ms"]["per_step"]
            out["busiest_stage"] = busiest["stage"]
    return out


def summary_rows(report: Mapping) -> list[dict]:
    """Table rows: sites identical except for their stage are merged (``stages`` lists them)."""
    merged: dict[tuple, dict] = {}
    for entry in report["sites"]:
        key = (entry["name"], entry["kind"], entry["m"], entry["k"], entry["n"], entry["num_b"],
               entry["plan_label"], round(entry["predicted_ms"]["sequential"], 9),
               round(entry["predicted_ms"]["chosen"], 9))
        row = merged.get(key)
        if row is None:
            merged[key] = {**entry, "stages": [entry["stage"]]}
        else:
            row["stages"].append(entry["stage"])
    return list(merged.values())

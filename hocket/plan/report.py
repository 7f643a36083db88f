"""Plan every site of a model's training step on a described cluster (``hocket plan``).

:func:`plan_model` returns plain, JSON-able data (the schema ``hocket simulate`` reads):

``model``, ``cluster``, ``parallel`` (tp, pp, dp, seq, batch, micro_batches), ``dtype``,
``margin``, ``sites`` (one entry per distinct site of each pipeline stage: ``name``,
``stage``, ``kind``, ``m``, ``k``, ``n``, ``num_b``, ``dtype``, ``world``, ``ranks``,
``direction``, ``count`` (occurrences per step on one rank of that stage), ``key``,
``plan``, ``plan_label``, ``predicted_ms`` {``sequential``, ``chosen``} per occurrence,
``saving_ms`` per occurrence, ``candidates`` priced, ``pruned`` count), ``per_stage``
(per stage: ``layers``, ``per_layer_ms`` and ``sites_ms`` {sequential, chosen}: one
layer's sites for one micro-batch, and every site of the stage over the step), and
``predicted_step_ms`` {sequential, chosen}.

``predicted_step_ms`` counts communicating matmul sites only: it is the busiest
stage's total site time per step (one rank of a pipeline stage runs its sites one
after another). Non-communicating compute, pipeline bubbles and data-parallel
gradient traffic are ``hocket simulate``'s job.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from hocket.plan.search import SearchConfig, SearchResult, search_sites
from hocket.plan.space import SpaceConfig
from hocket.site import Site

REPORT_VERSION = 1


def plan_label(plan) -> str:
    """``Plan.describe()`` plus the fields it leaves out (hierarchy, SM budget)."""
    label = plan.describe()
    if plan.hierarchy:
        label += f"/{plan.hierarchy}"
    if plan.comm_sms is not None:
        label += f"/sms={plan.comm_sms}"
    return label


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
               space_config: SpaceConfig | None = None) -> dict:
    """Plan every site of one training step (see the module docstring for the schema)."""
    from hocket.models.step import model_step_sites

    config = config or SearchConfig()
    started = time.perf_counter()
    graph = model_step_sites(model, tp=tp, pp=pp, dp=dp, seq=seq, batch=batch, micro_batches=micro_batches,
                             cluster=cluster, dtype=dtype, stages=stages)
    staged = _stage_sites(graph)
    results = search_sites((site for _, site, _ in staged), cluster, profile=profile, config=config,
                           space_config=space_config)
    entries = [_site_entry(stage, site, results[site.key]) for stage, site, _ in staged]
    per_stage = []
    for stage in graph.stages:
        rows = [(e, layers) for e, (_, _, layers) in zip(entries, staged) if e["stage"] == stage.index]
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
    busiest = max(per_stage, key=lambda s: s["sites_ms"]["sequential"])
    return {
        "version": REPORT_VERSION,
        "model": getattr(graph.model, "name", str(model)),
        "cluster": getattr(cluster, "name", str(cluster)),
        "parallel": {"tp": tp, "pp": pp, "dp": dp, "seq": seq, "batch": batch,
                     "micro_batches": graph.micro_batches},
        "dtype": graph.dtype,
        "margin": config.margin,
        "sites": entries,
        "per_stage": per_stage,
        "predicted_step_ms": {"sequential": busiest["sites_ms"]["sequential"],
                              "chosen": max(s["sites_ms"]["chosen"] for s in per_stage),
                              "busiest_stage": busiest["stage"],
                              "scope": "communicating matmul sites of the busiest pipeline stage, per step"},
        "searches": len({id(r.ranked) for r in results.values()}),
        "notes": list(graph.notes),
        "planning_s": time.perf_counter() - started,
    }


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

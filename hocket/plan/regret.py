"""Planner regret: how much slower the planner's choice ran than the best measured plan.

Input: results lines (``hocket.bench.record.BenchRecord``) grouped by site and machine (:func:`machine_key`), and
with ``run_of`` by run as well (the lines of one run share their sequential baseline, so a
group never mixes a plan timed on one lease or day with its rivals timed on another).
For each group, among the plans that were measured (sequential always is):

* **prediction alone**: the plan :func:`hocket.plan.search.select` picks from their
  predicted times (autotune off), with the model-error allowance ``uncertainty``
  (:mod:`hocket.plan.uncertainty`; None = the plain margin);
* **autotuned**: sequential plus the list autotune times
  (:func:`hocket.plan.search.tuning_shortlist` of the predicted ranking, as
  :meth:`SearchResult.tuning_shortlist` and ``hocket.plan.autotune.plans_to_time`` build
  it: the best predicted, it with half and a quarter of the pieces, the best of each other
  family), decided by their *measured* times with the same margin rule. Only measured
  plans can be timed here, so the list is drawn from the ranking of the measured plans
  (a twin that was not measured is skipped, as the space would skip an unpriced one);

regret = measured time of the choice / best measured time (1.0 is perfect), and
``vs_sequential`` = measured time of the choice / measured sequential (> 1 + noise means
the planner lost to doing nothing). Noise is the sequential plan's p90/p10 spread.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.plan.labels import plan_label
from hocket.plan.search import DEFAULT_MARGIN, CostFn, drop_unmodelled_splits, select, tuning_shortlist
from hocket.plan.uncertainty import Uncertainty


@dataclass(frozen=True, kw_only=True)
class RegretRow:
    """One measured site on one machine."""

    site: Site
    hardware_hash: str
    """the machine's key (:func:`machine_key`)."""
    measured: int
    """plans measured (and priced)."""
    best_plan: Plan
    best_ms: float
    sequential_ms: float
    noise: float
    """relative spread of sequential's samples: (p90 - p10) / median."""
    predicted_plan: Plan
    predicted_regret: float
    predicted_vs_sequential: float
    tuned_plan: Plan
    tuned_regret: float
    tuned_vs_sequential: float
    unpriced: tuple[str, ...] = ()
    """measured plans the cost model could not price (with why), left out."""
    run: str = ""
    """the run the group's lines came from (``run_of``'s label; empty when runs were not told apart)."""

    def to_dict(self) -> dict:
        return {"site": self.site.to_dict(), "hardware": self.hardware_hash, "run": self.run, "measured": self.measured,
                "best_plan": self.best_plan.to_dict(), "best_ms": self.best_ms, "sequential_ms": self.sequential_ms,
                "noise": self.noise, "predicted_plan": self.predicted_plan.to_dict(),
                "predicted_regret": self.predicted_regret, "predicted_vs_sequential": self.predicted_vs_sequential,
                "tuned_plan": self.tuned_plan.to_dict(), "tuned_regret": self.tuned_regret,
                "tuned_vs_sequential": self.tuned_vs_sequential, "unpriced": list(self.unpriced)}


PROCESS_ENV = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")
"""Environment a fingerprint records that places a process on the machine without changing the machine
or its links (left out of :func:`machine_key`; ``NCCL_P2P_DISABLE`` and the like stay in: they change the link)."""


def machine_key(record) -> str:
    """The machine a results line ran on: its hardware fingerprint (devices, nodes, topology and links, driver,
    CUDA, NCCL and torch versions, the link-changing environment) without the parts that name hocket's
    version or the process rather than the machine: the transports each island offers (the list grows
    with hocket: adding ``peer_read`` gave the same 2xH200 and 1xH200 machines a new fingerprint
    ``hash``) and ``PROCESS_ENV``. Lines without a fingerprint dict fall back to its ``hash``."""
    hardware = record.hardware if isinstance(record.hardware, dict) else {}
    if "topology" not in hardware:
        return str(hardware.get("hash", "unknown"))
    machine = {k: v for k, v in hardware.items() if k not in ("hash", "env")}
    machine["env"] = {k: v for k, v in (hardware.get("env") or {}).items() if k not in PROCESS_ENV}
    machine["topology"] = [
        {**node, "islands": [{k: v for k, v in island.items() if k != "transports"}
                             for island in node.get("islands", [])]} if isinstance(node, dict) else node
        for node in hardware["topology"]]
    text = json.dumps(machine, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


RunOf = Callable[[object], str]
"""A results line -> the label of the run it belongs to."""


def group_records(records: Iterable, run_of: RunOf | None = None) -> dict[tuple[str, str, str], list]:
    """(site key, hardware hash, run) -> that site's records on that machine in that run (the latest
    line per plan wins). Without ``run_of`` every run of a machine is one group (run ``""``)."""
    groups: dict[tuple[str, str, str], dict[Plan, object]] = {}
    for record in records:
        run = run_of(record) if run_of is not None else ""
        groups.setdefault((record.site.key, machine_key(record), run), {})[record.plan] = record
    return {key: list(by_plan.values()) for key, by_plan in groups.items()}


def _baseline_record(records: list):
    """The measured sequential plan (over ``collective`` when measured, else another transport)."""
    plain = [r for r in records if r.plan.strategy == "sequential" and r.plan.hierarchy is None]
    return min(plain, key=lambda r: r.plan.transport != "collective", default=None)


def site_regret(records: list, cost_fn: CostFn, *, top_k: int = 4, margin: float = DEFAULT_MARGIN,
                uncertainty: Uncertainty | None = None) -> RegretRow | None:
    """The regret row of one site's records, or None without a measured sequential plan."""
    site = records[0].site
    sequential = _baseline_record(records)
    if sequential is None:
        return None
    measured = {r.plan: r.timing.median_ms for r in records}
    predicted: list[tuple[Plan, float]] = []
    unpriced: list[str] = []
    for plan in measured:
        try:
            predicted.append((plan, cost_fn(site, plan)))
        except ValueError as exc:
            unpriced.append(f"{plan.describe()}: {exc}")
    if not any(plan == sequential.plan for plan, _ in predicted):
        return None
    # as in search: uneven pieces the model prices like even ones are not the planner's to pick
    predicted, dropped = drop_unmodelled_splits(predicted, [])
    unpriced.extend(f"{plan_label(d.plan)}: {d.reason}" for d in dropped)
    baseline = sequential.plan
    pred_plan, _, ranked = select(predicted, baseline=baseline, margin=margin, uncertainty=uncertainty)
    shortlist = [baseline, *tuning_shortlist([s.plan for s in ranked], baseline=baseline, k=top_k)]
    tuned_plan, _, _ = select([(p, max(measured[p], 1e-9)) for p in shortlist], baseline=baseline, margin=margin)
    priced = {p for p, _ in predicted}
    best_plan = min(priced, key=lambda p: measured[p])
    best_ms = measured[best_plan]
    seq_ms = measured[baseline]
    timing = sequential.timing
    return RegretRow(
        site=site, hardware_hash=machine_key(sequential), measured=len(priced), best_plan=best_plan,
        best_ms=best_ms, sequential_ms=seq_ms,
        noise=(timing.p90_ms - timing.p10_ms) / timing.median_ms if timing.median_ms > 0 else 0.0,
        predicted_plan=pred_plan, predicted_regret=measured[pred_plan] / best_ms,
        predicted_vs_sequential=measured[pred_plan] / seq_ms,
        tuned_plan=tuned_plan, tuned_regret=measured[tuned_plan] / best_ms,
        tuned_vs_sequential=measured[tuned_plan] / seq_ms, unpriced=tuple(unpriced))


def planner_regret(records: Iterable, cost_for: Callable[[object], CostFn | None], *, top_k: int = 4,
                   margin: float = DEFAULT_MARGIN,
                   uncertainty_for: Callable[[object], Uncertainty | None] | None = None,
                   run_of: RunOf | None = None) -> tuple[list[RegretRow], list[str]]:
    """Regret rows for every measured site, and notes on groups that were skipped.

    ``cost_for(record)`` returns the CostFn for the machine a record was measured on
    (None: no cluster description for it, the group is skipped with a note);
    ``uncertainty_for(record)`` the model-error allowance of prediction alone on that machine
    (None, or no function: the plain margin); ``run_of(record)`` the run a record belongs to, so
    that each run of a site is scored on its own (None: the runs of one machine are pooled).
    """
    rows: list[RegretRow] = []
    notes: list[str] = []
    for (key, hardware, run), group in group_records(records, run_of).items():
        cost_fn = cost_for(group[0])
        if cost_fn is None:
            notes.append(f"{key} on hardware {hardware}: no cluster description matches its fingerprint; skipped")
            continue
        uncertainty = uncertainty_for(group[0]) if uncertainty_for is not None else None
        row = site_regret(group, cost_fn, top_k=top_k, margin=margin, uncertainty=uncertainty)
        if row is None:
            why = ("no measured sequential plan" if _baseline_record(group) is None
                   else f"the cost model cannot price its sequential plan (kind {group[0].site.kind})")
            notes.append(f"{key} on hardware {hardware}: {why}; skipped")
        else:
            rows.append(dataclasses.replace(row, run=run) if run else row)
    return rows, notes

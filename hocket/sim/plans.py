"""Which plan each site runs in a simulated step: a fixed plan, or a planner's JSON.

The planner writes (``hocket plan --json``, ``hocket.sim.model_plan.plan_model``)::

    {"model": "llama3-405b", "cluster": "h100-16k",
     "parallel": {"tp": 8, "pp": 16, "dp": 128, "seq": 8192, "batch": 1, "micro_batches": 16},
     "sites": [{"name", "kind", "m", "k", "n", "dtype", "world", "plan", "predicted_ms", "key"?, ...}, ...],
     "per_stage": [{"stage": 0, "layers": 8, ...}, ...]?,
     "predicted_step_ms": 123.4 or {"chosen": ..., "sequential": ...}}

A site of the step takes the plan of the entry with its ``key`` (``Site.key``: shape,
dtype, group ranks, direction); failing that, of the entry with its shape (kind, m, k, n,
num_b, dtype, world); failing that, of the entry with its name; failing that, the
default plan. ``per_stage`` layer counts, when present, fix the pipeline partition.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hocket.core.plan import Plan
from hocket.core.site import canonical_dtype

SITE_ENTRY_FIELDS = ("kind", "m", "k", "n", "plan")


@dataclass(frozen=True, kw_only=True)
class PlanFile:
    """A planner's output, read and validated."""

    model: str | None
    cluster: str | None
    parallel: Mapping[str, object]
    by_shape: Mapping[tuple, Plan]
    by_name: Mapping[str, Plan]
    by_key: Mapping[str, Plan] = field(default_factory=dict)
    stage_layers: tuple[int, ...] | None = None
    predicted_step_ms: float | None = None
    source: str = ""
    sites: int = field(default=0)


def _shape_key(kind: str, m: int, k: int, n: int, num_b: int, dtype: str, world: int) -> tuple:
    return (kind, int(m), int(k), int(n), int(num_b), canonical_dtype(dtype), int(world))


def parse_plan_file(data: object, *, source: str = "<dict>") -> PlanFile:
    """Validate a planner JSON object (see the module docstring)."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: the plan file must hold a JSON object with 'sites', got {type(data).__name__}")
    sites = data.get("sites")
    if not isinstance(sites, list):
        raise ValueError(f"{source}: 'sites' must be a list of {{name, kind, m, k, n, dtype, world, plan}} objects")
    by_shape: dict[tuple, Plan] = {}
    by_name: dict[str, Plan] = {}
    by_key: dict[str, Plan] = {}
    for i, entry in enumerate(sites):
        if not isinstance(entry, dict):
            raise ValueError(f"{source}: sites[{i}] must be an object, got {type(entry).__name__}")
        missing = [f for f in SITE_ENTRY_FIELDS if f not in entry]
        if missing:
            raise ValueError(f"{source}: sites[{i}] lacks {missing}; each site needs {SITE_ENTRY_FIELDS}")
        try:
            plan = Plan.from_dict(entry["plan"]) if isinstance(entry["plan"], dict) else Plan.from_json(entry["plan"])
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: sites[{i}].plan is not a valid plan ({exc})") from None
        by_shape.setdefault(_shape_key(entry["kind"], entry["m"], entry["k"], entry["n"], entry.get("num_b", 1),
                                       entry.get("dtype", "bfloat16"), entry.get("world", 1)), plan)
        if entry.get("name"):
            by_name.setdefault(str(entry["name"]), plan)
        if entry.get("key"):
            by_key[str(entry["key"])] = plan
    parallel = data.get("parallel") or {}
    if not isinstance(parallel, dict):
        raise ValueError(f"{source}: 'parallel' must be an object like {{\"tp\": 8, \"pp\": 16, \"dp\": 128}}")
    step_ms = data.get("predicted_step_ms")
    if isinstance(step_ms, dict):
        step_ms = step_ms.get("chosen")
    stage_layers = None
    per_stage = data.get("per_stage")
    if isinstance(per_stage, list) and per_stage and all(isinstance(x, dict) and "layers" in x for x in per_stage):
        ordered = sorted(per_stage, key=lambda x: x.get("stage", 0))
        stage_layers = tuple(int(x["layers"]) for x in ordered)
    return PlanFile(model=data.get("model"), cluster=data.get("cluster"), parallel=dict(parallel),
                    by_shape=by_shape, by_name=by_name, by_key=by_key, stage_layers=stage_layers,
                    predicted_step_ms=float(step_ms) if isinstance(step_ms, (int, float)) else None,
                    source=source, sites=len(sites))


def load_plan_file(path: str | Path) -> PlanFile:
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"plan file {str(p)!r} does not exist; write one with `hocket plan --json`") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"plan file {str(p)!r} is not valid JSON ({exc})") from None
    return parse_plan_file(data, source=str(p))


class PlanBook:
    """``site -> Plan`` from a PlanFile with a default for sites it does not list."""

    def __init__(self, plan_file: PlanFile, *, default: Plan | None = None) -> None:
        self.plan_file = plan_file
        self.default = default or Plan()
        self.misses: set[str] = set()

    def __call__(self, site) -> Plan:
        plan = self.plan_file.by_key.get(site.key)
        if plan is None:
            plan = self.plan_file.by_shape.get(_shape_key(site.kind, site.m, site.k, site.n, site.num_b, site.dtype,
                                                          site.world))
        if plan is None:
            plan = self.plan_file.by_name.get(site.name)
        if plan is None:
            self.misses.add(site.name or site.kind)
            plan = self.default
        return plan

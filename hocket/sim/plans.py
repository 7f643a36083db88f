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

Expert-parallel MoE sites (``hocket.core.moe.MoeSite``) are listed under ``moe_sites`` (each with ``kind``
``a2a_mm``/``mm_a2a``, ``key``, ``name`` and ``plan``); an MoE site of the step takes the plan of the entry
with its ``key``, failing that of the entry with its name, failing that the default plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hocket.core.files import load_json_file
from hocket.core.plan import Plan
from hocket.core.site import SITE_KINDS, canonical_dtype

SITE_ENTRY_FIELDS = ("kind", "m", "k", "n", "plan")
PLAN_FILE_FIELDS = ("model", "cluster", "parallel", "sites", "moe_sites", "per_stage", "predicted_step_ms")
"""the top-level fields of a planner's JSON (a JSON object with any of them is a plan file, not one Plan)."""


def _entry_int(entry: dict, name: str, where: str, default: int | None = None) -> int:
    value = entry.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where}.{name}={value!r} must be a positive int (per-rank shapes in m k n order, as "
                         f"`hocket plan --json` writes them)")
    return value


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
    moe_by_key: Mapping[str, Plan] = field(default_factory=dict)
    moe_by_name: Mapping[str, Plan] = field(default_factory=dict)


def _shape_key(kind: str, m: int, k: int, n: int, num_b: int, dtype: str, world: int) -> tuple:
    return (kind, int(m), int(k), int(n), int(num_b), canonical_dtype(dtype), int(world))


def parse_plan_file(data: object, *, source: str = "<dict>") -> PlanFile:
    """Validate a planner JSON object (see the module docstring)."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: the plan file must hold a JSON object with 'sites', got {type(data).__name__}")
    sites = data.get("sites")
    if not isinstance(sites, list):
        got = "is missing" if "sites" not in data else f"is a {type(sites).__name__}"
        raise ValueError(f"{source}: 'sites' {got}; a plan file holds a list of {{name, kind, m, k, n, dtype, "
                         f"world, plan}} objects under 'sites' (write one with `hocket plan --json`)")
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
        where = f"{source}: sites[{i}]"
        if entry["kind"] not in SITE_KINDS:
            raise ValueError(f"{where}.kind={entry['kind']!r} is unknown; use one of {SITE_KINDS}")
        m, k, n = (_entry_int(entry, name, where) for name in ("m", "k", "n"))
        num_b, world = _entry_int(entry, "num_b", where, 1), _entry_int(entry, "world", where, 1)
        try:
            dtype = canonical_dtype(entry.get("dtype", "bfloat16"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}.dtype: {exc}") from None
        by_shape.setdefault(_shape_key(entry["kind"], m, k, n, num_b, dtype, world), plan)
        if entry.get("name"):
            by_name.setdefault(str(entry["name"]), plan)
        if entry.get("key"):
            by_key[str(entry["key"])] = plan
    moe_by_key, moe_by_name = _moe_entries(data.get("moe_sites"), source)
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
                    source=source, sites=len(sites), moe_by_key=moe_by_key, moe_by_name=moe_by_name)


def _moe_entries(entries: object, source: str) -> tuple[dict[str, Plan], dict[str, Plan]]:
    """The plans of a plan file's ``moe_sites`` by key and by name."""
    from hocket.core.moe import MOE_KINDS

    by_key: dict[str, Plan] = {}
    by_name: dict[str, Plan] = {}
    if entries is None:
        return by_key, by_name
    if not isinstance(entries, list):
        raise ValueError(f"{source}: 'moe_sites' must be a list of {{name, kind, key, plan}} objects, got "
                         f"{type(entries).__name__}")
    for i, entry in enumerate(entries):
        where = f"{source}: moe_sites[{i}]"
        if not isinstance(entry, dict) or "plan" not in entry or entry.get("kind") not in MOE_KINDS:
            raise ValueError(f"{where} must be an object with 'plan' and 'kind' in {MOE_KINDS} (as `hocket plan "
                             f"--ep N --json` writes it)")
        try:
            plan = Plan.from_dict(entry["plan"]) if isinstance(entry["plan"], dict) else Plan.from_json(entry["plan"])
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}.plan is not a valid plan ({exc})") from None
        if entry.get("key"):
            by_key[str(entry["key"])] = plan
        if entry.get("name"):
            by_name.setdefault(str(entry["name"]), plan)
    return by_key, by_name


def load_plan_file(path: str | Path) -> PlanFile:
    """A planner's JSON file, read bounded (:func:`hocket.core.files.read_bounded`) and validated."""
    p = Path(path).expanduser()
    return parse_plan_file(load_json_file(p, what="plan file (write one with `hocket plan --json`)"), source=str(p))


def is_plan_file(data: object) -> bool:
    """Whether ``data`` (parsed JSON) is meant as a planner's file rather than one Plan: an object with one of
    :data:`PLAN_FILE_FIELDS`."""
    return isinstance(data, dict) and any(name in data for name in PLAN_FILE_FIELDS)


class PlanBook:
    """``site -> Plan`` from a PlanFile with a default for sites it does not list."""

    def __init__(self, plan_file: PlanFile, *, default: Plan | None = None) -> None:
        self.plan_file = plan_file
        self.default = default or Plan()
        self.misses: set[str] = set()

    def __call__(self, site) -> Plan:
        from hocket.core.moe import MoeSite

        if isinstance(site, MoeSite):
            plan = self.plan_file.moe_by_key.get(site.key) or self.plan_file.moe_by_name.get(site.name)
            if plan is None:
                self.misses.add(site.name or site.kind)
                plan = self.default
            return plan
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

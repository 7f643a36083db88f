"""Which Plan an operator call runs.

:func:`choose_plan` asks the planner (:func:`hocket.ops.live.plan_for_call`: bucketed
shapes, predicted and optionally autotuned, never a plan not predicted or measured to beat
``sequential``) once per ``site.key`` and caches the answer, so the hot path is one dict
lookup. A plan crosses the custom-op schema as JSON text; both directions of that
conversion are cached too (a call with a fixed plan costs two dict lookups, not a JSON
round trip and a dataclass walk).

The operators call :func:`choose_plan` on every rank after the agreement step has
checked that all ranks run the same Site, then run rank 0's choice everywhere
(:func:`hocket.ops.agreement.settle_plan`), so no two ranks run different plans.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache

from hocket.core.plan import SEQUENTIAL, Plan, as_plan
from hocket.core.site import Site
from hocket.env import disabled
from hocket.hardware.spec import HYPOTHETICAL_TRANSPORTS
from hocket.ops.executors import OP_NAMES, supported

__all__ = ["OP_NAMES", "captured_planning", "check_supported", "choose_plan", "clear_plan_cache", "default_plan",
           "explicit_plan", "parse_plan", "plan_text", "planning_captured", "resolve_plan", "set_call_planner",
           "supported"]


_CHOSEN: dict[str, Plan] = {}


def default_plan(site: Site) -> Plan:
    """The plan used when nothing better is known (see module docstring)."""
    return SEQUENTIAL


_CHOSEN_CAPTURED: dict[str, Plan] = {}
"""the same for calls planned for CUDA graph replays (:func:`captured_planning`)"""
_CAPTURED_PLANNING: contextvars.ContextVar[bool] = contextvars.ContextVar("hocket_captured_planning", default=False)


@contextmanager
def captured_planning() -> Iterator[None]:
    """Within this block, ``plan=None`` calls are planned for CUDA graph replays (``hocket.ops.CapturedCall``
    enters it around its warm-up and capture): priced with no host issue cost but the replay's
    (``SearchConfig(captured=True)``), by prediction (or timed as replays under ``HOCKET_AUTOTUNE=1``), cached
    apart from eager calls' plans."""
    token = _CAPTURED_PLANNING.set(True)
    try:
        yield
    finally:
        _CAPTURED_PLANNING.reset(token)


def planning_captured() -> bool:
    """Whether ``plan=None`` calls are planned for CUDA graph replays here (:func:`captured_planning`)."""
    return _CAPTURED_PLANNING.get()


_CHOSEN_GRAPHED: dict[tuple[str, str], Plan] = {}
"""the same for eager calls hocket may replay from its own CUDA graphs: (mode, site key) -> plan"""


_CALL_PLANNER: list[Callable[..., Plan]] = []
"""the process planner's ``plan_for_call`` (:func:`hocket.ops.live.plan_for_call` installs itself on import:
the process planner: bucketed, cached, never slower)."""


def set_call_planner(fn: Callable[..., Plan]) -> None:
    """Make ``fn(site, *, captured=False, eager_graphs="off") -> Plan`` what :func:`choose_plan` asks."""
    _CALL_PLANNER[:] = [fn]


def _plan_for_call(site: Site, **options) -> Plan:
    if not _CALL_PLANNER:
        raise RuntimeError("no call planner is installed: import hocket.ops (which imports hocket.ops.live)")
    return _CALL_PLANNER[0](site, **options)


def choose_plan(site: Site, *, eager_graphs: str = "off") -> Plan:
    """The plan for ``site``; cached per ``site.key`` (apart for calls planned for CUDA graphs, and for
    eager calls under ``eager_graphs`` ``auto`` / ``on``: :mod:`hocket.ops.eager_graph`)."""
    captured = _CAPTURED_PLANNING.get()
    if not captured and eager_graphs != "off":
        plan = _CHOSEN_GRAPHED.get((eager_graphs, site.key))
        if plan is None:
            plan = _CHOSEN_GRAPHED[(eager_graphs, site.key)] = _plan_for_call(site, eager_graphs=eager_graphs)
        return plan
    chosen = _CHOSEN_CAPTURED if captured else _CHOSEN
    plan = chosen.get(site.key)
    if plan is None:
        plan = _plan_for_call(site, captured=True) if captured else _plan_for_call(site)
        chosen[site.key] = plan
    return plan


def clear_plan_cache() -> None:
    _CHOSEN.clear()
    _CHOSEN_CAPTURED.clear()
    _CHOSEN_GRAPHED.clear()


def plan_text(plan: object) -> str:
    """The ``plan`` argument as the string the custom-op schemas carry ("" = choose for me)."""
    if plan is None:
        return ""
    if isinstance(plan, Plan):
        return _plan_json(plan)
    if isinstance(plan, dict):
        return json.dumps(plan, sort_keys=True)
    if isinstance(plan, str):
        return plan
    raise TypeError(f"plan={plan!r} must be a hocket.Plan, a dict, a JSON string, a strategy name or None")


def check_supported(kind: str, plan: Plan) -> Plan:
    """``plan``, after checking an executor of its strategy is registered for ``kind``
    (:func:`hocket.ops.executors.supported`)."""
    if plan.transport in HYPOTHETICAL_TRANSPORTS:
        raise ValueError(f"plan.transport={plan.transport!r} is hypothetical (priced for what-ifs by "
                         f"hocket.cost.triggered): no hardware runs it; use a real transport")
    strategies = supported(kind)
    if plan.strategy not in strategies:
        raise ValueError(
            f"plan strategy {plan.strategy!r} is not available for {OP_NAMES[kind]} ({kind}); "
            f"it supports {strategies}"
        )
    return plan


def explicit_plan(text: str, site: Site) -> Plan | None:
    """The plan the caller fixed (``HOCKET_DISABLE`` fixes ``sequential``), checked; None = choose one."""
    if disabled():
        return SEQUENTIAL
    if text == "":
        return None
    return check_supported(site.kind, parse_plan(text))


PLAN_TEXT_CACHE = 4096
"""distinct plans (and plan strings) whose conversions are kept: a model has a few dozen sites."""


@lru_cache(maxsize=PLAN_TEXT_CACHE)
def _plan_json(plan: Plan) -> str:
    return plan.to_json()


@lru_cache(maxsize=PLAN_TEXT_CACHE)
def parse_plan(text: str) -> Plan:
    """``as_plan(text)``, cached (Plans are frozen, so one object serves every call); bad text raises
    every time (exceptions are not cached)."""
    return as_plan(text)


def resolve_plan(text: str, site: Site) -> Plan:
    """Parse the schema's plan string, apply ``HOCKET_DISABLE``, choose when empty, check support."""
    plan = explicit_plan(text, site)
    return plan if plan is not None else check_supported(site.kind, choose_plan(site))

"""From one operator call to (group, Site, Plan, context): checks, planning and agreement, cached.

The first call with a given signature (operator, group, shapes, dtypes, devices, dim,
plan text, flags, direction, ``HOCKET_DISABLE``) runs the local input checks, builds
the Site, resolves the Plan and runs the cross-rank agreement; later calls with the
same signature are one dict lookup.

The hot path (a cache hit) is kept to a few microseconds: the key is built from
``torch.Size``/dtype/device objects as they are, and the two flags it depends on
(``HOCKET_DISABLE``, ``HOCKET_AGREEMENT``) are read raw on every call with their parsed
meaning memoised (see :func:`_env_flags`), so a change of either variable at runtime
still takes effect on the next call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import os

import torch
from torch.profiler import record_function

from hocket.env import agreement_every_call, disabled
from hocket.ops.agreement import Descriptor, agree, settle_plan
from hocket.ops.context import context_for
from hocket.ops.lowering import executor_for
from hocket.ops.lowering.runtime import Runtime
from hocket.ops.planning import OP_NAMES, check_supported, choose_plan, explicit_plan, planning_captured
from hocket.plan.capture import capture_refusal
from hocket.plan.plan import CAPTURABLE_TRANSPORTS, Plan
from hocket.site import Site
from hocket.transport.group import GroupHandle, process_group_of, resolve_group
from hocket.transport.registry import get_transport


@dataclass(frozen=True, kw_only=True)
class Prepared:
    group: GroupHandle
    site: Site
    plan: Plan
    dim: int
    runtime: Runtime
    run: Callable
    """the strategy's executor for this operator."""
    label: str
    """the ``record_function`` range name: ``hocket::<op>[<plan>]``."""
    capture_check: bool = False
    """whether a call must first check whether it is being captured in a CUDA graph (a GPU call whose
    transport is not in ``CAPTURABLE_TRANSPORTS``)."""
    capture_refusal: str | None = None
    """why a CUDA graph cannot capture this call (:func:`hocket.plan.capture.capture_refusal`), or None."""


_PREPARED: dict[tuple, Prepared] = {}


def clear_prepared_cache() -> None:
    _PREPARED.clear()


_ENV_PARSED: dict[tuple, tuple[bool, bool]] = {}


def _raw_env() -> tuple:
    """The raw values of ``HOCKET_DISABLE`` and ``HOCKET_AGREEMENT`` now."""
    return os.environ.get("HOCKET_DISABLE"), os.environ.get("HOCKET_AGREEMENT")


def _env_flags() -> tuple[bool, bool]:
    """``(disabled(), agreement_every_call())`` for the environment as it is now.

    The raw values are the memo key and :mod:`hocket.env` parses them, so its meaning of
    each flag is the only one and a runtime change of either variable takes effect at once.
    """
    raw = _raw_env()
    parsed = _ENV_PARSED.get(raw)
    if parsed is None:
        parsed = _ENV_PARSED[raw] = (disabled(), agreement_every_call())
    return parsed


def run_prepared(prep: Prepared, *args):
    """``prep.run(*args)``, inside a ``record_function(prep.label)`` range only while a profiler records
    (entering a range costs ~15 us even when nobody listens)."""
    if prep.capture_check and torch.cuda.is_current_stream_capturing():
        if prep.capture_refusal:
            raise ValueError(f"{prep.label}: this plan cannot be captured in a CUDA graph: {prep.capture_refusal}. "
                             f"Capture a plan over one of {CAPTURABLE_TRANSPORTS}, or leave plan=None inside "
                             f"hocket.ops.CapturedCall")
        if not planning_captured():
            raise ValueError(f"{prep.label}: a copy-engine call is captured only through hocket.ops.CapturedCall "
                             f"(its calls then use slots of their own and end on a barrier); a bare "
                             f"torch.cuda.graph would bake one slot parity of the eager protocol into every replay")
    if torch.autograd._profiler_enabled():
        with record_function(prep.label):
            return prep.run(*args)
    return prep.run(*args)


def prepare(kind: str, *, group_name: str, tensors: Sequence[torch.Tensor], dim_arg: int, plan_text: str,
            flags: dict, direction: str, check: Callable[[int], int],
            site_of: Callable[[GroupHandle, int], Site]) -> Prepared:
    """Checks + Site + Plan + agreement for one call (cached by the call's signature).

    ``check(world)`` runs the local checks and returns the normalised dim;
    ``site_of(group, dim)`` builds the Site.
    """
    pg = process_group_of(group_name)
    is_disabled, every_call = _env_flags()
    key = (kind, group_name, id(pg), *[(t.shape, t.dtype, t.device) for t in tensors], dim_arg, plan_text,
           *flags.items(), direction, is_disabled, not plan_text and planning_captured())
    hit = _PREPARED.get(key)
    if hit is not None and hit.group.pg is pg and not every_call:
        return hit
    group = resolve_group(pg)
    op = OP_NAMES[kind]
    device = tensors[0].device if tensors and isinstance(tensors[0], torch.Tensor) else torch.device("cpu")
    site = plan = None
    dim = 0
    local_error: ValueError | TypeError | None = None
    try:
        dim = check(group.world)
        site = site_of(group, dim)
        plan = explicit_plan(plan_text, site)
    except (ValueError, TypeError) as exc:
        local_error = exc
    descriptor = Descriptor(
        op=op, site=site.to_dict() if site else {}, plan=plan.to_dict() if plan else {"choose": True},
        flags={**flags, "direction": direction, "disabled": disabled()},
        error=f"{type(local_error).__name__}: {local_error}" if local_error else "")
    agree(group, descriptor, device=device, local_error=local_error)
    if plan is None:
        plan = settle_plan(group, op, lambda: check_supported(kind, choose_plan(site)), device=device)
    transport = get_transport(plan.transport, group, comm_sms=plan.comm_sms)
    run = executor_for(kind, plan.strategy)
    runtime = Runtime(group=group, ctx=context_for(group.name, device, tensors[0].dtype), transport=transport)
    prepared = Prepared(group=group, site=site, plan=plan, dim=dim, runtime=runtime, run=run,
                        label=f"hocket::{op}[{plan.describe()}]",
                        capture_check=device.type == "cuda" and plan.transport not in CAPTURABLE_TRANSPORTS,
                        capture_refusal=capture_refusal(site, plan) if site is not None else None)
    _PREPARED[key] = prepared
    return prepared

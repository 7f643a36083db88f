"""Which Plan an offload operator call runs (``hocket.ops.matmul_from_host`` / ``matmul_to_host``).

A given plan is checked (strategy, transport); ``plan=None`` asks :func:`planned`: the cost model's
choice among ``hocket.plan.offload``'s candidates for the call's shape bucket, cut for the call's
``m`` and cached (the hot path is one dict lookup).
"""

from __future__ import annotations

import warnings

import torch

from hocket.core.plan import Plan, as_plan
from hocket.kernels.schedule import cdiv
from hocket.strategies import strategies_for

OFFLOAD_STRATEGIES = strategies_for("h2d_mm")
"""the strategies whose specs serve the offload operators (``hocket.strategies``)."""
DEFAULT_CHUNKS = 8
CHUNK_ALIGN_ROWS = 128
"""chunked pieces start on multiples of this many rows (whole GEMM tiles)."""


_PLANNED: dict[tuple, Plan] = {}
"""(kind, bucketed m, k, n, dtype) -> the plan ``plan=None`` chose for that bucket (:func:`planned`)."""
_FITTED: dict[tuple, Plan] = {}
"""(kind, m, k, n, dtype) -> that plan cut for ``m`` (the hot path: one dict lookup)."""


def fallback_plan(m: int) -> Plan:
    """What ``plan=None`` runs when the planner cannot price the call: ``chunked`` in up to
    ``DEFAULT_CHUNKS`` even pieces."""
    return Plan(strategy="chunked", chunks=max(1, min(DEFAULT_CHUNKS, cdiv(m, CHUNK_ALIGN_ROWS))),
                transport="host_staged")


def planned(kind: str, m: int, k: int, n: int, dtype: torch.dtype) -> Plan:
    """The plan of a ``plan=None`` call: ``hocket.plan.offload.choose_offload_plan`` on this process's
    cluster and profile (``hocket.ops.live.process_planner``) for the call's shape with ``m`` rounded up
    to its bucket (``hocket.plan.bucket.bucket_m``: a new sequence length in the same bucket reuses the
    decision), cut for ``m`` (``fit_offload_plan``); then a dict lookup. Sequential under
    ``HOCKET_DISABLE=1``; :func:`fallback_plan` with a warning if pricing fails."""
    from hocket.env import disabled

    if disabled():
        return Plan(strategy="sequential", transport="host_staged")
    key = (kind, m, k, n, dtype)
    if key in _FITTED:
        return _FITTED[key]
    from hocket.core.site import Site
    from hocket.plan.bucket import bucket_m
    from hocket.plan.offload import fit_offload_plan

    name = str(dtype).replace("torch.", "")
    bucket = (kind, bucket_m(m), k, n, dtype)
    if bucket not in _PLANNED:
        from hocket.ops.live import process_planner
        from hocket.plan.offload import choose_offload_plan

        site = Site(kind=kind, m=bucket[1], k=k, n=n, dtype=name, world=1)
        try:
            planner = process_planner()
            _PLANNED[bucket] = choose_offload_plan(site, planner.cluster, planner.profile)[0]
        except Exception as err:  # a cluster description that does not fit this machine, a foreign profile
            warnings.warn(f"hocket: could not plan {kind} {m}x{k}x{n} ({err}); running {fallback_plan(m).describe()}",
                          RuntimeWarning, stacklevel=3)
            _PLANNED[bucket] = fallback_plan(bucket[1])
    _FITTED[key] = fit_offload_plan(_PLANNED[bucket], Site(kind=kind, m=m, k=k, n=n, dtype=name, world=1))
    return _FITTED[key]


def _resolve_plan(plan, m: int, *, site: tuple | None = None) -> Plan:
    """``plan`` as a Plan, checked; None: :func:`planned` for ``site`` = (kind, m, k, n, dtype), or
    :func:`fallback_plan` without one."""
    resolved = as_plan(plan)
    if resolved is None:
        resolved = planned(*site) if site is not None else fallback_plan(m)
    if resolved.strategy not in OFFLOAD_STRATEGIES:
        raise ValueError(f"plan.strategy={resolved.strategy!r} is not an offload strategy; use one of "
                         f"{OFFLOAD_STRATEGIES}")
    if resolved.transport not in ("host_staged", "collective"):
        raise ValueError(f"plan.transport={resolved.transport!r}: offload ops always move data host_staged; "
                         f"use transport='host_staged'")
    return resolved

"""Shape bucketing: nearby shapes share one planning decision.

A new sequence length (or batch size) changes a Site's ``m``. Planning, and above all
autotuning, must not run again on the hot path for every such ``m``; instead ``m`` is
rounded *up* to a bucket and the decision made for the bucket is reused. Only ``m`` is
bucketed: ``k`` and ``n`` come from weights and do not change between calls.

The decision made for the bucket is then fitted to the real shape by
:func:`fit_plan` (a plan never asks for more pieces than the real shape has rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hocket.core.plan import Plan
from hocket.core.site import Site

BUCKET_MODES = ("multiple", "pow2", "exact")


@dataclass(frozen=True, kw_only=True)
class BucketPolicy:
    """How ``m`` is rounded up.

    * ``pow2``: the next ``world x 2**j``;
    * ``multiple``: the smaller of that and the next multiple of ``lcm(multiple, world)``
      (so powers of two for small ``m``, steps of ``multiple`` rows for large ``m``);
    * ``exact``: no bucketing beyond rounding up to a multiple of ``world``.

    Every mode rounds up, is idempotent and monotone, and returns a multiple of the
    group's world size, so a bucketed ``ag_mm``/``mm_rs`` site still shards evenly.
    """

    mode: str = "multiple"
    multiple: int = 256

    def __post_init__(self) -> None:
        if self.mode not in BUCKET_MODES:
            raise ValueError(f"BucketPolicy.mode={self.mode!r} is unknown; use one of {BUCKET_MODES}")
        if not isinstance(self.multiple, int) or isinstance(self.multiple, bool) or self.multiple < 1:
            raise ValueError(f"BucketPolicy.multiple={self.multiple!r} must be an int >= 1 (e.g. 256)")


DEFAULT_BUCKET_POLICY = BucketPolicy()


def _next_pow2(value: int) -> int:
    return 1 << (value - 1).bit_length()


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def bucket_m(m: int, world: int = 1, policy: BucketPolicy = DEFAULT_BUCKET_POLICY) -> int:
    """Round ``m`` up to its bucket (never down, always a multiple of ``world``)."""
    if not isinstance(m, int) or isinstance(m, bool) or m < 1:
        raise ValueError(f"m={m!r} must be a positive int (rows of the per-rank problem)")
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise ValueError(f"world={world!r} must be a positive int (the group size)")
    pow2 = world * _next_pow2(-(-m // world))  # world x a power of two
    if policy.mode == "exact":
        return _round_up(m, world)
    if policy.mode == "pow2":
        return pow2
    return min(pow2, _round_up(m, math.lcm(policy.multiple, world)))


def bucket_site(site: Site, policy: BucketPolicy = DEFAULT_BUCKET_POLICY) -> Site:
    """The Site whose decision ``site`` reuses (same everything, ``m`` rounded up); an uneven site
    (``Site.shard_rows``, whose sizes add up to its ``m``) is its own bucket."""
    if site.shard_rows:
        return site
    bucketed = bucket_m(site.m, site.world, policy)
    return site if bucketed == site.m else replace(site, m=bucketed)


def fit_plan(plan: Plan, site: Site) -> Plan:
    """Adapt a plan chosen for a bucket to the real ``site``.

    ``chunks`` is capped so every piece keeps at least one row of the dimension the
    strategy splits (see :func:`hocket.plan.space.split_rows`). ``split_sizes`` (uneven
    pieces of those rows, :mod:`hocket.core.pieces`) are rescaled to the real rows keeping
    their proportions, never leaving a piece empty (pieces are merged when rows are too few).
    """
    from hocket.plan.space import split_rows

    rows = split_rows(site, plan.strategy)
    changes: dict = {}
    if plan.chunks > rows:
        changes["chunks"] = max(1, rows)
    if plan.split_sizes is not None:
        total = sum(plan.split_sizes)
        if total != rows and total > 0:
            sizes = tuple(s for s in _rescale(plan.split_sizes, rows) if s > 0)
            changes["split_sizes"] = sizes
            changes["chunks"] = len(sizes)
    return plan.with_(**changes) if changes else plan


def _rescale(sizes: tuple[int, ...], total: int) -> tuple[int, ...]:
    """Integer sizes summing to ``total`` in the proportions of ``sizes`` (largest remainder)."""
    weight = sum(sizes)
    exact = [s * total / weight for s in sizes]
    out = [int(e) for e in exact]
    order = sorted(range(len(sizes)), key=lambda i: exact[i] - out[i], reverse=True)
    for i in order[: total - sum(out)]:
        out[i] += 1
    return tuple(out)

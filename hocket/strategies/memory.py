"""Sizes the strategies' memory estimates share (plain Python; :mod:`hocket.plan.memory` sums them up)."""

from __future__ import annotations

from hocket.core.plan import Plan
from hocket.core.site import Site

SIGNAL_BYTES = 4
"""One flag per (peer, piece) in a signal pad."""


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def gathered_bytes(site: Site) -> int:
    """ag_mm's gathered ``A``."""
    return site.m * site.k * site.itemsize


def product_bytes(site: Site) -> int:
    """mm_rs/mm_ar's full partial product."""
    return site.m * site.n * site.num_b * site.itemsize


def full_bytes(site: Site) -> int:
    """The buffer the site's collective moves: the gathered ``A`` (ag_mm) or the product (the others)."""
    return gathered_bytes(site) if site.kind == "ag_mm" else product_bytes(site)


def row_bytes(site: Site) -> int:
    """Bytes of one row of the operand a pipeline's pieces cut: ``A``'s (ag_mm) or the product's."""
    return site.k * site.itemsize if site.kind == "ag_mm" else site.n * site.num_b * site.itemsize


def symmetric_bytes(site: Site, plan: Plan) -> int:
    """The default symmetric memory: over ``copy_engine``, the collective's buffer and a flag per
    (rank, piece); nothing otherwise."""
    if plan.transport != "copy_engine":
        return 0
    return signalled_bytes(site, plan)


def signalled_bytes(site: Site, plan: Plan) -> int:
    """The collective's buffer in symmetric memory and a flag per (rank, piece)."""
    return full_bytes(site) + site.world * max(plan.chunks, 1) * SIGNAL_BYTES

"""Random per-rank operands for a Site, in docs/operators.md's shape convention.

* ``ag_mm``: ``A_shard [m/w, k]`` and ``num_b`` matrices ``B [k, n]``;
* ``mm_rs`` / ``mm_ar``: ``A [m, k]`` and ``B [k, n]`` (``k`` local).

Inputs are fresh normal draws (never zeros), scaled by ``1/sqrt(k)`` so outputs stay
O(1) in every dtype, from ``hocket.launch.same_case.rank_generator(seed, rank)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from hocket.core.site import Site
from hocket.launch.same_case import rank_generator


@dataclass(frozen=True, kw_only=True)
class Operands:
    """One rank's inputs for a site."""

    a: torch.Tensor
    """``A_shard`` for ag_mm, ``A`` otherwise."""
    bs: tuple[torch.Tensor, ...]


def torch_dtype(site: Site) -> torch.dtype:
    return getattr(torch, site.dtype)


def check_divisible(site: Site) -> None:
    """ag_mm gathers and mm_rs scatters ``m`` rows across ``world`` ranks: they must divide."""
    if site.kind in ("ag_mm", "mm_rs") and site.m % site.world:
        raise ValueError(
            f"{site.kind} needs m divisible by world: m={site.m}, world={site.world}; "
            f"use m={site.m - site.m % site.world or site.world} (m is the full row count, see docs/operators.md)"
        )
    if site.kind not in ("ag_mm", "mm_rs", "mm_ar"):
        raise ValueError(f"site kind {site.kind!r} is not benchmarked yet; use ag_mm, mm_rs or mm_ar")


def make_operands(site: Site, *, rank: int, device: torch.device | str = "cpu", seed: int = 0) -> Operands:
    """Draw one rank's operands for ``site``."""
    check_divisible(site)
    dtype = torch_dtype(site)
    generator = rank_generator(seed, rank=rank)
    rows = site.m // site.world if site.kind == "ag_mm" else site.m
    scale = 1.0 / math.sqrt(site.k)

    def draw(*shape: int, factor: float = 1.0) -> torch.Tensor:
        values = torch.randn(*shape, generator=generator, dtype=torch.float32) * factor
        return values.to(device=device, dtype=dtype)

    a = draw(rows, site.k)
    bs = tuple(draw(site.k, site.n, factor=scale) for _ in range(site.num_b))
    return Operands(a=a, bs=bs)

"""The per-configuration cost table of the parallel search (:class:`Table`), shared by its estimators."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True)
class Table:
    """One (device, tp, cp, micro-batch, recompute, ep) cost table: ms per micro-batch on one rank; ``layer_*`` of
    an MoE layer (a dense model's layer), ``dense_*`` of a dense layer (an MoE model's first layers)."""

    layer_f: float
    layer_b: float
    dense_f: float
    dense_b: float
    dense_exposed: float
    embed_f: float
    embed_b: float
    head_f: float
    head_b: float
    layer_exposed: float
    """exposed communication ms of one layer, forward + backward."""
    edge_exposed: float
    act_bytes: int
    """pipeline activation bytes one rank sends per micro-batch."""

"""What the MoE part of the graph pass did, for ``hocket.explain``: one record per expert-parallel MoE layer.

A layer is two sites of one routing (:class:`hocket.core.moe.MoeSite`): ``a2a_mm`` (dispatch + the gate/up
grouped GEMM) and ``mm_a2a`` (the down grouped GEMM + combine). The record keeps both, the plan, and what
became of the layer (rewritten into ``hocket.ops.moe_experts``'s traced ops, or left as traced and why).
"""

from __future__ import annotations

from dataclasses import dataclass

from hocket.core.moe import MoeSite
from hocket.core.plan import Plan


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.3f}"


@dataclass(frozen=True, kw_only=True)
class MoeSiteRecord:
    """One MoE layer found in a graph (module docstring)."""

    graph: str
    site: MoeSite
    """the ``a2a_mm`` site (tokens, hidden, ffn, experts, topk, world, dtype; uniform routing at compile time)."""
    plan: Plan
    source: str
    """``predicted``, ``plan_for`` or ``disabled``."""
    rewritten: bool
    reason: str = ""
    """why the layer was left as traced (empty when rewritten)."""
    nodes: tuple[str, ...] = ()
    """the dispatch and combine all-to-all nodes, as named in the graph."""
    predicted_sequential_ms: float | None = None
    predicted_ms: float | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.site, MoeSite):
            raise TypeError(f"MoeSiteRecord.site={self.site!r} must be a hocket.core.moe.MoeSite")
        if not self.rewritten and not self.reason.strip():
            raise ValueError(f"MoeSiteRecord for {self.site.key} in {self.graph}: a layer left as traced needs its "
                             "reason (explain reports why every pattern was left alone)")

    @property
    def kind(self) -> str:
        return "moe"

    @property
    def sites(self) -> tuple[MoeSite, MoeSite]:
        """(``a2a_mm``, ``mm_a2a``) of the layer."""
        return self.site, self.site.pair()

    @property
    def predicted_saving_ms(self) -> float | None:
        if self.predicted_sequential_ms is None or self.predicted_ms is None:
            return None
        return self.predicted_sequential_ms - self.predicted_ms

    def shape(self) -> str:
        s = self.site
        return f"t{s.tokens} h{s.hidden} f{s.ffn} e{s.experts} k{s.topk}"

    def format_row(self) -> str:
        status = "rewritten into hocket.ops.moe_experts" if self.rewritten else f"left alone: {self.reason}"
        if self.note:
            status += f"; {self.note}"
        return (f"  {self.graph:<12} {'a2a_mm+mm_a2a':<14} {self.shape():<24} {self.site.dtype:<9} "
                f"{self.site.world:>2} {self.plan.describe():<24} {self.source:<10} "
                f"{_ms(self.predicted_sequential_ms):>9} {_ms(self.predicted_ms):>9}  {status}")

    def to_dict(self) -> dict:
        return {"graph": self.graph, "kind": self.kind, "sites": [s.to_dict() for s in self.sites],
                "plan": self.plan.to_dict(), "source": self.source, "rewritten": self.rewritten,
                "reason": self.reason, "nodes": list(self.nodes),
                "predicted_sequential_ms": self.predicted_sequential_ms, "predicted_ms": self.predicted_ms,
                "note": self.note}

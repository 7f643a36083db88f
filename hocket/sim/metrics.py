"""What a timeline says per owner: busy time per resource, utilisation, exposed communication.

*Exposed communication* of an owner is the time during which at least one of its transfer
resources (anything but ``compute``) runs while its compute resource is idle: the part of
communication that no computation hides. *Idle* is time with nothing running at all
(pipeline bubbles, waiting for a slower participant).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hocket.sim.engine import Timeline


@dataclass(frozen=True, kw_only=True)
class OwnerSummary:
    owner: str
    span_ms: float
    """the whole timeline's makespan (the denominator of the utilisations)."""
    busy_ms: Mapping[str, float]
    """per resource kind of this owner."""
    compute_ms: float
    exposed_comm_ms: float
    idle_ms: float

    def utilisation(self) -> dict[str, float]:
        if self.span_ms <= 0:
            return {kind: 0.0 for kind in self.busy_ms}
        return {kind: ms / self.span_ms for kind, ms in self.busy_ms.items()}


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in spans)


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of union ``a`` not covered by union ``b`` (both sorted, disjoint)."""
    total, j = 0.0, 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                total += b[k][0] - cur
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            total += e - cur
    return total


def owner_summaries(timeline: Timeline) -> list[OwnerSummary]:
    """One summary per owner, in owner order."""
    g = timeline.graph
    n_owners = len(g.owner_names)
    busy: list[dict[str, float]] = [{} for _ in range(n_owners)]
    compute: list[list[tuple[float, float]]] = [[] for _ in range(n_owners)]
    transfer: list[list[tuple[float, float]]] = [[] for _ in range(n_owners)]
    for t, res in enumerate(g.resources):
        s, e = timeline.start_ms[t], timeline.end_ms[t]
        for r in res:
            o, kind = g.resource_owner[r], g.resource_kind[r]
            busy[o][kind] = busy[o].get(kind, 0.0) + (e - s)
            (compute if kind == "compute" else transfer)[o].append((s, e))
    span = timeline.makespan_ms
    out = []
    for o, name in enumerate(g.owner_names):
        comp, xfer = _union(compute[o]), _union(transfer[o])
        exposed = _minus(xfer, comp)
        idle = max(0.0, span - _length(comp) - exposed)
        out.append(OwnerSummary(owner=name, span_ms=span, busy_ms=dict(sorted(busy[o].items())),
                                compute_ms=_length(comp), exposed_comm_ms=exposed, idle_ms=idle))
    return out


def weighted_utilisation(summaries: list[OwnerSummary], weights: Mapping[str, int]) -> dict[str, float]:
    """Utilisation per resource kind over all ranks (each owner weighted by the ranks it stands for)."""
    total = sum(weights.get(s.owner, 1) for s in summaries)
    out: dict[str, float] = {}
    for s in summaries:
        w = weights.get(s.owner, 1)
        for kind, u in s.utilisation().items():
            out[kind] = out.get(kind, 0.0) + u * w
    return {kind: value / total for kind, value in sorted(out.items())} if total else {}

"""What the graph pass did, for ``hocket.explain``: sites, patterns left alone, reordered gaps.

Records are frozen dataclasses; one :class:`CompileLog` belongs to one compiled model
and collects a :class:`GraphReport` per graph the pass ran on (forward and backward of
every graph torch.compile produced, recompiles included).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hocket.core.plan import Plan
from hocket.core.site import Site


@dataclass(frozen=True, kw_only=True)
class SiteRecord:
    """A communication+compute pair found in a graph and what became of it."""

    graph: str
    site: Site
    plan: Plan
    source: str
    """where the plan came from: ``predicted``, ``cache``, ``autotune``, ``plan_for``, ``disabled``."""
    rewritten: bool
    predicted_sequential_ms: float | None
    predicted_ms: float | None
    reason: str = ""
    """why it was left as it is (empty when rewritten)."""
    nodes: tuple[str, ...] = ()
    """the collective's node, then the matmul nodes, as named in the graph."""
    note: str = ""

    def __post_init__(self) -> None:
        if not self.rewritten and not self.reason.strip():
            raise ValueError(f"SiteRecord for {self.site.key} in {self.graph}: a site left as traced needs its reason "
                             "(explain reports why every pattern was left alone)")

    @property
    def kind(self) -> str:
        return self.site.kind

    @property
    def predicted_saving_ms(self) -> float | None:
        if self.predicted_sequential_ms is None or self.predicted_ms is None:
            return None
        return self.predicted_sequential_ms - self.predicted_ms

    def to_dict(self) -> dict:
        return {"graph": self.graph, "site": self.site.to_dict(), "plan": self.plan.to_dict(), "source": self.source,
                "rewritten": self.rewritten, "predicted_sequential_ms": self.predicted_sequential_ms,
                "predicted_ms": self.predicted_ms, "predicted_saving_ms": self.predicted_saving_ms,
                "reason": self.reason, "nodes": list(self.nodes), "note": self.note}


@dataclass(frozen=True, kw_only=True)
class LeftAlone:
    """A collective that forms no site, with the reason."""

    graph: str
    collective: str
    node: str
    reason: str

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise ValueError(f"LeftAlone for {self.collective} node {self.node!r} in {self.graph}: reason="
                             f"{self.reason!r} must say why the collective was left alone")

    def to_dict(self) -> dict:
        return {"graph": self.graph, "collective": self.collective, "node": self.node, "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class GapRecord:
    """Independent compute moved between a collective's start and its wait."""

    graph: str
    collective: str
    node: str
    moved_before: int
    """nodes moved from before the start into the gap."""
    moved_after: int
    """nodes moved from after the wait into the gap."""
    matmuls_in_gap: int
    gap_compute_ms: float | None
    """estimated compute now between start and wait."""
    comm_ms: float | None
    """estimated time of the collective alone."""

    def to_dict(self) -> dict:
        return {"graph": self.graph, "collective": self.collective, "node": self.node,
                "moved_before": self.moved_before, "moved_after": self.moved_after,
                "matmuls_in_gap": self.matmuls_in_gap, "gap_compute_ms": self.gap_compute_ms,
                "comm_ms": self.comm_ms}


@dataclass(frozen=True, kw_only=True)
class GraphReport:
    graph: str
    """``forward#0``, ``backward#0``, ...: direction and the compile's graph counter."""
    direction: str
    sites: tuple[SiteRecord, ...] = ()
    left_alone: tuple[LeftAlone, ...] = ()
    gaps: tuple[GapRecord, ...] = ()
    note: str = ""

    def to_dict(self) -> dict:
        return {"graph": self.graph, "direction": self.direction, "note": self.note,
                "sites": [s.to_dict() for s in self.sites], "left_alone": [x.to_dict() for x in self.left_alone],
                "gaps": [g.to_dict() for g in self.gaps]}


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.3f}"


def _named(collective: str, node: str) -> str:
    return collective if node == collective else f"{collective} ({node})"


def _shape(site: Site) -> str:
    return f"{site.m}x{site.k}x{site.n}" + (f" x{site.num_b}" if site.num_b > 1 else "")


@dataclass(frozen=True, kw_only=True)
class Explanation:
    """``hocket.explain(compiled)``: every graph the pass has seen so far."""

    graphs: tuple[GraphReport, ...] = ()

    @property
    def sites(self) -> tuple[SiteRecord, ...]:
        return tuple(s for g in self.graphs for s in g.sites)

    @property
    def rewritten(self) -> tuple[SiteRecord, ...]:
        return tuple(s for s in self.sites if s.rewritten)

    @property
    def left_alone(self) -> tuple[LeftAlone, ...]:
        return tuple(x for g in self.graphs for x in g.left_alone)

    @property
    def gaps(self) -> tuple[GapRecord, ...]:
        return tuple(x for g in self.graphs for x in g.gaps)

    @property
    def predicted_saving_ms(self) -> float:
        return sum(s.predicted_saving_ms or 0.0 for s in self.rewritten)

    def to_dict(self) -> dict:
        return {"graphs": [g.to_dict() for g in self.graphs]}

    def format(self) -> str:
        if not self.graphs:
            return "hocket.explain: nothing compiled yet (torch.compile compiles on the first call; run the model once)"
        lines = [f"hocket.compile: {len(self.graphs)} graph(s), {len(self.sites)} site(s), "
                 f"{len(self.rewritten)} rewritten, predicted saving {self.predicted_saving_ms:.3f} ms per step"]
        if self.sites:
            lines.append(f"  {'graph':<12} {'kind':<6} {'m x k x n':<18} {'dtype':<9} {'w':>2} {'plan':<24} "
                         f"{'from':<10} {'seq_ms':>9} {'plan_ms':>9} {'saving_ms':>9}  status")
            for s in self.sites:
                status = "rewritten" if s.rewritten else f"left alone: {s.reason}"
                lines.append(f"  {s.graph:<12} {s.kind:<6} {_shape(s.site):<18} {s.site.dtype:<9} {s.site.world:>2} "
                             f"{s.plan.describe():<24} {s.source:<10} {_ms(s.predicted_sequential_ms):>9} "
                             f"{_ms(s.predicted_ms):>9} "
                             f"{_ms(s.predicted_saving_ms):>9}  {status}")
        for x in self.left_alone:
            lines.append(f"  {x.graph:<12} {_named(x.collective, x.node)} left alone: {x.reason}")
        for g in self.gaps:
            moved = g.moved_before + g.moved_after
            lines.append(f"  {g.graph:<12} {_named(g.collective, g.node)}: {moved} node(s) moved into its gap "
                         f"({g.matmuls_in_gap} matmul(s), ~{_ms(g.gap_compute_ms)} ms compute vs "
                         f"~{_ms(g.comm_ms)} ms comm)")
        for g in self.graphs:
            if g.note:
                lines.append(f"  {g.graph:<12} {g.note}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


@dataclass(kw_only=True)
class CompileLog:
    """The reports of one compiled model (appended to as torch.compile compiles its graphs)."""

    reports: list[GraphReport] = field(default_factory=list)
    counter: dict[str, int] = field(default_factory=dict)

    def next_name(self, direction: str) -> str:
        index = self.counter.get(direction, 0)
        self.counter[direction] = index + 1
        return f"{direction}#{index}"

    def add(self, report: GraphReport) -> None:
        self.reports.append(report)

    def explanation(self) -> Explanation:
        return Explanation(graphs=tuple(self.reports))

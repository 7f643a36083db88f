"""What the graph pass did, for ``hocket.explain``: sites, patterns left alone, reordered gaps.

Records are frozen dataclasses; one :class:`CompileLog` belongs to one compiled model
and collects a :class:`GraphReport` per graph the pass ran on (forward and backward of
every graph torch.compile produced, recompiles included).

Candidates priced alike are one row, here and in ``hocket predict``: :func:`priced_alike`
is the rule (every price within relative :data:`ALIKE_REL_TOL`), :func:`variant_name` the
name a variant takes on its group's row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.plan.labels import plan_label

ALIKE_REL_TOL = 1e-9
"""relative tolerance under which two predicted prices (ms) count as one price"""


def _same_price(a: float | None, b: float | None, rel_tol: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0)


def priced_alike(prices: Sequence[Sequence[float | None]], *, rel_tol: float = ALIKE_REL_TOL) -> list[int]:
    """For each entry of ``prices``, the index of the first entry of its group.

    Each entry is one candidate's tuple of prices (say total, compute, comm, exposed ms).
    Two candidates are priced alike when their tuples have one length and every field
    agrees: both None, or both floats with ``math.isclose(a, b, rel_tol=rel_tol, abs_tol=0)``.
    Entries are taken in order; each joins the first group whose first entry it is priced
    alike with, else starts a group of its own (index = itself). Members are compared with
    the group's first entry only, so a group never drifts beyond ``rel_tol`` of it.
    """
    if not rel_tol >= 0.0:
        raise ValueError(f"rel_tol={rel_tol!r} must be >= 0")
    heads: list[int] = []
    groups: list[int] = []
    for index, price in enumerate(prices):
        price = tuple(price)
        for head in heads:
            first = tuple(prices[head])
            if len(first) == len(price) and all(_same_price(a, b, rel_tol) for a, b in zip(first, price)):
                groups.append(head)
                break
        else:
            heads.append(index)
            groups.append(index)
    return groups


def variant_name(head_label: str, label: str) -> str:
    """``label`` as named on the row of ``head_label``: what it adds to the head's label when it
    is the head's label with plan suffixes (``/...``, ``[...]``, ``~...``, ``:...``) put in at one place,
    else ``label`` whole.

    ``variant_name("ring(1)/p2p", "ring(1)/p2p[reverse]/sms=16") == "[reverse]/sms=16"``;
    ``variant_name("chunked(2)~fill", "chunked(2)/sms=16~fill") == "/sms=16"``.
    """
    extra = len(label) - len(head_label)
    if extra > 0:
        for cut in range(len(head_label), -1, -1):  # the longest common start first
            if label.startswith(head_label[:cut]) and label.endswith(head_label[cut:]):
                added = label[cut:cut + extra]
                if added[:1] in ("/", "[", "~", ":"):
                    return added
    return label


def also_text(head_label: str, labels: Sequence[str]) -> str:
    """``"also: a, b"`` naming ``labels`` on ``head_label``'s row (empty when there are none)."""
    return "also: " + ", ".join(variant_name(head_label, label) for label in labels) if labels else ""


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
    alike: tuple[Plan, ...] = ()
    """the other candidates the cost model priced alike with ``plan`` (:func:`priced_alike`), in
    the planner's order; explain names them on the site's row instead of listing rows."""

    def __post_init__(self) -> None:
        if not self.rewritten and not self.reason.strip():
            raise ValueError(f"SiteRecord for {self.site.key} in {self.graph}: a site left as traced needs its reason "
                             "(explain reports why every pattern was left alone)")
        if not isinstance(self.alike, tuple) or not all(isinstance(p, Plan) for p in self.alike):
            raise TypeError(f"SiteRecord for {self.site.key} in {self.graph}: alike={self.alike!r} must be a tuple "
                            "of Plans")

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
                "reason": self.reason, "nodes": list(self.nodes), "note": self.note,
                "alike": [p.to_dict() for p in self.alike]}

    def also(self) -> str:
        """``"also: ..."``: the plans priced alike with ``plan``, named as :func:`variant_name` does."""
        return also_text(plan_label(self.plan), [plan_label(p) for p in self.alike])


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
    moe_sites: tuple = ()
    """expert-parallel MoE layers found (``hocket.graph.moe_report.MoeSiteRecord``, one per layer)."""

    def to_dict(self) -> dict:
        d = {"graph": self.graph, "direction": self.direction, "note": self.note,
             "sites": [s.to_dict() for s in self.sites], "left_alone": [x.to_dict() for x in self.left_alone],
             "gaps": [g.to_dict() for g in self.gaps]}
        if self.moe_sites:
            d["moe_sites"] = [m.to_dict() for m in self.moe_sites]
        return d


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
    def moe_sites(self) -> tuple:
        """Expert-parallel MoE layers found (``MoeSiteRecord``), every graph."""
        return tuple(m for g in self.graphs for m in g.moe_sites)

    @property
    def gaps(self) -> tuple[GapRecord, ...]:
        return tuple(x for g in self.graphs for x in g.gaps)

    @property
    def predicted_saving_ms(self) -> float:
        return sum(s.predicted_saving_ms or 0.0 for s in self.rewritten)

    def to_dict(self) -> dict:
        return {"graphs": [g.to_dict() for g in self.graphs]}

    def shards(self, cluster, profile=None) -> list[str]:
        """Per-rank shard sizes from device speed (:mod:`hocket.plan.shards`) for every distinct multi-rank
        ag_mm, mm_rs and mm_ar site found, on ``cluster`` (a ClusterSpec): lines to print."""
        from hocket.plan.shards import SIZED_KINDS, recommend_shards, shard_lines

        lines, seen = [], set()
        for record in self.sites:
            site = record.site
            if site.kind in SIZED_KINDS and site.world > 1 and site.key not in seen:
                seen.add(site.key)
                lines += [f"{record.graph}: {line}" for line in shard_lines(recommend_shards(site, cluster, profile))]
        return lines

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
                if s.alike:
                    status += f"  ({s.also()})"
                lines.append(f"  {s.graph:<12} {s.kind:<6} {_shape(s.site):<18} {s.site.dtype:<9} {s.site.world:>2} "
                             f"{s.plan.describe():<24} {s.source:<10} {_ms(s.predicted_sequential_ms):>9} "
                             f"{_ms(s.predicted_ms):>9} "
                             f"{_ms(s.predicted_saving_ms):>9}  {status}")
        if self.moe_sites:
            lines.append(f"  MoE layers: {len(self.moe_sites)}, {sum(m.rewritten for m in self.moe_sites)} rewritten")
            lines.append(f"  {'graph':<12} {'kind':<14} {'shape':<24} {'dtype':<9} {'w':>2} {'plan':<24} "
                         f"{'from':<10} {'seq_ms':>9} {'plan_ms':>9}  status")
            lines.extend(m.format_row() for m in self.moe_sites)
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

"""The one entry pass: find sites, plan them, rewrite them into hocket operators, fill the gaps left.

``overlap_pass(graph, ...)`` runs on one post-autograd graph (forward or backward) and
returns a :class:`~hocket.graph.report.GraphReport`. It never raises for a pattern it
does not support: such a pattern stays as it is and the reason goes into the report.
``HOCKET_DISABLE=1`` turns the whole pass off (the graph is left untouched).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import fx

from hocket.core.site import Site, canonical_dtype
from hocket.graph.find import (
    find_all_gathers,
    find_all_reduces,
    find_consumer_matmuls,
    find_producer_matmul,
    find_reduce_scatters,
)
from hocket.graph.fuse import expected_reduced_shape, fuse_all_gather_matmul, fuse_matmul_reduce, gathered_operands
from hocket.graph.matches import AllGatherMatch, GatherUses, ProducerMatmul, ScatterMatch, Unmatched
from hocket.graph.moe import all_to_all_ms
from hocket.graph.nodes import ALL_GATHER, ALL_REDUCE, MATMUL_TARGETS, REDUCE_SCATTER, is_call, static_shape, val
from hocket.graph.order import can_hoist, descendants, remove_dead_code
from hocket.graph.planning import GraphPlanner, group_ranks
from hocket.graph.reorder import fill_gaps
from hocket.graph.report import GapRecord, GraphReport, LeftAlone, SiteRecord
from hocket.ops.sites import site_for_call

DIRECTIONS = ("forward", "backward")


@dataclass(frozen=True, kw_only=True)
class PassConfig:
    """What the pass may do."""

    rewrite: bool = True
    """replace sites by hocket operators (when their plan is not sequential)."""
    reorder: bool = True
    """move independent compute into the gaps of collectives that stay."""
    rewrite_sequential: bool = False
    """also replace sites whose plan is sequential (off: the raw collective stays, so its gap can be filled)."""
    min_saving_fraction: float = 0.10
    """a *predicted* (not measured) plan replaces the collective only if it is predicted to save at least
    this fraction of the site's sequential time. In a graph the alternative is not plain sequential but an
    asynchronous collective whose gap reordering fills, and small predicted savings are within the cost
    model's error on fast links (2xH200, Llama-8B block: sites predicted 7-14% faster made the step 1.19x
    slower; autotuned, 1.00x). Plans from ``plan_for`` are used as given."""
    min_measured_saving_fraction: float = 0.10
    """a *measured* plan (``autotune=True``, or its cached result) replaces the collective only if, timed
    alone, it saved at least this fraction of measured sequential. Alone, sequential waits for its
    collective; in the graph the collective that stays runs asynchronously with compute reordered into its
    gap, which a standalone timing does not see (gloo world 2, block size m: ring plans measured a few
    percent faster alone made the step 1.06-1.18x slower)."""

    def __post_init__(self) -> None:
        for name in ("rewrite", "reorder", "rewrite_sequential"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"PassConfig.{name}={getattr(self, name)!r} must be True or False")
        for name in ("min_saving_fraction", "min_measured_saving_fraction"):
            fraction = getattr(self, name)
            if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction < 1.0:
                raise ValueError(f"PassConfig.{name}={fraction!r} must be a fraction in [0, 1), "
                                 "e.g. 0.1 for 10% of the site's sequential time")


def is_backward(graph: fx.Graph) -> bool:
    """AOTAutograd names the backward graph's incoming gradients ``tangents_*``."""
    return any(n.op == "placeholder" and str(n.target).startswith("tangents") for n in graph.nodes)


def _meta(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _collective_name(node: fx.Node) -> str:
    return getattr(node.target, "__name__", str(node.target)).split(".")[0]


class _Run:
    """State of one pass over one graph."""

    def __init__(self, graph: fx.Graph, *, name: str, direction: str, planner: GraphPlanner,
                 config: PassConfig) -> None:
        self.graph, self.name, self.direction = graph, name, direction
        self.planner, self.config = planner, config
        self.sites: list[SiteRecord] = []
        self.left: list[LeftAlone] = []

    def leave(self, item: Unmatched) -> None:
        self.left.append(LeftAlone(graph=self.name, collective=_collective_name(item.node), node=item.node.name,
                                   reason=item.reason))

    def _record(self, site: Site, group_name: str, nodes: tuple[str, ...]) -> tuple[SiteRecord, bool]:
        choice = self.planner.choose(site, group_name=group_name)
        reason = ""
        if not self.config.rewrite:
            reason = "rewriting is switched off"
        elif choice.plan.strategy == "sequential" and not self.config.rewrite_sequential:
            how = "measured" if choice.source in ("autotune", "cache") else "predicted"
            reason = "sequential chosen" + (f" ({choice.note})" if choice.note else
                                            f" (no plan {how} faster; the collective stays for reordering)")
        elif choice.source == "predicted" and choice.plan.strategy != "sequential":
            fraction = (choice.saving_ms or 0.0) / choice.sequential_ms if choice.sequential_ms else 0.0
            if fraction < self.config.min_saving_fraction:
                reason = (f"predicted saving {fraction:.1%} is below PassConfig.min_saving_fraction "
                          f"{self.config.min_saving_fraction:.0%} (autotune=True measures instead); "
                          "the collective stays for reordering")
        elif choice.measured_saving_fraction is not None and choice.plan.strategy != "sequential":
            fraction = choice.measured_saving_fraction
            if fraction < self.config.min_measured_saving_fraction:
                reason = (f"measured saving {fraction:.1%} (timed alone) is below "
                          f"PassConfig.min_measured_saving_fraction {self.config.min_measured_saving_fraction:.0%}; "
                          "the collective stays for reordering")
        record = SiteRecord(graph=self.name, site=site, plan=choice.plan, source=choice.source, rewritten=not reason,
                            predicted_sequential_ms=choice.sequential_ms,
                            predicted_ms=choice.chosen_ms if not reason else choice.sequential_ms,
                            reason=reason, nodes=nodes, note=choice.note,
                            alike=choice.alike if not reason else ())
        return record, not reason

    # -- all-gather + matmul ---------------------------------------------------------------
    def all_gather(self, match: AllGatherMatch) -> None:
        uses = find_consumer_matmuls(match)
        uses = self._hoistable(match, uses)
        if not uses.consumers:
            self.leave(Unmatched(node=match.start, reason="no matmul reads the gathered tensor as its input"))
            return
        if uses.dtype is None:
            self.leave(Unmatched(node=match.start, reason="the gathered tensor is read in more than one dtype"))
            return
        shard_shape = static_shape(match.shard)
        bs = []
        for c in uses.consumers:
            b_shape = static_shape(c.p if c.transposed else c.b)
            if b_shape is None or len(b_shape) != 2:
                self.leave(Unmatched(node=match.start, reason="a matmul operand's shape is unknown"))
                return
            bs.append(_meta(b_shape[::-1] if c.transposed else b_shape, uses.dtype))
        site = site_for_call("ag_mm", A=_meta(shard_shape, uses.dtype), Bs=bs, dim=match.gather_dim,
                             world=match.world, ranks=group_ranks(match.group_name), direction=self.direction)
        nodes = (match.start.name, *(c.mm.name for c in uses.consumers))
        record, rewrite = self._record(site, match.group_name, nodes)
        if rewrite:
            fuse_all_gather_matmul(self.graph, match, uses, plan_json=record.plan.to_json(), direction=self.direction)
        self.sites.append(record)

    def _hoistable(self, match: AllGatherMatch, uses: GatherUses) -> GatherUses:
        """Drop consumers whose other operands depend on the gather or cannot move before it."""
        after = descendants(match.start)
        kept, dropped = [], []
        for consumer in uses.consumers:
            operands = gathered_operands(GatherUses(consumers=(consumer,), others=(), dtype=None))
            if any(op in after for op in operands) or not can_hoist(operands, match.start):
                dropped.append(consumer)
            else:
                kept.append(consumer)
        if not dropped:
            return uses
        others = tuple(dict.fromkeys((*uses.others, *(c.source for c in dropped))))
        return GatherUses(consumers=tuple(kept), others=others, dtype=uses.dtype)

    # -- matmul + reduce-scatter / all-reduce ----------------------------------------------
    def reduction(self, match: ScatterMatch) -> None:
        producer = find_producer_matmul(match)
        if isinstance(producer, Unmatched):
            self.leave(producer)
            return
        if expected_reduced_shape(match) != static_shape(match.wait):
            self.leave(Unmatched(node=match.start, reason="the reduced shape is not what the pattern implies"))
            return
        site = self._reduction_site(match, producer)
        nodes = (match.start.name, *(mm.name for mm, _, _ in producer.terms))
        record, rewrite = self._record(site, match.group_name, nodes)
        if rewrite:
            fuse_matmul_reduce(self.graph, match, producer, plan_json=record.plan.to_json(), direction=self.direction)
        if len(producer.terms) > 1:
            record = _with_note(record, f"sum of {len(producer.terms)} matmuls fused along K")
        self.sites.append(record)

    def _reduction_site(self, match: ScatterMatch, producer: ProducerMatmul) -> Site:
        source_shape = static_shape(match.source)
        a = _meta((*source_shape[:-1], producer.k), producer.dtype)
        b = _meta((producer.k, producer.n), producer.dtype)
        kind = "mm_ar" if match.scatter_dim is None else "mm_rs"
        return site_for_call(kind, A=a, Bs=[b], dim=match.scatter_dim or 0, world=match.world,
                             ranks=group_ranks(match.group_name), direction=self.direction)

    # -- reordering ------------------------------------------------------------------------
    def gaps(self) -> list[GapRecord]:
        rank = _group_rank0()
        dtype_of = {}

        def comm_ms(start: fx.Node) -> float | None:
            site = _collective_site(start, self.direction)
            if site is None:  # an all-to-all with split sizes (expert parallelism), else None
                return all_to_all_ms(start, self.direction, self.planner)
            return self.planner.collective_ms(site)

        def compute_ms(node: fx.Node) -> float | None:
            if not is_call(node, MATMUL_TARGETS):
                return 0.0
            a, b = (node.args[0], node.args[1]) if node.target is torch.ops.aten.mm.default else node.args[1:3]
            sa, sb = static_shape(a), static_shape(b)
            value = val(node)
            if sa is None or sb is None or value is None:
                return None
            dtype = dtype_of.setdefault(value.dtype, _dtype_name(value.dtype))
            if dtype is None:
                return None
            return self.planner.matmul_ms(m=sa[0], k=sa[1], n=sb[1], dtype=dtype, rank=rank)

        return [GapRecord(graph=self.name, collective=_collective_name(g.start), node=g.start.name,
                          moved_before=g.moved_before, moved_after=g.moved_after, matmuls_in_gap=g.matmuls_in_gap,
                          gap_compute_ms=g.gap_compute_ms, comm_ms=g.comm_ms)
                for g in fill_gaps(self.graph, comm_ms=comm_ms, compute_ms=compute_ms)]


def _with_note(record: SiteRecord, note: str) -> SiteRecord:
    from dataclasses import replace

    return replace(record, note="; ".join(x for x in (record.note, note) if x))


def _dtype_name(dtype: torch.dtype) -> str | None:
    try:
        return canonical_dtype(dtype)
    except ValueError:
        return None


def _group_rank0() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _collective_site(start: fx.Node, direction: str) -> Site | None:
    """A Site whose collective is ``start``'s (the matmul part is a token 1-wide one)."""
    from hocket.graph.nodes import group_args

    world, group_name = group_args(start)
    value = val(start.args[0])
    shape = static_shape(start.args[0])
    dtype = _dtype_name(value.dtype) if value is not None else None
    if shape is None or dtype is None or group_name is None or not shape:
        return None
    ranks = group_ranks(group_name)
    world = world or len(ranks)
    if not world or world < 2:
        return None
    cols = shape[-1]
    rows = max(1, value.numel() // max(1, cols))
    try:
        if start.target is ALL_GATHER:
            return Site(kind="ag_mm", m=rows * world, k=cols, n=1, dtype=dtype, world=world, ranks=ranks,
                        direction=direction)
        if start.target is REDUCE_SCATTER:
            return Site(kind="mm_rs", m=rows, k=1, n=cols, dtype=dtype, world=world, ranks=ranks,
                        direction=direction)
        if start.target is ALL_REDUCE:
            return Site(kind="mm_ar", m=rows, k=1, n=cols, dtype=dtype, world=world, ranks=ranks,
                        direction=direction)
    except ValueError:
        return None
    return None


def overlap_pass(graph: fx.Graph, *, planner: GraphPlanner, name: str | None = None, direction: str | None = None,
                 config: PassConfig | None = None) -> GraphReport:
    """Run hocket's pass on ``graph`` in place (see module docstring) and report what it did."""
    from hocket.env import disabled

    config = config or PassConfig()
    direction = direction or ("backward" if is_backward(graph) else "forward")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction={direction!r} must be one of {DIRECTIONS}")
    name = name or direction
    if disabled():
        return GraphReport(graph=name, direction=direction, note="HOCKET_DISABLE=1: graph left as traced")
    remove_dead_code(graph)
    run = _Run(graph, name=name, direction=direction, planner=planner, config=config)
    for item in find_all_gathers(graph):
        run.leave(item) if isinstance(item, Unmatched) else run.all_gather(item)
    for item in [*find_reduce_scatters(graph), *find_all_reduces(graph)]:
        run.leave(item) if isinstance(item, Unmatched) else run.reduction(item)
    remove_dead_code(graph)
    gaps = run.gaps() if config.reorder else []
    graph.lint()
    report = GraphReport(graph=name, direction=direction, sites=tuple(run.sites), left_alone=tuple(run.left),
                         gaps=tuple(gaps))
    return report

"""Candidate space: every valid Plan for a Site on a group, and why the rest were pruned.

Enumeration is apart from selection (docs/planning.md): this module only lists
plans; :mod:`hocket.plan.search` prices and picks. The enumerator works on plain data:
a :class:`GroupFacts` (what the cluster offers between the group's ranks), built from a
ClusterSpec by :func:`group_facts`, so tests can hand it a toy group.

Each strategy's rules (the kinds and transports it is enumerated for, its chunk counts, orders,
hierarchy, uneven pieces, and the variants one plan stands for such as the copy-engine peer
protocols) are its spec's (:class:`hocket.strategies.StrategySpec`); this module applies them.

Dimensions: strategy x transport x chunks (powers of two and divisors of the split
rows, up to ``max_chunks``) x order x hierarchy x comm SM budget (x peer protocol with
``SpaceConfig.variants``), plus uneven pieces
(``split_sizes``: a small first piece to fill the pipeline, a small last one to drain
it, or both; :mod:`hocket.core.pieces`) where the executor honours them: today the
``chunked`` executors of ag_mm, mm_rs and mm_ar (``hocket.ops.lowering.chunked``; the
offload operators honour them too but are not planned here). Rings, tile_fused,
substituted and bulk cut evenly and are pruned with that reason. A field that does
not apply to a strategy is not enumerated (``order`` of ``sequential``); a choice
that applies but is invalid here is pruned with a reason, at the first dimension
that fails (so one pruned entry stands for the subtree below it). ``sequential`` is
always the first candidate and is never pruned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hocket.core.pieces import SPLIT_PATTERNS, ramp_sizes
from hocket.core.plan import ORDERS, STRATEGIES, TRANSPORTS, Plan
from hocket.core.site import Site
from hocket.plan.memory import GIB, budget_from_memory, estimate_extra_memory, over_budget_reason
from hocket.strategies import StrategySpec, spec, specs

SM_TRANSPORTS = ("collective", "p2p")
"""Transports driven by SMs (NCCL kernels); only these take a ``comm_sms`` budget."""

_TRANSPORT_REASONS = {
    "collective": "it moves shards peer to peer, not as one collective call",
    "p2p": "it runs whole collectives, not peer-to-peer sends",
    "host_staged": "the host-staged path carries whole collectives, not peer-to-peer ring steps",
    "copy_engine": "the copy-engine transport offers collectives (rings post receives before their sends "
                   "exist, which a pull from symmetric memory cannot serve)",
}
HIERARCHICAL_TRANSPORTS = ("collective",)
"""transports whose collectives run hierarchically (``hocket.transport.hierarchical``; the host-staged relay has no
hierarchical form)."""


@dataclass(frozen=True, kw_only=True)
class GroupFacts:
    """What the cluster offers between one group's ranks (plain data for the enumerator)."""

    transports: frozenset[str]
    """transports every pair of the group can use (e.g. {"collective", "p2p"})."""
    nodes: int = 1
    """nodes the group spans."""
    max_ranks_per_node: int = 1
    min_ranks_per_node: int | None = None
    """fewest of the group's ranks on one of its nodes (None: as many as ``max_ranks_per_node``)."""
    sm_count: int | None = None
    """smallest SM/CU count in the group; None when the devices have none (CPUs)."""
    memory_bytes: int | None = None
    """smallest free (live) or total (described) device memory in the group; None = unknown."""
    device_models: tuple[str, ...] = ()
    """distinct device models in the group."""
    notes: dict[str, str] = field(default_factory=dict)
    """per-transport explanation of why it is missing (from the ClusterSpec), if known."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "transports", frozenset(self.transports))
        unknown = set(self.transports) - set(TRANSPORTS)
        if unknown:
            raise ValueError(f"GroupFacts.transports has unknown {sorted(unknown)}; known: {TRANSPORTS}")
        if self.nodes < 1 or self.max_ranks_per_node < 1:
            raise ValueError(f"GroupFacts.nodes={self.nodes} and max_ranks_per_node={self.max_ranks_per_node} "
                             f"must be >= 1")


@dataclass(frozen=True, kw_only=True)
class SpaceConfig:
    """Knobs of the candidate space (docs/planning.md)."""

    max_chunks: int = 64
    min_gemm_rows: int = 16
    """pieces whose GEMM has fewer rows are pruned (their efficiency collapses)."""
    comm_sms_options: tuple[int | None, ...] = (None, 16, 32)
    """SM budgets tried for SM-driven transports; None = the library's default."""
    strategies: tuple[str, ...] = STRATEGIES
    """strategies to consider (e.g. only those the live executor implements)."""
    transports: tuple[str, ...] = TRANSPORTS
    memory_budget_bytes: int | None = None
    """extra device memory a plan may use; None = a share of the group's device memory."""
    memory_budget_fraction: float = 0.25
    split_patterns: tuple[str, ...] = SPLIT_PATTERNS
    """uneven piece shapes to enumerate (``()`` = even pieces only)."""
    split_max_chunks: int = 16
    """uneven pieces are enumerated up to this many pieces (beyond, every piece is already small)."""
    split_align: int = 8
    """the small piece's rows are a multiple of this."""
    captured: bool = False
    """plans for calls replayed from CUDA graphs: those a graph cannot capture are pruned, with
    :func:`hocket.plan.capture.capture_refusal`'s reason."""
    variants: bool = False
    """also enumerate the variants a plan stands for (``StrategySpec.variants``: each named copy-engine peer
    protocol of ``chunked`` besides the automatic choice, ``Plan.protocol``). The rule: variants are
    enumerated where a measurement decides (the live planner turns this on when it autotunes, and
    ``hocket predict --variants`` lists them); a choice by prediction alone keeps the automatic order
    (:data:`hocket.core.peer_protocol.AUTO_ORDER`, the measured one), because the model's protocol prices
    are not checked against measurements: on the preset sites it prices a named protocol below the
    automatic one in 28 of 648 decisions (ag_mm and mm_rs on 2 and 8 H100/H200/A100 ranks)."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_chunks, int) or not 1 <= self.max_chunks <= 4096:
            raise ValueError(f"SpaceConfig.max_chunks={self.max_chunks!r} must be an int in 1..4096 (default 64)")
        if not isinstance(self.min_gemm_rows, int) or self.min_gemm_rows < 1:
            raise ValueError(f"SpaceConfig.min_gemm_rows={self.min_gemm_rows!r} must be an int >= 1")
        bad = [s for s in self.strategies if s not in STRATEGIES]
        if bad:
            raise ValueError(f"SpaceConfig.strategies has unknown {bad}; use names from {STRATEGIES}")
        bad = [t for t in self.transports if t not in TRANSPORTS]
        if bad:
            raise ValueError(f"SpaceConfig.transports has unknown {bad}; use names from {TRANSPORTS}")
        for sms in self.comm_sms_options:
            if sms is not None and (not isinstance(sms, int) or sms < 1):
                raise ValueError(f"SpaceConfig.comm_sms_options has {sms!r}; use None or ints >= 1")
        bad = [p for p in self.split_patterns if p not in SPLIT_PATTERNS]
        if bad:
            raise ValueError(f"SpaceConfig.split_patterns has unknown {bad}; use names from {SPLIT_PATTERNS}")
        for name in ("split_max_chunks", "split_align"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SpaceConfig.{name}={value!r} must be an int >= 1")
        if not isinstance(self.captured, bool):
            raise ValueError(f"SpaceConfig.captured={self.captured!r} must be True or False")
        if not isinstance(self.variants, bool):
            raise ValueError(f"SpaceConfig.variants={self.variants!r} must be True or False")
        if self.memory_budget_bytes is not None and self.memory_budget_bytes < 0:
            raise ValueError(f"SpaceConfig.memory_budget_bytes={self.memory_budget_bytes!r} must be >= 0 or None")


@dataclass(frozen=True, kw_only=True)
class Pruned:
    """A plan (or the subtree of plans it heads) left out of the space, and why."""

    plan: Plan
    reason: str


@dataclass(frozen=True, kw_only=True)
class PlanSpace:
    """The candidates for one Site (``baseline`` first) and everything pruned."""

    site: Site
    baseline: Plan
    candidates: tuple[Plan, ...]
    pruned: tuple[Pruned, ...]
    memory_budget_bytes: int | None


def group_facts(site: Site, cluster: object, *, free_memory_bytes: int | None = None) -> GroupFacts:
    """What ``cluster`` (a ``hocket.hardware`` ClusterSpec) offers to ``site``'s group.

    ``free_memory_bytes`` (measured on a live device) replaces the described device
    memory as the base of the memory budget.
    """
    ranks = site.group_ranks
    cluster.check_world(site.world, arg="Site.world")
    transports = frozenset(cluster.group_transports(ranks))
    per_node: dict[int, int] = {}
    for rank in ranks:
        node = cluster.node_of(rank)
        per_node[node] = per_node.get(node, 0) + 1
    devices = {cluster.device(rank) for rank in ranks}
    sm_count = None if any(d.sm_count is None or d.is_cpu for d in devices) else min(d.sm_count for d in devices)
    if free_memory_bytes is not None:
        memory_bytes = int(free_memory_bytes)
    elif all(d.memory_gib is not None for d in devices):
        memory_bytes = int(min(d.memory_gib for d in devices) * GIB)
    else:
        memory_bytes = None
    notes: dict[str, str] = {}
    if len({d.vendor for d in devices}) > 1:
        for transport in TRANSPORTS:
            notes[transport] = "devices of different vendors share no peer path, only host memory"
    elif len(per_node) > 1:
        for transport in TRANSPORTS:
            notes[transport] = "the group spans nodes and the network between them does not carry it"
    return GroupFacts(transports=transports, nodes=len(per_node), max_ranks_per_node=max(per_node.values()),
                      min_ranks_per_node=min(per_node.values()),
                      sm_count=sm_count, memory_bytes=memory_bytes,
                      device_models=tuple(sorted({d.model for d in devices})), notes=notes)


def chunk_options(rows: int, max_chunks: int = 64) -> tuple[int, ...]:
    """1..max_chunks: powers of two and divisors of ``rows``, ascending."""
    pow2 = {1 << i for i in range(max_chunks.bit_length()) if 1 << i <= max_chunks}
    divisors = {c for c in range(1, max_chunks + 1) if rows % c == 0}
    return tuple(sorted(pow2 | divisors))


def split_rows(site: Site, strategy: str) -> int:
    """Rows of the dimension ``strategy`` cuts into ``chunks`` pieces (its spec's ``split_rows``).

    Pipelines over a row-sharded operand cut each rank's shard (``m / world`` rows);
    a chunked all-reduce, and sites that shard the last dim (``Site.dim == -1``: K
    gathered, N scattered), cut the whole ``m``.
    """
    return spec(strategy).split_rows(site)


def gemm_rows(site: Site, strategy: str, chunks: int) -> int:
    """Rows of each GEMM the plan issues (ring steps over row shards multiply one shard piece)."""
    return spec(strategy).gemm_rows(site, chunks)


def simplicity(plan: Plan) -> tuple:
    """Tie-break key: among equally fast plans, prefer the simpler one."""
    return (STRATEGIES.index(plan.strategy), plan.chunks, ORDERS.index(plan.order),
            TRANSPORTS.index(plan.transport), plan.hierarchy is not None, plan.comm_sms or 0,
            plan.substitute or "", plan.split_sizes is not None, plan.split_sizes or (), plan.protocol is not None,
            plan.protocol or "")


def baseline_plan(facts: GroupFacts, site: Site) -> Plan:
    """The sequential plan every other candidate must beat."""
    for transport in ("collective", "host_staged", "copy_engine"):
        if transport in facts.transports:
            return Plan(strategy="sequential", transport=transport)
    raise ValueError(
        f"the cluster offers no transport for sequential {site.kind} between ranks {list(site.group_ranks)} "
        f"(offered: {sorted(facts.transports) or 'none'}); describe at least a collective or host_staged path"
    )


def enumerate_plans(site: Site, facts: GroupFacts, config: SpaceConfig | None = None) -> PlanSpace:
    """Every valid plan for ``site`` on a group described by ``facts`` (see module docstring)."""
    config = config or SpaceConfig()
    baseline = baseline_plan(facts, site)
    budget = config.memory_budget_bytes
    if budget is None:
        budget = budget_from_memory(facts.memory_bytes, config.memory_budget_fraction)
    candidates: list[Plan] = [baseline]
    pruned: list[Pruned] = []
    for strategy in config.strategies:
        _enumerate_strategy(site, facts, config, budget, spec(strategy), baseline, candidates, pruned)
    if config.captured:
        from hocket.plan.capture import capture_refusal

        refused = [(plan, capture_refusal(site, plan)) for plan in candidates[1:]]
        pruned += [Pruned(plan=plan, reason=f"a CUDA graph cannot capture it: {why}") for plan, why in refused if why]
        candidates = [baseline, *(plan for plan, why in refused if not why)]
    if site.uneven and site.kind in UNEVEN_ROW_KINDS:
        candidates, pruned = _uneven_ways(site, candidates, pruned)
    return PlanSpace(site=site, baseline=baseline, candidates=tuple(candidates), pruned=tuple(pruned),
                     memory_budget_bytes=budget)


UNEVEN_ROW_KINDS = ("ag_mm", "mm_rs")
"""kinds whose uneven shards change what moves (``mm_ar``'s uneven local K moves the same output)."""
EXACT_TRANSPORTS = ("collective", "p2p")


def _uneven_reason(site: Site, plan: Plan) -> str | None:
    """Why ``plan`` cannot run ``site``'s uneven shards (None: it can)."""
    found = spec(plan.strategy)
    if not found.uneven:  # StrategySpec.uneven: an uneven-shard executor (hocket.ops.lowering.uneven)
        serving = tuple(s.name for s in specs() if s.uneven)
        return f"{plan.strategy} has no uneven-shard executor; uneven shards run with {serving}"
    if plan.order != "natural":
        return f"order={plan.order!r} runs even shards only"
    if plan.hierarchy is not None:
        return f"hierarchy={plan.hierarchy!r} runs even shards only"
    if found.uneven_rows_only and site.dim == -1:
        return "a ring passes row blocks; uneven shards along the last dim run in sequential, bulk or chunked"
    if plan.protocol is not None:
        return "the copy-engine peer protocols run even shards only (uneven shards use the transport's collectives)"
    return None


def _uneven_ways(site: Site, candidates: list[Plan], pruned: list[Pruned]) -> tuple[list[Plan], list[Pruned]]:
    """The candidates of an uneven ag_mm / mm_rs site: those whose executors serve uneven shards, each
    collective one both ways (exact over torch.distributed, padded over any transport)."""
    kept: list[Plan] = []
    for plan in candidates:
        why = _uneven_reason(site, plan)
        if why:
            pruned.append(Pruned(plan=plan, reason=f"uneven shards {list(site.shard_rows)}: {why}"))
            continue
        if not spec(plan.strategy).uneven_padded:
            kept.append(plan)
            continue
        if plan.transport in EXACT_TRANSPORTS:
            kept.append(plan)
        else:
            pruned.append(Pruned(plan=plan, reason=f"uneven shards: transport {plan.transport!r} has no exact "
                                                   f"uneven collective; its padded way is enumerated"))
        kept.append(plan.with_(splits="padded"))
    if not kept or kept[0].strategy != "sequential":  # the baseline heads the candidates
        kept.insert(0, Plan(strategy="sequential", transport=candidates[0].transport))
    return kept, pruned


def _strategy_reason(site: Site, strategy: StrategySpec) -> str | None:
    if site.world == 1:
        return "world=1: the group has one rank, nothing to communicate; only the baseline runs"
    if site.kind not in strategy.planned_kinds:
        return f"{strategy.name} does not apply to {site.kind}: {strategy.kind_reason}".rstrip(": ")
    return strategy.site_reason(site) if strategy.site_reason is not None else None


def _transport_reason(site: Site, facts: GroupFacts, strategy: StrategySpec, transport: str) -> str | None:
    if transport not in strategy.transports:
        why = strategy.transport_reason or _TRANSPORT_REASONS.get(transport, f"it needs one of {strategy.transports}")
        return f"{strategy.name} cannot use transport={transport!r}: {why}"
    if transport not in facts.transports:
        note = facts.notes.get(transport)
        offered = ", ".join(sorted(facts.transports)) or "none"
        return (f"the cluster offers no {transport!r} transport between ranks {_ranks(site)} "
                f"(offered: {offered})" + (f": {note}" if note else ""))
    if strategy.one_node and facts.nodes > 1:
        return f"{strategy.name} needs every rank's symmetric memory in reach, but the group spans nodes"
    return None


def _ranks(site: Site) -> str:
    ranks = site.group_ranks
    if len(ranks) > 6 and ranks == tuple(range(ranks[0], ranks[0] + len(ranks))):
        return f"{ranks[0]}..{ranks[-1]}"
    return str(list(ranks)) if len(ranks) <= 6 else f"{list(ranks[:4])}+{len(ranks) - 4} more"


def _chunk_reason(site: Site, config: SpaceConfig, strategy: StrategySpec, chunks: int) -> str | None:
    rows = strategy.split_rows(site)
    if chunks > rows:
        return f"chunks={chunks} > {rows} rows to split: some pieces would be empty"
    if not strategy.checks_gemm_rows:
        return None
    piece = strategy.gemm_rows(site, chunks)
    if piece < config.min_gemm_rows:
        return (f"chunks={chunks} gives GEMM pieces of {piece} rows, under min_gemm_rows={config.min_gemm_rows} "
                f"(tiny GEMMs waste the device)")
    return None


def _hierarchy_options(site: Site, facts: GroupFacts, strategy: StrategySpec, transport: str,
                       template: Plan, pruned: list[Pruned]) -> tuple[str | None, ...]:
    if not strategy.hierarchical or transport not in HIERARCHICAL_TRANSPORTS:
        return (None,)
    if facts.nodes == 1:
        reason = "hierarchy='intra_first' needs a group that spans nodes; this one lies in one node"
    elif facts.max_ranks_per_node == 1:
        reason = "hierarchy='intra_first' needs several ranks per node; each node holds one rank of the group"
    elif facts.min_ranks_per_node not in (None, facts.max_ranks_per_node):
        reason = (f"hierarchy='intra_first' needs the same number of the group's ranks on every node; its nodes "
                  f"hold {facts.min_ranks_per_node} to {facts.max_ranks_per_node}")
    else:
        return (None, "intra_first")
    pruned.append(Pruned(plan=template.with_(hierarchy="intra_first"), reason=reason))
    return (None,)


def _sms_options(facts: GroupFacts, config: SpaceConfig, strategy: StrategySpec, transport: str,
                 template: Plan, pruned: list[Pruned]) -> tuple[int | None, ...]:
    if not strategy.comm_sms or transport not in SM_TRANSPORTS or facts.sm_count is None:
        return (None,)
    options: list[int | None] = []
    for sms in config.comm_sms_options:
        if sms is not None and sms >= facts.sm_count:
            pruned.append(Pruned(plan=template.with_(comm_sms=sms),
                                 reason=f"comm_sms={sms} leaves no SMs for the GEMM (devices have {facts.sm_count})"))
        else:
            options.append(sms)
    return tuple(options)


def _orders(site: Site, strategy: StrategySpec, template: Plan, pruned: list[Pruned]) -> tuple[str, ...]:
    if not strategy.ordered:
        return ("natural",)
    if site.kind == "mm_ar":
        pruned.append(Pruned(plan=template.with_(order="local_first"),
                             reason="order='local_first' needs a local shard; mm_ar's operands are not sharded"))
        return tuple(o for o in ORDERS if o != "local_first")
    return ORDERS


def runs_single_piece_pipeline(site: Site, plan: Plan) -> bool:
    """Whether ``plan`` with one piece is a pipeline of its own rather than ``bulk`` (its spec's
    ``single_piece``: for ``chunked``, the executors that multiply this rank's own data beside the
    transfer, so ``chunks=1`` is enumerated for them)."""
    strategy = spec(plan.strategy)
    return strategy.single_piece is not None and strategy.single_piece(site, plan)


def _enumerate_strategy(site: Site, facts: GroupFacts, config: SpaceConfig, budget: int | None,
                        strategy: StrategySpec, baseline: Plan, candidates: list[Plan], pruned: list[Pruned]) -> None:
    head = strategy.head()
    reason = _strategy_reason(site, strategy)
    if reason:
        if head != baseline:
            pruned.append(Pruned(plan=head, reason=reason))
        return
    chunk_list = (1,) if strategy.fixed_chunks else tuple(
        c for c in chunk_options(strategy.split_rows(site), config.max_chunks) if c >= strategy.min_chunks)
    valid_chunks = []
    for chunks in chunk_list:
        reason = _chunk_reason(site, config, strategy, chunks)
        if reason:
            pruned.append(Pruned(plan=head.with_(chunks=chunks), reason=reason))
        else:
            valid_chunks.append(chunks)
    one_piece = (strategy.single_piece is not None and 1 not in valid_chunks
                 and _chunk_reason(site, config, strategy, 1) is None)
    orders = _orders(site, strategy, head, pruned)
    splits = _split_options(site, config, strategy, head, valid_chunks, pruned)
    for transport in config.transports:
        plan_t = head.with_(transport=transport)
        reason = _transport_reason(site, facts, strategy, transport)
        if reason:
            pruned.append(Pruned(plan=plan_t, reason=reason))
            continue
        hierarchies = _hierarchy_options(site, facts, strategy, transport, plan_t, pruned)
        sms_list = _sms_options(facts, config, strategy, transport, plan_t, pruned)
        counts = ([1] if one_piece else []) + valid_chunks
        for chunks in counts:
            for order in orders:
                if chunks == 1 and one_piece and not strategy.single_piece(site, plan_t.with_(order=order)):
                    continue
                if order != "natural" and strategy.order_reason is not None:
                    why = strategy.order_reason(site, plan_t.with_(order=order))
                    if why:
                        if chunks == counts[0]:  # pruned once per order, not once per chunk count
                            pruned.append(Pruned(plan=plan_t.with_(order=order), reason=why))
                        continue
                for hierarchy in hierarchies:
                    for sms in sms_list:
                        plan = plan_t.with_(chunks=chunks, order=order, hierarchy=hierarchy, comm_sms=sms)
                        variants = strategy.variants(site, plan) if config.variants and strategy.variants else (plan,)
                        for variant in variants:
                            if variant != baseline:
                                _add(site, variant, budget, candidates, pruned)
                        if order != "natural":
                            continue
                        for sizes in splits.get(chunks, ()):
                            _add(site, plan.with_(split_sizes=sizes), budget, candidates, pruned)


def _add(site: Site, plan: Plan, budget: int | None, candidates: list[Plan], pruned: list[Pruned]) -> None:
    reason = over_budget_reason(estimate_extra_memory(site, plan), budget)
    if reason:
        pruned.append(Pruned(plan=plan, reason=reason))
    else:
        candidates.append(plan)


def _split_options(site: Site, config: SpaceConfig, strategy: StrategySpec, head: Plan, valid_chunks: list[int],
                   pruned: list[Pruned]) -> dict[int, list[tuple[int, ...]]]:
    """chunks -> uneven ``split_sizes`` to try with it (order 'natural' only: the ramp is in
    processing order); the shapes that do not fit are pruned with the reason, once per strategy."""
    if not config.split_patterns or strategy.fixed_chunks:
        return {}
    rows = strategy.split_rows(site)
    if not strategy.split:
        sizes = ramp_sizes(rows, max(2, strategy.min_chunks), "fill", align=1)
        if sizes is not None:
            pruned.append(Pruned(plan=head.with_(chunks=len(sizes), split_sizes=sizes),
                                 reason=f"the {strategy.name} executor cuts its pieces evenly and ignores "
                                        f"split_sizes; uneven pieces are enumerated for {split_strategies()} only"))
        return {}
    options: dict[int, list[tuple[int, ...]]] = {}
    rows_per_gemm_row = site.m / rows if site.kind != "mm_ar" and site.dim != -1 else 1
    for chunks in valid_chunks:
        if chunks > config.split_max_chunks:
            pruned.append(Pruned(plan=head.with_(chunks=chunks, split_sizes=(rows,)),
                                 reason=f"uneven pieces with chunks={chunks} > split_max_chunks="
                                        f"{config.split_max_chunks}: every piece is already small, a smaller "
                                        f"first or last one changes little (and each count here stands for "
                                        f"the larger ones)"))
            break
        for pattern in config.split_patterns:
            sizes = ramp_sizes(rows, chunks, pattern, align=config.split_align)
            if sizes is None:
                pruned.append(Pruned(plan=head.with_(chunks=chunks, split_sizes=(rows,)),
                                     reason=f"split pattern {pattern!r} does not fit chunks={chunks} over {rows} rows "
                                            f"(needs {3 if pattern == 'fill_drain' else 2}+ pieces and a small piece "
                                            f"of >= {config.split_align} rows below the others)"))
                continue
            gemm = int(min(sizes) * rows_per_gemm_row)
            if gemm < config.min_gemm_rows:
                pruned.append(Pruned(plan=head.with_(chunks=chunks, split_sizes=sizes),
                                     reason=f"split pattern {pattern!r}: its small piece's GEMM has {gemm} rows, "
                                            f"under min_gemm_rows={config.min_gemm_rows}"))
                continue
            options.setdefault(chunks, []).append(sizes)
    return options


def split_strategies() -> tuple[str, ...]:
    """Strategies whose executor cuts its pieces by ``Plan.split_sizes`` (their spec's ``split``)."""
    return tuple(s.name for s in specs() if s.split)

"""``StrategySpec``: everything hocket knows about one strategy, in one place (plain Python).

A spec names the site kinds the strategy serves (its executors, registered by :mod:`hocket.ops`
against the spec's name, and its cost builder), the rules the plan space enumerates it by
(:mod:`hocket.plan.space` reads them), its cost builder (written against
:class:`hocket.cost.builder.StageBuilder`), its extra-memory estimate (:mod:`hocket.plan.memory`) and
whether a CUDA graph captures it (:mod:`hocket.plan.capture`). :mod:`hocket.strategies.registry`
holds one spec per name of :data:`hocket.core.plan.STRATEGIES`; ``docs/adding-a-strategy.md`` walks
through a registration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hocket.core.plan import STRATEGIES, TRANSPORTS, Plan
from hocket.core.site import SITE_KINDS, Site

OPERATOR_KINDS = ("ag_mm", "mm_rs", "mm_ar")
"""the collective operators of :mod:`hocket.ops` (executors in :mod:`hocket.ops.lowering`)."""
OFFLOAD_KINDS = ("h2d_mm", "mm_d2h")
"""the offload operators (one device and its host link; executors in :mod:`hocket.ops.offload`)."""


def split_rows(site: Site) -> int:
    """Rows of the dimension a pipeline cuts into ``chunks`` pieces (the default rule): each rank's
    shard (``m / world`` rows) of a row-sharded operand; the whole ``m`` for an all-reduce and for sites
    that shard the last dim (``Site.dim == -1``: K gathered, N scattered)."""
    if site.kind == "mm_ar" or site.dim == -1:
        return site.m
    return max(1, site.m // site.world)


def gemm_rows(site: Site, chunks: int) -> int:
    """Rows of each GEMM a plan of ``chunks`` pieces issues (the default rule: ``m / chunks``)."""
    return site.m // chunks


@dataclass(frozen=True, kw_only=True)
class StrategySpec:
    """One strategy (module docstring). The callables take plain data (``Site``, ``Plan``, a builder)."""

    name: str
    """a name of :data:`hocket.core.plan.STRATEGIES` (``Plan.strategy``)."""
    summary: str
    """one line: what the strategy does."""
    kinds: tuple[str, ...]
    """site kinds it serves: an executor runs each (registered against ``name`` by :mod:`hocket.ops`)."""
    cost: Callable[[object], None]
    """the cost builder: appends the stages of ``b.site`` under ``b.plan`` to ``b`` (a
    :class:`hocket.cost.builder.StageBuilder`) for every kind of :attr:`priced`, as the executor runs it."""
    workspace: Callable[[Site, Plan], int]
    """extra per-rank device workspace bytes of its own buffers (:func:`hocket.plan.memory.estimate_extra_memory`
    adds what the transport and the hierarchy need)."""
    priced_kinds: tuple[str, ...] | None = None
    """kinds the cost model prices; None: :attr:`kinds`. (``substituted`` also prices ``ag_mm``'s
    ``ring_p2p`` form, as the ring; ``tile_fused``'s all-reduce kernel runs but is not priced.)"""
    runs_on_cpu: bool = True
    """whether its executors run on CPU ranks (gloo); False: registered only where CUDA symmetric memory exists."""
    # -- the plan space (hocket.plan.space) -------------------------------------------------------
    planned_kinds: tuple[str, ...] = ()
    """kinds the planner enumerates it for."""
    kind_reason: str = ""
    """why it is not enumerated for the other kinds (a pruned candidate's reason)."""
    transports: tuple[str, ...] = ()
    """transports the planner enumerates it with."""
    transport_reason: str | None = None
    """why no other transport, where one reason holds for all (else the transport's own reason)."""
    one_node: bool = False
    """whether it needs every rank's symmetric memory in reach (a group on one node)."""
    min_chunks: int = 1
    fixed_chunks: bool = False
    """runs one piece whatever ``chunks`` says (``sequential``, ``bulk``)."""
    ordered: bool = False
    """enumerated with every ``Plan.order``."""
    hierarchical: bool = False
    """enumerated with ``hierarchy="intra_first"`` over collective and host-staged transports."""
    split: bool = False
    """its executor cuts its pieces by ``Plan.split_sizes`` (uneven pieces are enumerated)."""
    uneven: bool = False
    """it serves uneven per-rank shards of ``ag_mm`` / ``mm_rs`` (``Site.shard_rows``): an uneven executor is
    registered beside its even ones (:mod:`hocket.ops.lowering.uneven`); ``mm_ar`` moves the same output either way."""
    uneven_padded: bool = False
    """its uneven collectives run both ways: exact (``Plan.splits`` None) or padded to the largest shard
    (``"padded"``, over any transport); False: exact only."""
    uneven_rows_only: bool = False
    """it passes row blocks, so it serves uneven shards of row-sharded operands only (not ``Site.dim == -1``)."""
    comm_sms: bool = True
    """enumerated with the SM budgets of SM-driven transports."""
    substitute: str | None = None
    """the ``Plan.substitute`` of its candidates."""
    checks_gemm_rows: bool = True
    """whether pieces whose GEMMs have fewer than ``SpaceConfig.min_gemm_rows`` rows are pruned."""
    site_reason: Callable[[Site], str | None] | None = None
    """why it does not apply to a site it otherwise serves (e.g. ``bidir_ring`` on two ranks)."""
    split_rows: Callable[[Site], int] = split_rows
    """rows of the dimension it cuts into ``chunks`` pieces."""
    gemm_rows: Callable[[Site, int], int] = gemm_rows
    """rows of each GEMM it issues with ``chunks`` pieces."""
    single_piece: Callable[[Site, Plan], bool] | None = None
    """whether ``chunks=1`` is a pipeline of its own for ``plan`` (enumerated below ``min_chunks``)."""
    order_reason: Callable[[Site, Plan], str | None] | None = None
    """why ``plan`` (an order other than natural) runs the natural order anyway (pruned with the reason)."""
    variants: Callable[[Site, Plan], tuple[Plan, ...]] | None = None
    """the candidates one enumerated plan stands for (e.g. one per peer protocol); None: the plan itself."""
    # -- memory and capture -----------------------------------------------------------------------
    symmetric: Callable[[Site, Plan], int] | None = None
    """extra symmetric-memory bytes; None: the default rule (:func:`hocket.strategies.memory.symmetric_bytes`)."""
    host_staging: bool = True
    """whether over ``host_staged`` it stages pieces in device buffers for the copies."""
    error_class: str = "pipelined"
    """the plan class whose measured error applies to it (:func:`hocket.plan.uncertainty.plan_class`):
    ``sequential``, ``ring``, ``tile_fused`` or ``pipelined`` (then by transport)."""
    capture_refusal: Callable[[Site, Plan, str], str | None] | None = None
    """given the generic refusal of a plan whose transport a CUDA graph cannot always capture, its own
    answer (None: captures); None: the generic refusal holds."""

    def __post_init__(self) -> None:
        if self.name not in STRATEGIES:
            raise ValueError(f"StrategySpec.name={self.name!r} is not a strategy name; add it to "
                             f"hocket.core.plan.STRATEGIES first (known: {STRATEGIES})")
        for field_name in ("kinds", "planned_kinds"):
            bad = [k for k in getattr(self, field_name) if k not in SITE_KINDS]
            if bad:
                raise ValueError(f"StrategySpec({self.name!r}).{field_name} has unknown kinds {bad}; use {SITE_KINDS}")
        bad = [k for k in self.priced if k not in SITE_KINDS]
        if bad:
            raise ValueError(f"StrategySpec({self.name!r}).priced_kinds has unknown kinds {bad}; use {SITE_KINDS}")
        bad = [t for t in self.transports if t not in TRANSPORTS]
        if bad:
            raise ValueError(f"StrategySpec({self.name!r}).transports has unknown {bad}; use {TRANSPORTS}")
        if self.min_chunks < 1:
            raise ValueError(f"StrategySpec({self.name!r}).min_chunks={self.min_chunks} must be >= 1")

    @property
    def priced(self) -> tuple[str, ...]:
        """The kinds its cost builder prices."""
        return self.kinds if self.priced_kinds is None else self.priced_kinds

    @property
    def pipelined(self) -> bool:
        """Whether its pieces are the point (``min_chunks >= 2``): benchmarks measure it at several counts."""
        return self.min_chunks >= 2

    def head(self) -> Plan:
        """The first plan the space tries for it (the fewest chunks, its substitute)."""
        return Plan(strategy=self.name, substitute=self.substitute, chunks=self.min_chunks)

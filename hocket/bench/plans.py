"""Which plans a benchmark measures for a site kind."""

from __future__ import annotations

from hocket.core.plan import STRATEGIES, Plan
from hocket.strategies import OPERATOR_KINDS, spec, specs

BENCH_STRATEGIES = {kind: tuple(s.name for s in specs() if kind in s.kinds and s.runs_on_cpu) for kind in OPERATOR_KINDS}
"""Strategies whose spec serves the kind with executors that run on CPU ranks too (``tile_fused`` needs GPUs)."""
PIPELINED = tuple(s.name for s in specs() if s.pipelined)
"""Strategies measured at several chunk counts (their spec's ``pipelined``); the rings and the rest run once."""
DEFAULT_CHUNKS = (2, 4)


def bench_plans(kind: str, *, strategies: tuple[str, ...] | None = None,
                chunks: tuple[int, ...] = DEFAULT_CHUNKS) -> tuple[Plan, ...]:
    """``sequential`` first (every score needs it), then each requested strategy.

    ``strategies=None`` (or ``("all",)``) means every strategy with a lowering for ``kind``.
    """
    if kind not in BENCH_STRATEGIES:
        raise ValueError(f"kind={kind!r} cannot be benchmarked; use one of {sorted(BENCH_STRATEGIES)}")
    available = BENCH_STRATEGIES[kind]
    wanted = available if strategies is None or tuple(strategies) == ("all",) else tuple(strategies)
    unknown = [s for s in wanted if s not in STRATEGIES]
    if unknown:
        raise ValueError(f"strategy {unknown} is unknown; use 'all' or some of {available}")
    unsupported = [s for s in wanted if s not in available]
    if unsupported:
        raise ValueError(f"strategy {unsupported} has no {kind} lowering here; use some of {available}")
    if not chunks or any(not isinstance(c, int) or c < 1 for c in chunks):
        raise ValueError(f"chunks={chunks!r} must be one or more ints >= 1, e.g. --chunks 2 4 8")
    plans = [Plan()]
    for strategy in wanted:
        if strategy == plans[0].strategy:  # the baseline, already first
            continue
        counts = sorted(set(chunks)) if spec(strategy).pipelined else [1]
        plans.extend(Plan(strategy=strategy, chunks=c) for c in counts)
    return tuple(plans)

"""The executors hocket's operators run, registered against a strategy spec's name
(:mod:`hocket.strategies`): ``register_executor("chunked", "ag_mm", fn)``.

The lowering modules (:mod:`hocket.ops.lowering`) register the collective operators' executors and
:mod:`hocket.ops.offload` the offload operators'; a name without a spec, or a kind the spec does not
serve, is refused. :func:`supported` (which strategies have an executor for a kind) is what the live
planner and the operators' plan check read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hocket.strategies import OPERATOR_KINDS, spec, specs

OP_NAMES = {"ag_mm": "all_gather_matmul", "mm_rs": "matmul_reduce_scatter", "mm_ar": "matmul_all_reduce",
            "h2d_mm": "matmul_from_host", "mm_d2h": "matmul_to_host", "halo": "stencil_steps",
            "a2a_mm": "all_to_all_grouped_mm", "mm_a2a": "grouped_mm_all_to_all"}

_EXECUTORS: dict[tuple[str, str], Callable] = {}


def register_executor(name: str, kind: str, fn: Callable) -> None:
    """Make ``fn`` the executor of strategy ``name`` for site ``kind`` (replacing an earlier one)."""
    found = spec(name)  # raises for a name without a spec
    if kind not in found.kinds:
        raise ValueError(f"strategy {name!r} does not serve {kind} (its spec serves {found.kinds}); "
                         f"add the kind to its StrategySpec.kinds first")
    if not callable(fn):
        raise TypeError(f"the executor of ({name!r}, {kind!r}) must be callable, got {fn!r}")
    _EXECUTORS[(kind, name)] = fn


def register_executors(name: str, table: Mapping[str, Callable]) -> None:
    """:func:`register_executor` for every ``kind -> fn`` of ``table`` (a lowering module's ``EXECUTORS``)."""
    for kind, fn in table.items():
        register_executor(name, kind, fn)


def registered() -> dict[tuple[str, str], Callable]:
    """A copy of the table: ``(kind, strategy) -> executor``."""
    return dict(_EXECUTORS)


def supported(kind: str) -> tuple[str, ...]:
    """Strategies with an executor for ``kind``, in ``hocket.core.plan.STRATEGIES`` order."""
    return tuple(s.name for s in specs() if (kind, s.name) in _EXECUTORS)


def supported_table() -> dict[str, tuple[str, ...]]:
    """``kind -> supported(kind)`` for the collective operators (what ``plan=None`` calls choose among)."""
    return {kind: supported(kind) for kind in OPERATOR_KINDS}


def executor_for(kind: str, strategy: str) -> Callable:
    fn = _EXECUTORS.get((kind, strategy))
    if fn is None:
        raise ValueError(f"plan strategy {strategy!r} is not available for {OP_NAMES.get(kind, kind)} ({kind}); "
                         f"it supports {supported(kind)}")
    return fn

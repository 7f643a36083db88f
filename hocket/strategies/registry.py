"""The strategy registry: one :class:`~hocket.strategies.spec.StrategySpec` per strategy name.

``hocket.strategies`` registers the built-in specs (one per name of :data:`hocket.core.plan.STRATEGIES`,
in that order) into :data:`REGISTRY` when it is imported; the module-level functions read and extend
it. A :class:`Registry` of one's own (``Registry()``) starts empty, e.g. to try a spec apart.
"""

from __future__ import annotations

from hocket.core.plan import STRATEGIES
from hocket.strategies.spec import StrategySpec


class Registry:
    """Specs by name, in registration order."""

    def __init__(self) -> None:
        self._specs: dict[str, StrategySpec] = {}

    def register(self, spec: StrategySpec, *, replace: bool = False) -> StrategySpec:
        """Add ``spec``; a second spec of the same name is an error unless ``replace``."""
        if not isinstance(spec, StrategySpec):
            raise TypeError(f"spec={spec!r} must be a hocket.strategies.StrategySpec")
        if spec.name in self._specs and not replace:
            raise ValueError(f"strategy {spec.name!r} already has a spec; pass replace=True to replace it")
        self._specs[spec.name] = spec
        return spec

    def spec(self, name: str) -> StrategySpec:
        """The spec of strategy ``name``; an unknown name is an error listing the known ones."""
        found = self._specs.get(name)
        if found is None:
            raise ValueError(f"strategy {name!r} has no spec; known strategies: {tuple(self._specs)}")
        return found

    def specs(self) -> tuple[StrategySpec, ...]:
        """Every spec, in :data:`hocket.core.plan.STRATEGIES` order (then registration order)."""
        rank = {name: i for i, name in enumerate(STRATEGIES)}
        return tuple(sorted(self._specs.values(), key=lambda s: rank.get(s.name, len(rank))))

    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.specs())

    def strategies_for(self, kind: str) -> tuple[str, ...]:
        """Names of the strategies that serve site ``kind`` (an executor runs it)."""
        return tuple(s.name for s in self.specs() if kind in s.kinds)

    def priced_for(self, kind: str) -> tuple[str, ...]:
        """Names of the strategies whose cost builder prices site ``kind``."""
        return tuple(s.name for s in self.specs() if kind in s.priced)

    def planned_for(self, kind: str) -> tuple[str, ...]:
        """Names of the strategies the plan space enumerates for site ``kind``."""
        return tuple(s.name for s in self.specs() if kind in s.planned_kinds)


REGISTRY = Registry()
"""The process's registry (the built-in specs, and any :func:`register_spec` adds)."""


def register_spec(spec: StrategySpec, *, replace: bool = False) -> StrategySpec:
    """Add ``spec`` to :data:`REGISTRY` (see :meth:`Registry.register`)."""
    return REGISTRY.register(spec, replace=replace)


def spec(name: str) -> StrategySpec:
    """The spec of strategy ``name`` in :data:`REGISTRY`."""
    return REGISTRY.spec(name)


def specs() -> tuple[StrategySpec, ...]:
    """Every spec of :data:`REGISTRY`, in ``STRATEGIES`` order."""
    return REGISTRY.specs()


def strategies_for(kind: str) -> tuple[str, ...]:
    """Names of the strategies that serve site ``kind``."""
    return REGISTRY.strategies_for(kind)


def priced_for(kind: str) -> tuple[str, ...]:
    """Names of the strategies the cost model prices for site ``kind``."""
    return REGISTRY.priced_for(kind)


def planned_for(kind: str) -> tuple[str, ...]:
    """Names of the strategies the plan space enumerates for site ``kind``."""
    return REGISTRY.planned_for(kind)

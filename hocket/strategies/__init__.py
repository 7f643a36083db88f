"""hocket.strategies: one spec per strategy, and the registry that holds them (plain Python: no
torch.distributed, no Triton, no transport or operator code).

A :class:`StrategySpec` says which site kinds a strategy serves, how the plan space enumerates it, how
the cost model prices it (its cost builder over :class:`hocket.cost.builder.StageBuilder`), its extra
memory and whether a CUDA graph captures it. Executors in :mod:`hocket.ops` register against a spec's
name. :func:`predict` / :func:`pipeline_stages` price a plan with its spec's cost builder. Importing the
package registers the built-in specs, one per name of :data:`hocket.core.plan.STRATEGIES`.
"""

from hocket.strategies import bidir_ring, bulk, chunked, halo, moe, ring, sequential, substituted, tile_fused
from hocket.strategies.pricing import pipeline_stages, predict
from hocket.strategies.registry import (
    REGISTRY,
    Registry,
    planned_for,
    priced_for,
    register_spec,
    spec,
    specs,
    strategies_for,
)
from hocket.strategies.spec import OFFLOAD_KINDS, OPERATOR_KINDS, StrategySpec

for _module in (sequential, bulk, chunked, ring, bidir_ring, tile_fused, substituted):
    register_spec(_module.SPEC)
del _module
register_spec(halo.OVERLAP_SPEC)  # the halo-exchange stencil strategies (site kind halo)
register_spec(halo.DEEP_HALO_SPEC)
for _spec in moe.SPECS:  # the expert-parallel MoE strategies (site kinds a2a_mm, mm_a2a)
    register_spec(_spec)
del _spec

__all__ = [
    "OFFLOAD_KINDS", "OPERATOR_KINDS", "REGISTRY", "Registry", "StrategySpec", "pipeline_stages", "planned_for",
    "predict", "priced_for", "register_spec", "spec", "specs", "strategies_for",
]

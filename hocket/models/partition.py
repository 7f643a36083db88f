"""Pipeline partitioning: how many layers each stage holds (uneven allowed).

``auto`` balances each stage's work over its devices' speed: a stage's time is
``(layers * layer_cost + extra) / speed`` where ``extra`` is its embedding or LM head
(in the same FLOP units) and ``speed`` the slowest device's dense peak in the stage.
Solving for equal stage times and rounding by largest remainder (at least one layer per
stage) gives the split; identical devices and no extras give an even split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def balance_layers(layers: int, speeds: Sequence[float], extras: Sequence[float], layer_cost: float) -> list[int]:
    """Layers per stage so that ``(L_s * layer_cost + extras[s]) / speeds[s]`` is as equal as possible."""
    stages = len(speeds)
    if stages < 1:
        raise ValueError("pp must be >= 1")
    if layers < stages:
        raise ValueError(f"pp={stages} stages need at least one layer each but the model has {layers} layers; "
                         f"use pp <= {layers}")
    if any(not (s > 0 and math.isfinite(s)) for s in speeds):
        raise ValueError(f"stage speeds {list(speeds)} must be positive")
    if layer_cost <= 0:
        raise ValueError(f"layer_cost={layer_cost} must be positive")
    total_speed = sum(speeds)
    target = (layers * layer_cost + sum(extras)) / total_speed
    ideal = [max(1.0, (target * s - e) / layer_cost) for s, e in zip(speeds, extras)]
    spare = sum(x - 1.0 for x in ideal)
    scale = (layers - stages) / spare if spare > 0 else 0.0
    ideal = [1.0 + (x - 1.0) * scale for x in ideal]  # clamped at 1, rescaled to sum to ``layers``
    floors = [max(1, int(math.floor(x))) for x in ideal]
    short = layers - sum(floors)
    order = sorted(range(stages), key=lambda i: ideal[i] - floors[i], reverse=True)
    i = 0
    while short > 0:
        floors[order[i % stages]] += 1
        short -= 1
        i += 1
    while short < 0:  # only when rounding up to 1 overshot: take from the largest stages
        j = max(range(stages), key=lambda s: floors[s])
        floors[j] -= 1
        short += 1
    return floors


def check_stage_layers(stage_layers: Sequence[int], layers: int, pp: int) -> list[int]:
    values = list(stage_layers)
    if len(values) != pp:
        raise ValueError(f"stages lists {len(values)} stages but pp={pp}; give one layer count per stage")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"stages[{i}]={v!r} must be an int >= 1 (layers on that stage)")
    if sum(values) != layers:
        raise ValueError(f"stages {values} hold {sum(values)} layers but the model has {layers}; "
                         f"make them sum to {layers}")
    return values

"""The 1F1B pipeline schedule (PipeDream-flush / Megatron non-interleaved).

Stage ``s`` of ``p`` stages runs ``min(p - s - 1, m)`` warm-up forwards, then alternates
one forward and one backward until every forward is issued, then drains the remaining
backwards. Every microbatch's forward on a stage needs its forward on the previous
stage; every backward needs the backward on the next stage and its own forward.
"""

from __future__ import annotations

from collections.abc import Iterator


def _check(num_stages: int, num_microbatches: int) -> None:
    for arg, value in (("num_stages", num_stages), ("num_microbatches", num_microbatches)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{arg}={value!r} must be an int >= 1")


def stage_order(num_stages: int, num_microbatches: int, stage: int) -> list[tuple[str, int]]:
    """The ops stage ``stage`` issues, in order: ``("F", mb)`` and ``("B", mb)``."""
    _check(num_stages, num_microbatches)
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < num_stages:
        raise ValueError(f"stage={stage!r} must be in 0..{num_stages - 1}")
    warmup = min(num_stages - stage - 1, num_microbatches)
    ops: list[tuple[str, int]] = [("F", i) for i in range(warmup)]
    fwd, bwd = warmup, 0
    while fwd < num_microbatches:
        ops.append(("F", fwd))
        fwd += 1
        ops.append(("B", bwd))
        bwd += 1
    ops.extend(("B", i) for i in range(bwd, num_microbatches))
    return ops


def global_order(num_stages: int, num_microbatches: int) -> Iterator[tuple[int, str, int]]:
    """All ``(stage, op, mb)`` in an order that respects every stage's 1F1B order and the
    cross-stage dependencies (a topological order), so tasks can be added in it."""
    _check(num_stages, num_microbatches)
    orders = [stage_order(num_stages, num_microbatches, s) for s in range(num_stages)]
    pos = [0] * num_stages
    emitted: set[tuple[int, str, int]] = set()
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(num_stages):
            while pos[s] < len(orders[s]):
                op, mb = orders[s][pos[s]]
                if op == "F":
                    ready = s == 0 or (s - 1, "F", mb) in emitted
                else:
                    ready = (s, "F", mb) in emitted and (s == num_stages - 1 or (s + 1, "B", mb) in emitted)
                if not ready:
                    break
                emitted.add((s, op, mb))
                yield s, op, mb
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # 1F1B is deadlock-free; this guards the invariant
            raise RuntimeError("1F1B order could not progress; the schedule generator is broken")

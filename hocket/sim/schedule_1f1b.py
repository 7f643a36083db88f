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


# -- interleaved 1F1B (virtual stages) ----------------------------------------------------------------------
def interleaved_stage_order(num_stages: int, num_microbatches: int, stage: int,
                            chunks: int) -> list[tuple[str, int, int]]:
    """The ops device stage ``stage`` issues under interleaved 1F1B (Narayanan et al., SC'21, the Megatron-LM
    schedule): ``("F" | "B", mb, chunk)``. The model is cut into ``num_stages * chunks`` virtual stages and
    virtual stage ``chunk * num_stages + stage`` lives on device stage ``stage``.

    Rules: ``num_microbatches`` must be a multiple of ``num_stages``; forwards are issued in groups of
    ``num_stages`` micro-batches per chunk (chunk ``(k // p) % v`` for the k-th forward), backwards likewise with
    the chunks reversed; a device runs ``2 * (p - stage - 1) + (v - 1) * p`` warm-up forwards (all of them when
    that reaches ``m * v``), then alternates one forward and one backward, then drains. ``chunks == 1`` is plain
    1F1B. The pipeline bubble is ``(p - 1) / v`` micro-batch slots of one device stage instead of ``p - 1``.
    """
    _check(num_stages, num_microbatches)
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks={chunks!r} must be an int >= 1 (virtual stages per device)")
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < num_stages:
        raise ValueError(f"stage={stage!r} must be in 0..{num_stages - 1}")
    if chunks == 1:
        return [(op, mb, 0) for op, mb in stage_order(num_stages, num_microbatches, stage)]
    p, m, v = num_stages, num_microbatches, chunks
    if m % p:
        raise ValueError(f"interleaved 1F1B needs micro-batches ({m}) to be a multiple of the stages ({p})")
    total = m * v

    def forward(k: int) -> tuple[str, int, int]:
        return "F", (k // (p * v)) * p + k % p, (k // p) % v

    def backward(k: int) -> tuple[str, int, int]:
        return "B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v

    warmup = min(2 * (p - stage - 1) + (v - 1) * p, total)
    ops = [forward(k) for k in range(warmup)]
    f, b = warmup, 0
    while f < total:
        ops.append(forward(f))
        f += 1
        ops.append(backward(b))
        b += 1
    ops.extend(backward(k) for k in range(b, total))
    return ops


def interleaved_global_order(num_stages: int, num_microbatches: int,
                             chunks: int) -> Iterator[tuple[int, str, int, int]]:
    """All ``(stage, op, mb, chunk)`` of the interleaved schedule in a topological order: a forward of
    virtual stage ``j`` needs that micro-batch's forward on ``j - 1``; a backward needs its own forward and
    the backward on ``j + 1``."""
    p, v = num_stages, chunks
    orders = [interleaved_stage_order(p, num_microbatches, s, v) for s in range(p)]
    last = p * v - 1
    pos = [0] * p
    emitted: set[tuple[str, int, int]] = set()
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                op, mb, chunk = orders[s][pos[s]]
                j = chunk * p + s
                if op == "F":
                    ready = j == 0 or ("F", j - 1, mb) in emitted
                else:
                    ready = ("F", j, mb) in emitted and (j == last or ("B", j + 1, mb) in emitted)
                if not ready:
                    break
                emitted.add((op, j, mb))
                yield s, op, mb, chunk
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("interleaved 1F1B order could not progress; the schedule generator is broken")


def bubble_slots(num_stages: int, chunks: int = 1) -> float:
    """Idle micro-batch slots (of one device stage's forward + backward) a 1F1B step adds: ``(p - 1) / v``."""
    return (num_stages - 1) / chunks


def makespan_slots(num_stages: int, num_microbatches: int, chunks: int = 1) -> float:
    """Step length in slots of one device stage's forward+backward of one micro-batch, for equal stages and
    forward = backward / 2 ignored (the bubble formula): ``m + (p - 1) / v``. A unit-time replay of the
    order (:func:`replay_slots`) checks it."""
    return num_microbatches + bubble_slots(num_stages, chunks)


def replay_slots(num_stages: int, num_microbatches: int, chunks: int = 1, *, forward: float = 1.0,
                 backward: float = 2.0) -> float:
    """Replay the (interleaved) schedule with every virtual stage's forward taking ``forward / chunks`` and
    backward ``backward / chunks`` time units, communication free; returns the makespan."""
    done: dict[tuple[str, int, int], float] = {}
    free = [0.0] * num_stages
    p = num_stages
    for s, op, mb, chunk in interleaved_global_order(p, num_microbatches, chunks):
        j = chunk * p + s
        if op == "F":
            ready = done.get(("F", j - 1, mb), 0.0)
            length = forward / chunks
        else:
            ready = max(done[("F", j, mb)], done.get(("B", j + 1, mb), 0.0))
            length = backward / chunks
        start = max(ready, free[s])
        free[s] = done[(op, j, mb)] = start + length
    return max(free)

"""1F1B pipeline schedule: per-stage order and the global topological order."""

from __future__ import annotations

import random

import pytest

from hocket.sim.schedule_1f1b import global_order, stage_order


def test_stage_order_is_1f1b():
    rng = random.Random()
    p, m = rng.randint(2, 12), rng.randint(1, 24)
    for s in range(p):
        ops = stage_order(p, m, s)
        assert sorted(ops) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
        warmup = min(p - s - 1, m)
        assert all(op == "F" for op, _ in ops[:warmup])
        assert [mb for op, mb in ops if op == "F"] == list(range(m))
        assert [mb for op, mb in ops if op == "B"] == list(range(m))
        for i in range(m):
            assert ops.index(("F", i)) < ops.index(("B", i))
        # in flight activations never exceed the warm-up depth + 1
        live = peak = 0
        for op, _ in ops:
            live += 1 if op == "F" else -1
            peak = max(peak, live)
        assert peak == min(p - s, m)


def test_global_order_is_topological_and_keeps_stage_order():
    rng = random.Random()
    p, m = rng.randint(1, 10), rng.randint(1, 20)
    seen = set()
    per_stage = {s: [] for s in range(p)}
    for s, op, mb in global_order(p, m):
        if op == "F" and s > 0:
            assert (s - 1, "F", mb) in seen
        if op == "B":
            assert (s, "F", mb) in seen
            if s < p - 1:
                assert (s + 1, "B", mb) in seen
        seen.add((s, op, mb))
        per_stage[s].append((op, mb))
    for s in range(p):
        assert per_stage[s] == stage_order(p, m, s)


@pytest.mark.parametrize("args, match", [((0, 4, 0), "num_stages"), ((4, 0, 0), "num_microbatches"),
                                         ((4, 4, 4), "stage")])
def test_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        stage_order(*args)

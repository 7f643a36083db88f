"""The eager fast path gives the custom op's results bit for bit on 2 and 4 gloo ranks, every strategy."""

from __future__ import annotations

import random

import pytest

from hocket.ops.executors import supported_table
from _eager_cases import compare_paths

SUPPORTED = supported_table()

STRATEGIES = sorted(set(SUPPORTED["ag_mm"]) & set(SUPPORTED["mm_rs"]) & set(SUPPORTED["mm_ar"]))


@pytest.mark.parametrize("plan", STRATEGIES)
def test_fast_path_equals_custom_op(pool, plan):
    rng = random.Random()
    case = dict(plan=plan, seed=rng.randrange(2**30), m=rng.randint(1, 6), k=rng.randint(1, 9), n=rng.randint(1, 7))
    counts = pool.run(compare_paths, case)
    assert counts == [5] * pool.world_size  # 1 ag_mm + 2 mm_rs + 2 mm_ar calls, all on the direct path

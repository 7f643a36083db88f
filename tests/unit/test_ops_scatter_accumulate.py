"""ScatterMatmul.accumulate: a destination block's partial added into ``out`` by the GEMM itself
(``addmm_``), for row and column scatters, equal to computing the partial and adding it."""

from __future__ import annotations

import random

import pytest
import torch

from hocket.ops.lowering.problems import ScatterMatmul


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_accumulate_equals_partial_plus_out(dim):
    rng = random.Random()
    world = rng.choice([2, 3, 4])
    lead = [rng.randint(1, 3) * world, rng.randint(2, 5) * world]
    k, n = rng.randint(3, 17), rng.randint(2, 6) * world
    A = torch.randn(*lead, k, dtype=torch.float64)
    B = torch.randn(k, n, dtype=torch.float64)
    s = ScatterMatmul(A, B, dim % A.dim(), world)
    assert s.k == k
    b = rng.randrange(world)
    lo = rng.randrange(s.rows)
    hi = rng.randint(lo + 1, s.rows)
    expected = torch.empty(hi - lo, s.cols, dtype=torch.float64)
    s.partial(b, lo, hi, expected)
    start = torch.randn(hi - lo, s.cols, dtype=torch.float64)
    out = start.clone()
    s.accumulate(b, lo, hi, out)
    torch.testing.assert_close(out, start + expected)

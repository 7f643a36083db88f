"""Gradients of the three operators (A and every B) against autograd over all ranks in one process:
every strategy family, gather/scatter dims incl. the last, save_gathered on/off, the returned A in the loss."""

from __future__ import annotations

import pytest

from _ops_grads import grads_sweep


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gradients_match_reference(pool, dtype):
    counts = pool.run(grads_sweep, dtype, 5)
    assert len(set(counts)) == 1 and counts[0] > 100

"""Layout helpers: round trips keep values and give row-major strides (size-1 dims included)."""

import itertools

import pytest
import torch

from hocket.ops._layout import dense, from_rows_first, rows_first


@pytest.mark.parametrize("shape", [(1, 2, 1), (3, 1, 1), (1, 1, 5), (2, 3, 4), (1, 4)])
def test_rows_first_round_trip_is_row_major(shape):
    t = torch.randn(shape)
    for dim in range(len(shape)):
        back = from_rows_first(rows_first(t, dim), list(shape), dim)
        assert torch.equal(back, t)
        assert back.stride() == torch.empty(shape).stride(), (shape, dim)


def test_dense_fixes_strides_of_size_one_dims_and_keeps_values():
    for perm in itertools.permutations(range(3)):
        t = torch.randn(2, 1, 3).permute(perm)
        d = dense(t)
        assert torch.equal(d, t) and d.stride() == torch.empty(t.shape).stride()
    already = torch.randn(4, 5)
    assert dense(already) is already

"""Local input checks: each bad input raises ValueError/TypeError naming the argument and the fix."""

from __future__ import annotations

import pytest
import torch

from hocket.ops.validation import (
    check_all_gather_matmul,
    check_matmul_all_reduce,
    check_matmul_reduce_scatter,
)


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


def test_good_inputs_return_normalised_dims():
    assert check_all_gather_matmul(r(4, 8), [r(8, 3)], 0, 2) == 0
    assert check_all_gather_matmul(r(2, 4, 8), [r(16, 3)], -1, 2) == 2
    assert check_matmul_reduce_scatter(r(4, 8), r(8, 6), "avg", -1, 2) == 1
    check_matmul_all_reduce(r(3, 8), r(8, 5), "sum")


@pytest.mark.parametrize("call, exc, words", [
    (lambda: check_all_gather_matmul(r(4, 8), [r(7, 3)], 0, 2), ValueError, ["Bs[0]", "(7, 3)", "[8, N]"]),
    (lambda: check_all_gather_matmul(r(4, 8), [r(8, 3)], 1, 2), ValueError, ["K=16", "[16, N]"]),
    (lambda: check_all_gather_matmul(r(4, 8), [], 0, 2), ValueError, ["Bs is empty", "Bs=[B]"]),
    (lambda: check_all_gather_matmul(r(4, 8), r(8, 3), 0, 2), TypeError, ["Bs must be a list", "[B]"]),
    (lambda: check_all_gather_matmul(r(4, 8), [r(8, 3)], 2, 2), ValueError, ["gather_dim=2", "0..1"]),
    (lambda: check_all_gather_matmul(r(4, 8), [r(8, 3, dtype=torch.bfloat16)], 0, 2), ValueError,
     ["Bs[0].dtype", "A_shard.dtype"]),
    (lambda: check_all_gather_matmul(r(8), [r(8, 3)], 0, 2), ValueError, ["A_shard", "at least 2"]),
    (lambda: check_all_gather_matmul(r(0, 8), [r(8, 3)], 0, 2), ValueError, ["zero-size"]),
    (lambda: check_all_gather_matmul("x", [r(8, 3)], 0, 2), TypeError, ["A_shard must be a torch.Tensor"]),
    (lambda: check_all_gather_matmul(r(4, 8), [r(8, 3)], 0.0, 2), TypeError, ["gather_dim must be an int"]),
    (lambda: check_matmul_reduce_scatter(r(5, 8), r(8, 6), "sum", 0, 2), ValueError,
     ["scatter_dim=0", "(5, 6)", "not divisible", "2"]),
    (lambda: check_matmul_reduce_scatter(r(4, 8), r(9, 6), "sum", 0, 2), ValueError, ["K mismatch", "(9, 6)"]),
    (lambda: check_matmul_reduce_scatter(r(4, 8), r(8, 6), "max", 0, 2), ValueError, ["reduce_op='max'", "avg"]),
    (lambda: check_matmul_reduce_scatter(r(4, 8), r(8, 6), "sum", 2, 2), ValueError, ["scatter_dim=2"]),
    (lambda: check_matmul_reduce_scatter(r(4, 8), r(8, 6, 1), "sum", 0, 2), ValueError, ["B must have exactly 2"]),
    (lambda: check_matmul_all_reduce(r(4, 8), r(8, 6, dtype=torch.float64), "sum"), ValueError, ["B.dtype"]),
    (lambda: check_matmul_all_reduce(r(4, 8).to(torch.int32), r(8, 6), "sum"), ValueError, ["A.dtype", "int32"]),
])
def test_bad_inputs_name_argument_and_fix(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device for a device mismatch")
def test_device_mismatch():
    with pytest.raises(ValueError, match="move both to one device"):
        check_matmul_all_reduce(r(4, 8), r(8, 6).cuda(), "sum")

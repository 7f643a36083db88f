"""A small piece's GEMM split along k: the rule and the numerics against torch.mm (CPU here)."""

import pytest
import torch

from hocket.ops.split_k import MAX_PARTS, MIN_K_PER_PART, split_k_mm, split_k_parts


@pytest.mark.parametrize("m,n,k,sms,parts", [
    (128, 7168, 8192, 132, 4),    # 28 tiles: 4 slices fill 112 SMs
    (256, 7168, 8192, 132, 2),    # 56 tiles
    (512, 7168, 8192, 132, 1),    # 112 tiles: one wave already
    (128, 1280, 8192, 132, 8),    # 5 tiles, capped at MAX_PARTS
    (128, 8192, 3584, 132, 4),    # k/4 = 896 >= MIN_K_PER_PART
    (128, 8192, 1024, 132, 2),    # k/4 = 256 is too short a slice
    (128, 8192, 1000, 132, 1),    # 1000 / 2 = 500 is too short a slice
    (128, 8192, 3002, 132, 2),    # 3002 / 4 does not divide
    (128, 7168, 8192, None, 1),   # a CPU: no SMs
])
def test_parts_rule(m, n, k, sms, parts):
    got = split_k_parts(m, n, k, sms)
    assert got == parts
    assert 1 <= got <= MAX_PARTS and k % got == 0 and (got == 1 or k // got >= MIN_K_PER_PART)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_parts_rule_rejects_bad_dims(bad):
    with pytest.raises(ValueError, match="must be a positive int"):
        split_k_parts(bad, 8, 8, 132)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,k,n,parts", [
    (128, 1024, 96, 4), (37, 600, 50, 2), (5, 64, 3, 8),
    (16, 100, 8, 3),  # k=100 does not split in 3: plain mm
])
def test_matches_mm(dtype, m, k, n, parts):
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    out = torch.full((m, n), float("nan"), dtype=dtype)
    split_k_mm(a, b, out, parts)
    ref = torch.mm(a.double(), b.double())
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    assert torch.isfinite(out).all()
    assert float((out.double() - ref).abs().max()) <= tol * float(ref.abs().max())


def test_writes_into_a_row_slice_of_a_larger_buffer():
    a, b = torch.randn(64, 512), torch.randn(512, 40)
    big = torch.full((100, 40), float("nan"))
    split_k_mm(a, b, big[10:74], 4)
    assert torch.allclose(big[10:74], a @ b, rtol=1e-4, atol=1e-4)
    assert big[:10].isnan().all() and big[74:].isnan().all()


def test_strided_operands():
    a = torch.randn(512, 64).t()  # [64, 512], column-major
    b = torch.randn(40, 512).t()
    out = torch.empty(64, 40)
    split_k_mm(a, b, out, 4)
    assert torch.allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_bad_shapes_named():
    with pytest.raises(ValueError, match=r"must be \[m, k\] and \[k, n\]"):
        split_k_mm(torch.randn(4, 8), torch.randn(7, 2), torch.empty(4, 2), 2)
    with pytest.raises(ValueError, match=r"out is \(4, 3\); it must be \[4, 2\]"):
        split_k_mm(torch.randn(4, 8), torch.randn(8, 2), torch.empty(4, 3), 2)
    with pytest.raises(ValueError, match="parts=0"):
        split_k_mm(torch.randn(4, 8), torch.randn(8, 2), torch.empty(4, 2), 0)

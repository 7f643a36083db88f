"""``hocket.ops.grouped_mm``: both backends against a loop of matmuls, empty groups, zeroed tail rows, and
gradients of x and w."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hocket.ops.grouped_mm import GROUPED, LOOP, grouped_mm, grouped_mm_backend, grouped_wgrad


def _reference(x, w, ends):
    out = torch.zeros(x.shape[0], w.shape[2], dtype=torch.float64)
    start = 0
    for e, end in enumerate(ends):
        out[start:end] = x[start:end].double() @ w[e].double()
        start = end
    return out


TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2, torch.float16: 3e-3, torch.float64: 1e-12}


@settings(max_examples=40, deadline=None)
@given(groups=st.integers(1, 5), k=st.sampled_from([3, 8, 16]), n=st.sampled_from([5, 8, 16]),
       sizes=st.lists(st.integers(0, 6), min_size=5, max_size=5), tail=st.integers(0, 3),
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16, torch.float64]), seed=st.integers(0, 99))
def test_matches_a_loop_of_matmuls(groups, k, n, sizes, tail, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    ends = torch.cumsum(torch.tensor(sizes[:groups]), 0)
    rows = int(ends[-1]) + tail
    x = torch.randn(rows, k, generator=gen).to(dtype)
    w = torch.randn(groups, k, n, generator=gen).to(dtype)
    x[int(ends[-1]):] = float("nan")  # rows past offs[-1] must come back zero whatever they hold
    got = grouped_mm(x, w, ends.to(torch.int32))
    want = _reference(x, w, ends.tolist())
    assert got.shape == (rows, n) and got.dtype == dtype
    assert torch.equal(got[int(ends[-1]):], torch.zeros_like(got[int(ends[-1]):]))
    scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
    diff = (got[:int(ends[-1])].double() - want[:int(ends[-1])]).abs()
    assert diff.numel() == 0 or float(diff.max()) <= TOL[dtype] * scale * k


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("k, n", [(8, 16), (3, 5)])
def test_gradients_of_x_and_w(dtype, k, n):
    gen = torch.Generator().manual_seed(0)
    offs = torch.tensor([2, 2, 7], dtype=torch.int32)
    x = torch.randn(9, k, generator=gen).to(dtype).requires_grad_()
    w = torch.randn(3, k, n, generator=gen).to(dtype).requires_grad_()
    grouped_mm(x, w, offs).sum().backward()  # sum's gradient is stride 0: made contiguous on the way
    xr = x.detach().double().requires_grad_()
    wr = w.detach().double().requires_grad_()
    out = torch.cat([xr[0:2] @ wr[0], xr[2:2] @ wr[1], xr[2:7] @ wr[2], torch.zeros(2, n, dtype=torch.float64)])
    out.sum().backward()
    tol = TOL[dtype] * 10
    assert float((x.grad.double() - xr.grad).abs().max()) <= tol * max(1.0, float(xr.grad.abs().max()))
    assert float((w.grad.double() - wr.grad).abs().max()) <= tol * max(1.0, float(wr.grad.abs().max()))
    assert torch.equal(x.grad[7:], torch.zeros_like(x.grad[7:]))


def test_weight_gradient_helper():
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(9, 8, generator=gen), torch.randn(9, 16, generator=gen)
    offs = torch.tensor([3, 3, 8], dtype=torch.int32)
    got = grouped_wgrad(a, b, offs)
    want = torch.stack([a[0:3].t() @ b[0:3], torch.zeros(8, 16), a[3:8].t() @ b[3:8]])
    assert torch.allclose(got, want, atol=1e-5)
    odd = grouped_wgrad(a[:, :3], b[:, :5], offs)  # unaligned: the loop
    assert torch.allclose(odd, want[:, :3, :5], atol=1e-5)


def test_backend_probe_and_errors():
    assert grouped_mm_backend("cpu", torch.float64) == LOOP  # CPU _grouped_mm has no float64
    expected = GROUPED if hasattr(torch, "_grouped_mm") else LOOP
    assert grouped_mm_backend("cpu", torch.float32) == expected
    with pytest.raises(ValueError, match="offs must be int32"):
        grouped_mm(torch.randn(4, 8), torch.randn(2, 8, 8), torch.tensor([2, 4]))
    with pytest.raises(ValueError, match="w must be \\[E, 8, n\\]"):
        grouped_mm(torch.randn(4, 8), torch.randn(2, 6, 8), torch.tensor([2, 4], dtype=torch.int32))


def test_zero_rows():
    x = torch.zeros(0, 8, requires_grad=True)
    w = torch.randn(2, 8, 8, requires_grad=True)
    y = grouped_mm(x, w, torch.zeros(2, dtype=torch.int32))
    assert y.shape == (0, 8)
    y.sum().backward()
    assert torch.equal(w.grad, torch.zeros_like(w))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("host_ends", [True, False])
def test_weight_gradient_accumulates_into_out(dtype, host_ends):
    """``out=``: the products are added to what ``out`` holds (inside the GEMMs with host ``ends`` on the CPU,
    by one add otherwise), empty groups and rows past ``offs[-1]`` adding nothing."""
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(11, 8, generator=gen).to(dtype), torch.randn(11, 16, generator=gen).to(dtype)
    offs = torch.tensor([4, 4, 9], dtype=torch.int32)
    before = torch.randn(3, 8, 16, generator=gen).to(dtype)
    got = grouped_wgrad(a, b, offs, out=before.clone(), ends=tuple(offs.tolist()) if host_ends else None)
    ad, bd = a.double(), b.double()
    want = before.double() + torch.stack([ad[0:4].t() @ bd[0:4], torch.zeros(8, 16, dtype=torch.float64),
                                          ad[4:9].t() @ bd[4:9]])
    assert float((got.double() - want).abs().max()) <= TOL[dtype] * 8 * float(want.abs().max())
    with pytest.raises(ValueError, match="out has shape"):
        grouped_wgrad(a, b, offs, out=torch.zeros(2, 8, 16, dtype=dtype))

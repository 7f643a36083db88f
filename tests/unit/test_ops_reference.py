"""Reference semantics (one process, every rank's inputs) against plain torch, and layout helpers."""

from __future__ import annotations

import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hocket.ops._layout import from_rows_first, merge_rank_axis, rows_first, split_rank_axis
from hocket.ops.reference import (
    all_gather_matmul_global,
    matmul_all_reduce_global,
    matmul_reduce_scatter_global,
)


def _rand(gen, *shape, dtype=torch.float64):
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


@st.composite
def gather_cases(draw):
    ndim = draw(st.integers(2, 4))
    shape = [draw(st.integers(1, 4)) for _ in range(ndim)]
    return dict(shape=shape, dim=draw(st.integers(0, ndim - 1)), world=draw(st.integers(1, 4)),
                n=draw(st.integers(1, 5)), seed=draw(st.integers(0, 2**31)))


@settings(max_examples=40, deadline=None)
@given(gather_cases())
def test_all_gather_matmul_global_is_concat_then_matmul_elementwise(case):
    gen = torch.Generator().manual_seed(case["seed"])
    w, dim, shape = case["world"], case["dim"], case["shape"]
    shards = [_rand(gen, *shape) for _ in range(w)]
    K = shape[-1] * (w if dim == len(shape) - 1 else 1)
    B = _rand(gen, K, case["n"])
    A, (out,) = all_gather_matmul_global(shards, [B], dim)
    # the gathered A: index i along dim belongs to rank i // shard_size
    size = shape[dim]
    for r, shard in enumerate(shards):
        idx = torch.arange(r * size, (r + 1) * size)
        torch.testing.assert_close(A.index_select(dim, idx), shard)
    # out = A @ B computed element by element from the definition
    flatA = A.reshape(-1, A.shape[-1])
    torch.testing.assert_close(out.reshape(-1, case["n"]), torch.einsum("ik,kn->in", flatA, B))
    assert out.shape == (*A.shape[:-1], case["n"]) and out.is_contiguous()
    none, _ = all_gather_matmul_global(shards, [B], dim, return_A=False)
    assert none is None


def test_gather_of_last_dim_is_a_sum_of_partial_products():
    gen = torch.Generator().manual_seed(7)
    w, ks = 3, 4
    shards = [_rand(gen, 2, 5, ks) for _ in range(w)]
    B = _rand(gen, w * ks, 6)
    _, (out,) = all_gather_matmul_global(shards, [B], 2)
    partials = sum(shards[r] @ B[r * ks:(r + 1) * ks] for r in range(w))
    torch.testing.assert_close(out, partials)


@settings(max_examples=40, deadline=None)
@given(gather_cases(), st.sampled_from(["sum", "avg"]))
def test_matmul_reduce_scatter_global_blocks(case, reduce_op):
    gen = torch.Generator().manual_seed(case["seed"])
    w, shape = case["world"], case["shape"]
    dim = case["dim"]
    n = case["n"] * w
    lead = list(shape[:-1])
    if dim < len(lead):
        lead[dim] *= w
    As = [_rand(gen, *lead, shape[-1]) for _ in range(w)]
    Bs = [_rand(gen, shape[-1], n) for _ in range(w)]
    outs = matmul_reduce_scatter_global(As, Bs, reduce_op, dim)
    total = sum(A @ B for A, B in zip(As, Bs)) / (w if reduce_op == "avg" else 1)
    block = total.shape[dim] // w
    for r, out in enumerate(outs):
        torch.testing.assert_close(out, total.narrow(dim, r * block, block))
        assert out.is_contiguous()
    torch.testing.assert_close(matmul_all_reduce_global(As, Bs, reduce_op), total)


@settings(max_examples=30, deadline=None)
@given(gather_cases())
@example({"world": 2, "dim": 1, "shape": [2, 1], "n": 1, "seed": 0})  # a size-1 last dim: reshape returned a view (CI)
def test_layout_round_trips(case):
    gen = torch.Generator().manual_seed(case["seed"])
    w, dim, shape = case["world"], case["dim"], case["shape"]
    stacked = _rand(gen, w, *shape)
    full = merge_rank_axis(stacked, dim)
    torch.testing.assert_close(full, torch.cat(list(stacked), dim=dim))
    assert full.is_contiguous()
    torch.testing.assert_close(split_rank_axis(full, dim, w), stacked)
    flat = rows_first(full, dim)
    assert flat.dim() == 2 and flat.is_contiguous()
    torch.testing.assert_close(from_rows_first(flat, list(full.shape), dim), full)

"""The operators on a one-rank group: the matmul alone, no collective, the reference's results."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist
from _world1 import world1_group

import hocket.ops as H
from hocket.ops.reference import (
    reference_all_gather_matmul,
    reference_matmul_all_reduce,
    reference_matmul_reduce_scatter,
)


@pytest.fixture(scope="module")
def pg():
    yield from world1_group()


@pytest.fixture
def no_collectives(monkeypatch):
    """Any collective the operators issue fails the test (the references, called outside, still may)."""
    calls = []

    def refuse(name):
        def call(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"a one-rank call issued {name}")
        return call

    names = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "all_gather", "reduce_scatter",
             "batch_isend_irecv", "broadcast", "all_gather_object")
    originals = {name: getattr(dist, name) for name in names}
    for name in names:
        monkeypatch.setattr(dist, name, refuse(name))
    yield originals
    assert not calls


def _shape(rng: random.Random) -> tuple[int, int, int]:
    return rng.randint(1, 37), rng.randint(1, 29), rng.randint(1, 31)  # odd sizes, no multiple of anything


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("plan", [None, "sequential"])
def test_one_rank_calls_are_the_matmul_alone(pg, no_collectives, seed, dtype, plan, monkeypatch):
    rng = random.Random(seed)
    m, k, n = _shape(rng)
    torch.manual_seed(seed)
    A, B, B2 = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype), torch.randn(k, n + 3, dtype=dtype)
    dim = rng.choice([0, -2])
    gathered, outs = H.all_gather_matmul(A, [B, B2], dim, pg, plan=plan)
    rs = H.matmul_reduce_scatter(A, B, rng.choice(["sum", "avg"]), rng.choice([0, 1]), pg, plan=plan)
    ar = H.matmul_all_reduce(A, B, rng.choice(["sum", "avg"]), pg, plan=plan)
    for name, original in no_collectives.items():  # the references below issue theirs
        monkeypatch.setattr(dist, name, original)
    ref_A, ref_outs = reference_all_gather_matmul(A, [B, B2], dim, pg)
    assert torch.equal(gathered, ref_A) and all(torch.equal(o, r) for o, r in zip(outs, ref_outs, strict=True))
    assert torch.equal(rs, reference_matmul_reduce_scatter(A, B, "sum", 0, pg))
    assert torch.equal(ar, reference_matmul_all_reduce(A, B, "sum", pg))
    assert gathered.data_ptr() != A.data_ptr()  # a copy, as the reference's, not the caller's tensor


@pytest.mark.parametrize("save_gathered", [True, False])
def test_one_rank_gradients_match_the_matmuls(pg, no_collectives, save_gathered):
    """Backward on one rank (the input-gradient reduce-scatter, the re-gather of A, the gathered A's own
    gradient) issues no collective either and gives the plain matmuls' gradients."""
    rng = random.Random(11 + save_gathered)
    m, k, n = _shape(rng)
    A = torch.randn(m, k, dtype=torch.float64, requires_grad=True)
    B = torch.randn(k, n, dtype=torch.float64, requires_grad=True)
    gathered, (out,) = H.all_gather_matmul(A, [B], 0, pg, plan="sequential", save_gathered=save_gathered)
    rs = H.matmul_reduce_scatter(A, B, "avg", 0, pg, plan="sequential")
    (out.sum() + 2 * rs.sum() + (gathered ** 2).sum()).backward()
    A_ref, B_ref = A.detach().requires_grad_(), B.detach().requires_grad_()
    (3 * (A_ref @ B_ref).sum() + (A_ref ** 2).sum()).backward()
    torch.testing.assert_close(A.grad, A_ref.grad)
    torch.testing.assert_close(B.grad, B_ref.grad)

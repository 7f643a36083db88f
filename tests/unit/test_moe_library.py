"""The MoE custom ops without peers: fake implementations (data-dependent rows as unbacked sizes), the
canonical layouts' piece maps, and a one-rank group (every strategy is the layer itself, no collectives)."""

from __future__ import annotations

import pytest
import torch
from _world1 import world1_group

import hocket.ops as H
from hocket.core.plan import Plan
from hocket.ops.moe_exec import pieces
from hocket.ops.moe_layout import MoeLayout, gather_rows
from hocket.ops.reference import moe_tokens_reference


@pytest.fixture(scope="module")
def pg():
    yield from world1_group()


def _fake_call(splits: str):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    plan = Plan(splits=splits).to_json()
    with FakeTensorMode(shape_env=ShapeEnv()):
        send = torch.empty(12, 8)
        counts = torch.zeros(2, 4, dtype=torch.int64)
        w1, w2 = torch.empty(2, 8, 16), torch.empty(2, 8, 8)
        out, received, wgrad = torch.ops.hocket.all_to_all_grouped_mm(send, counts, w1, None, 2, "g", plan,
                                                                      "forward")
        y, _ = torch.ops.hocket.grouped_mm_all_to_all(out[:, :8], counts, w2, None, None, 2, "g", plan, "forward")
        _, _, dw = torch.ops.hocket.all_to_all_grouped_mm(send, counts, w1, received, 2, "g", plan, "backward")
    return out, received, wgrad, y, dw


def test_fake_rows_are_dynamic_when_exchanged_and_fixed_when_padded():
    out, received, wgrad, y, dw = _fake_call("exchanged")
    assert isinstance(out.shape[0], torch.SymInt) and out.shape[1] == 16 and received.shape[1] == 8
    assert isinstance(y.shape[0], torch.SymInt) and y.shape[1] == 8 and wgrad is None
    assert tuple(dw.shape) == (2, 8, 8)
    out, received, _, y, _ = _fake_call("padded")
    assert tuple(out.shape) == (12, 16) and tuple(received.shape) == (12, 8) and tuple(y.shape) == (12, 8)


@pytest.mark.parametrize("mode", ["exchanged", "padded"])
@pytest.mark.parametrize("plan", [Plan(strategy="token_blocks", chunks=3), Plan(strategy="expert_groups", chunks=2),
                                  Plan(strategy="per_source"), Plan()])
def test_pieces_cover_every_row_once(mode, plan):
    counts = torch.tensor([[3, 0, 2, 5, 1, 0], [0, 4, 4, 1, 0, 2], [6, 1, 0, 0, 2, 3]])
    block = 6 * 2 if mode == "padded" else 0  # tokens 6 x min(k=2, e_local=2)
    for rank in range(3):
        lay = MoeLayout(counts, rank=rank, world=3, mode=mode, block_rows=block, topk=2)
        for side in (lay.send, lay.recv):
            rows = torch.arange(side.rows, dtype=torch.float32).unsqueeze(1)
            seen = []
            for sel_s, sel_r, _ in pieces(lay, plan):
                sel = sel_s if side is lay.send else sel_r
                pm = lay.piece_map(side, sel)
                got = gather_rows(rows, pm)
                seen += pm.src[pm.src < side.rows].tolist()
                assert torch.equal(got[pm.src < side.rows, 0], pm.src[pm.src < side.rows].float())
            whole = plan.strategy == "sequential"  # the piece is the canonical buffer, padding included
            valid = side.rows if mode == "exchanged" or whole else int(side.c.sum())
            assert len(seen) == len(set(seen)) == valid


@pytest.mark.parametrize("plan", ["sequential", {"strategy": "token_blocks", "chunks": 2}, "per_source",
                                  {"strategy": "expert_groups", "chunks": 3, "splits": "padded"}, "shared_overlap"])
def test_one_rank_is_the_whole_layer(pg, plan):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(7, 8, generator=gen).requires_grad_()
    ids = torch.stack([torch.randperm(3, generator=gen)[:2] for _ in range(7)])
    weights = torch.rand(7, 2, generator=gen).requires_grad_()
    w1 = torch.randn(3, 8, 16, generator=gen).requires_grad_()
    w2 = torch.randn(3, 8, 8, generator=gen).requires_grad_()
    shared = torch.nn.Linear(8, 8)
    y = H.moe_experts(x, ids, weights, w1, w2, pg, shared=shared, plan=plan)
    want = moe_tokens_reference(x, ids, weights, w1, w2, shared)
    assert torch.allclose(y, want, atol=1e-5)
    grads = torch.autograd.grad(y.sum(), [x, weights, w1, w2, shared.weight])
    wants = torch.autograd.grad(want.sum(), [x, weights, w1, w2, shared.weight])
    for got, ref in zip(grads, wants):
        assert torch.allclose(got, ref, atol=1e-4)

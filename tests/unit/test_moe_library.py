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
            # whole pieces are the canonical buffer and per-source send pieces its blocks, padding included
            whole = plan.strategy == "sequential" or (plan.strategy == "per_source" and side is lay.send)
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


@pytest.mark.parametrize("mode", ["exchanged", "padded"])
def test_receive_buffer_is_expert_major(mode):
    """The canonical receive buffer is (local expert, source)-ordered with its padding last, so the grouped GEMM
    runs on it as it is: the whole piece's ``perm`` takes the rows as they land (per source) into that order."""
    counts = torch.tensor([[3, 0, 2, 5, 1, 0], [0, 4, 4, 1, 0, 2], [6, 1, 0, 0, 2, 3]])
    world, el = 3, 2
    block = 6 * 2 if mode == "padded" else 0
    for rank in range(world):
        lay = MoeLayout(counts, rank=rank, world=world, mode=mode, block_rows=block, topk=2)
        pm = lay.piece_map(lay.recv, lay.whole(lay.recv))
        mine = counts[:, rank * el:(rank + 1) * el]
        landed = []  # (expert, source) label of each row as the all-to-all delivers it, padding (el, s)
        for s in range(world):
            for e in range(el):
                landed += [(e, s)] * int(mine[s, e])
            landed += [(el, s)] * (lay.recv.caps[s] - int(mine[s].sum()))
        labels = torch.tensor(landed)
        ordered = labels if pm.perm is None else labels.index_select(0, pm.perm)
        keys = (ordered[:, 0] * world + ordered[:, 1]).tolist()
        assert keys == sorted(keys)
        assert pm.offs.tolist() == torch.cumsum(mine.sum(0), 0).tolist()


def _four_calls(plan: Plan, group_name: str):
    """Both executors forward and the backward calls their autograd makes, at one rank; every input, every
    output."""
    from hocket.ops.moe_exec import run_a2a_mm, run_mm_a2a
    from hocket.ops.moe_library import _runtime

    gen = torch.Generator().manual_seed(4)
    e_local, k, tokens, hidden, ffn = 4, 2, 7, 8, 8
    ids = torch.stack([torch.randperm(e_local, generator=gen)[:k] for _ in range(tokens)]).reshape(-1)
    counts = torch.bincount(ids, minlength=e_local).unsqueeze(0)
    send = torch.randn(tokens * k, hidden, generator=gen)
    w1, w2 = torch.randn(e_local, hidden, 2 * ffn, generator=gen), torch.randn(e_local, ffn, hidden, generator=gen)
    rt = _runtime(group_name, plan)
    h, received, _ = run_a2a_mm(send, counts, w1, None, k, rt, plan)
    act = torch.randn(h.shape[0], ffn, generator=gen)
    y, _ = run_mm_a2a(act, counts, w2, None, None, k, rt, plan)
    grad_y, grad_h = torch.randn(y.shape, generator=gen), torch.randn(h.shape, generator=gen)
    d_act, _, d_w2 = run_a2a_mm(grad_y, counts, w2.transpose(1, 2), act, k, rt, plan)
    d_send, d_w1 = run_mm_a2a(grad_h, counts, w1.transpose(1, 2), received, grad_h, k, rt, plan)
    inputs = (send, counts, w1, w2, act, grad_y, grad_h)
    outputs = (h, received, y, d_act, d_w2, d_send, d_w1)
    return inputs, outputs, (ids, send, w1, w2, act, grad_y, grad_h)


PLANS = [Plan(), Plan(strategy="token_blocks", chunks=2), Plan(strategy="token_blocks", chunks=3),
         Plan(strategy="per_source"), Plan(strategy="expert_groups", chunks=3), Plan(strategy="shared_overlap")]


@pytest.mark.parametrize("splits", ["exchanged", "padded"])
@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.describe())
def test_executors_share_one_map_and_never_alias_inputs(pg, plan, splits):
    """A step's four executor calls build the routing's maps once, return no view of an input (a custom op's
    outputs never alias its inputs), and compute the layer: the rows come back to the sender's layout."""
    from hocket.ops import moe_exec
    from hocket.transport.group import resolve_group

    plan = plan.with_(splits=splits)
    moe_exec._MAPS.clear()
    inputs, outputs, (ids, send, w1, w2, act, grad_y, grad_h) = _four_calls(plan, resolve_group(pg).name)
    assert len(moe_exec._MAPS) == 1
    held = {t.untyped_storage().data_ptr() for t in inputs}
    for i, out in enumerate(outputs):
        assert out.untyped_storage().data_ptr() not in held, f"output {i} is a view of an input"
    h, received, y, d_act, d_w2, d_send, d_w1 = outputs
    # one rank: both canonical buffers are the rows in expert order, expert e's rows a .. b
    offs = torch.cumsum(torch.bincount(ids, minlength=w1.shape[0]), 0).tolist()
    runs = list(enumerate(zip([0, *offs[:-1]], offs)))
    assert torch.equal(received, send)
    assert torch.allclose(h, torch.cat([send[a:b] @ w1[e] for e, (a, b) in runs]), atol=1e-5)
    assert torch.allclose(y, torch.cat([act[a:b] @ w2[e] for e, (a, b) in runs]), atol=1e-5)
    assert torch.allclose(d_act, torch.cat([grad_y[a:b] @ w2[e].t() for e, (a, b) in runs]), atol=1e-5)
    assert torch.allclose(d_send, torch.cat([grad_h[a:b] @ w1[e].t() for e, (a, b) in runs]), atol=1e-5)
    assert torch.allclose(d_w1, torch.stack([send[a:b].t() @ grad_h[a:b] for _, (a, b) in runs]), atol=1e-4)
    assert torch.allclose(d_w2, torch.stack([act[a:b].t() @ grad_y[a:b] for _, (a, b) in runs]), atol=1e-4)

"""``hocket.ops.moe_experts`` with ``splits="padded"`` captured in a CUDA graph on one GPU (an NCCL group of one
rank): ``hocket.ops.CapturedCall`` and a bare ``torch.cuda.graph``, forward and forward + backward, replayed on
fresh routing and checked against the fp32 reference each replay (a capture fails on any host sync)."""

from __future__ import annotations

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

PLANS = ({"strategy": "sequential", "splits": "padded"}, {"strategy": "token_blocks", "chunks": 2, "splits": "padded"},
         {"strategy": "per_source", "splits": "padded"}, {"strategy": "expert_groups", "chunks": 2, "splits": "padded"},
         {"strategy": "shared_overlap", "splits": "padded"}, None)


TOKENS, HIDDEN, FFN, EXPERTS, TOPK = 64, 128, 64, 8, 2


def _experts(seed: int):
    """``(device, generator, w_gate_up, w_down, and both in bf16)``: every expert of the one rank."""
    dev = torch.device("cuda", torch.cuda.current_device())
    gen = torch.Generator(device=dev).manual_seed(seed)
    w1 = torch.randn(EXPERTS, HIDDEN, 2 * FFN, device=dev, generator=gen) / HIDDEN ** 0.5
    w2 = torch.randn(EXPERTS, FFN, HIDDEN, device=dev, generator=gen) / FFN ** 0.5
    return dev, gen, w1, w2, w1.to(torch.bfloat16), w2.to(torch.bfloat16)


def _routing(gen, tokens, experts, k, dev, skew):
    logits = torch.randn(tokens, experts, device=dev, generator=gen)
    logits[:, 0] += skew
    top = torch.topk(logits.softmax(-1), k)
    return top.indices, top.values


def _capture_case() -> list[tuple[str, str, float]]:
    import torch.distributed as dist

    import hocket.ops as H
    from hocket.ops.reference import moe_tokens_reference

    dev, gen, w1, w2, wb1, wb2 = _experts(0)
    tokens, hidden, experts, k = TOKENS, HIDDEN, EXPERTS, TOPK
    out = []

    def error(got, x, ids, weights):
        want = moe_tokens_reference(x, ids, weights, w1, w2)
        return float((got.float() - want).abs().max()) / float(want.abs().max())

    for plan in PLANS:
        x0 = torch.randn(tokens, hidden, device=dev, generator=gen)
        ids0, tw0 = _routing(gen, tokens, experts, k, dev, 0.0)
        call = H.CapturedCall(lambda x, ids, tw, plan=plan: H.moe_experts(x, ids, tw, wb1, wb2, dist.group.WORLD,
                                                                             plan=plan),
                              x0.to(torch.bfloat16), ids0, tw0.to(torch.bfloat16), what=f"moe {plan}")
        for replay, skew in enumerate((0.0, 3.0, -1.0)):
            x = torch.randn(tokens, hidden, device=dev, generator=gen)
            ids, tw = _routing(gen, tokens, experts, k, dev, skew)
            got = call(x.to(torch.bfloat16), ids, tw.to(torch.bfloat16)).clone()
            out.append((f"CapturedCall {plan}", f"replay {replay}", error(got, x, ids, tw)))

    # a bare torch.cuda.graph of forward + backward (static inputs, warmed up on a side stream)
    plan = {"strategy": "token_blocks", "chunks": 2, "splits": "padded"}
    gw1 = wb1.clone().requires_grad_()
    sx = torch.randn(tokens, hidden, device=dev, generator=gen).to(torch.bfloat16).requires_grad_()
    sids, stw = _routing(gen, tokens, experts, k, dev, 0.0)
    stw = stw.to(torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            H.moe_experts(sx, sids, stw, gw1, wb2, dist.group.WORLD, plan=plan).float().square().sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    sx.grad = None
    gw1.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sy = H.moe_experts(sx, sids, stw, gw1, wb2, dist.group.WORLD, plan=plan)
        sy.float().square().sum().backward()
    for replay, skew in enumerate((0.0, 2.0)):
        x = torch.randn(tokens, hidden, device=dev, generator=gen)
        ids, tw = _routing(gen, tokens, experts, k, dev, skew)
        with torch.no_grad():
            sx.copy_(x.to(torch.bfloat16))
            sids.copy_(ids)
            stw.copy_(tw.to(torch.bfloat16))
        graph.replay()
        rx = x.to(torch.bfloat16).float().requires_grad_()
        rw1 = wb1.float().requires_grad_()
        want = moe_tokens_reference(rx, ids, tw.to(torch.bfloat16).float(), rw1, wb2.float())
        want.square().sum().backward()
        fwd = float((sy.float() - want).abs().max()) / float(want.abs().max())
        gx = float((sx.grad.float() - rx.grad).abs().max()) / float(rx.grad.abs().max())
        gw = float((gw1.grad.float() - rw1.grad).abs().max()) / float(rw1.grad.abs().max())
        out.append(("torch.cuda.graph fwd+bwd", f"replay {replay}", max(fwd, gx, gw)))
    return out


def test_padded_moe_is_captured_and_replayed_on_fresh_routing():
    from hocket.launch import RankPool

    with RankPool(1, backend="nccl", timeout_s=300, start_method="spawn") as pool:
        (results,) = pool.run(_capture_case)
    assert len(results) == 3 * len(PLANS) + 2
    for what, replay, err in results:
        assert err < 5e-2, f"{what} {replay}: error {err:.3g} of the reference's largest magnitude"


def _compiled_capture_case() -> list[float]:
    """``torch.compile`` (aot_eager) of a padded call, warmed up, then captured in a CUDA graph and replayed."""
    import torch.distributed as dist

    import hocket.ops as H
    from hocket.ops.reference import moe_tokens_reference

    dev, gen, w1, w2, wb1, wb2 = _experts(3)
    tokens, hidden, experts, k = TOKENS, HIDDEN, EXPERTS, TOPK
    plan = {"strategy": "token_blocks", "chunks": 2, "splits": "padded"}
    fn = torch.compile(lambda x, ids, tw: H.moe_experts(x, ids, tw, wb1, wb2, dist.group.WORLD, plan=plan),
                       backend="aot_eager", fullgraph=True)
    x0 = torch.randn(tokens, hidden, device=dev, generator=gen).to(torch.bfloat16)
    ids0, tw0 = _routing(gen, tokens, experts, k, dev, 0.0)
    call = H.CapturedCall(fn, x0, ids0, tw0.to(torch.bfloat16), what="compiled moe")
    errors = []
    for skew in (0.0, 3.0):
        x = torch.randn(tokens, hidden, device=dev, generator=gen)
        ids, tw = _routing(gen, tokens, experts, k, dev, skew)
        got = call(x.to(torch.bfloat16), ids, tw.to(torch.bfloat16)).clone()
        want = moe_tokens_reference(x, ids, tw, w1, w2)
        errors.append(float((got.float() - want).abs().max()) / float(want.abs().max()))
    return errors


def test_compiled_padded_moe_is_captured():
    from hocket.launch import RankPool

    with RankPool(1, backend="nccl", timeout_s=300, start_method="spawn") as pool:
        (errors,) = pool.run(_compiled_capture_case)
    assert len(errors) == 2 and all(e < 5e-2 for e in errors), errors

"""``hocket.ops.moe_experts`` on one GPU (an NCCL group of one rank): every strategy and split mode against the
fp32 reference of the layer, forward and gradients, with ``torch._grouped_mm`` running the bf16 grouped GEMMs."""

from __future__ import annotations

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

PLANS = ("sequential", {"strategy": "token_blocks", "chunks": 2}, {"strategy": "token_blocks", "chunks": 2,
         "splits": "padded"}, "per_source", {"strategy": "expert_groups", "chunks": 2},
         {"strategy": "shared_overlap", "splits": "padded"}, {"strategy": "sequential", "transport": "host_staged"},
         None)


def _layer_case(device_type: str) -> list[tuple[str, float, float]]:
    import copy

    import torch.distributed as dist

    import hocket.ops as H
    from hocket.ops.grouped_mm import grouped_mm_backend
    from hocket.ops.reference import moe_tokens_reference

    dev = torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda" else torch.device("cpu")
    assert grouped_mm_backend(dev, torch.bfloat16) == "torch._grouped_mm"
    gen = torch.Generator(device=dev).manual_seed(0)
    tokens, hidden, ffn, experts, k = 96, 128, 64, 8, 2
    x = torch.randn(tokens, hidden, device=dev, generator=gen)
    logits = torch.randn(tokens, experts, device=dev, generator=gen)
    logits[:, 0] += 2.0  # skewed: expert 0 takes most tokens
    top = torch.topk(logits.softmax(-1), k)
    w1 = torch.randn(experts, hidden, 2 * ffn, device=dev, generator=gen) / hidden ** 0.5
    w2 = torch.randn(experts, ffn, hidden, device=dev, generator=gen) / ffn ** 0.5
    shared = torch.nn.Linear(hidden, hidden, bias=False, device=dev, dtype=torch.bfloat16)
    want_x = x.clone().requires_grad_()
    want = moe_tokens_reference(want_x, top.indices, top.values, w1, w2, copy.deepcopy(shared).float())
    want.square().sum().backward()
    out = []
    for plan in PLANS:
        got_x = x.to(torch.bfloat16).requires_grad_()
        got = H.moe_experts(got_x, top.indices, top.values.to(torch.bfloat16), w1.to(torch.bfloat16),
                            w2.to(torch.bfloat16), dist.group.WORLD, shared=shared, plan=plan)
        got.float().square().sum().backward()
        scale = float(want.detach().abs().max())
        err = float((got.detach().float() - want.detach()).abs().max()) / scale
        gerr = float((got_x.grad.float() - want_x.grad).abs().max()) / float(want_x.grad.abs().max())
        out.append((str(plan), err, gerr))
    return out


def test_every_moe_plan_matches_the_reference_on_one_gpu():
    from hocket.launch import RankPool

    with RankPool(1, backend="nccl", timeout_s=240, start_method="spawn") as pool:
        (results,) = pool.run(_layer_case, "cuda")
    for plan, err, gerr in results:
        assert err < 3e-2, f"{plan}: forward error {err:.3g} of the output's largest magnitude"
        assert gerr < 5e-2, f"{plan}: input-gradient error {gerr:.3g}"

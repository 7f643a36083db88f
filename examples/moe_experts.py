"""An expert-parallel MoE layer's routed experts with hocket.ops.moe_experts, checked against the whole layer.

    python examples/moe_experts.py                                      # 2 self-spawned CPU ranks (gloo)
    python examples/moe_experts.py --world 4 --plan token_blocks --chunks 4 --splits padded --routing zipf
    torchrun --nproc-per-node 2 examples/moe_experts.py --plan per_source

Every rank draws its tokens and a router (uniform or Zipf-skewed scores, top-k), holds ``E / world`` experts
(SwiGLU: ``w_gate_up [E_local, hidden, 2*ffn]``, ``w_down [E_local, ffn, hidden]``) and a shared expert, runs
forward and backward, and checks its output and gradients against the single-process reference of the whole
layer (every rank's tokens, every expert); then times the call against ``sequential``.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist


class SharedExpert(torch.nn.Module):
    """A small dense SwiGLU expert every token passes through (DeepSeek's shared expert)."""

    def __init__(self, hidden: int, ffn: int, gen: torch.Generator) -> None:
        super().__init__()
        self.up = torch.nn.Parameter(torch.randn(hidden, 2 * ffn, generator=gen) / hidden ** 0.5)
        self.down = torch.nn.Parameter(torch.randn(ffn, hidden, generator=gen) / ffn ** 0.5)

    def forward(self, x):
        h = x @ self.up
        ffn = self.down.shape[0]
        return (torch.nn.functional.silu(h[:, :ffn]) * h[:, ffn:]) @ self.down


def _device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def run(rank: int, world: int, options: dict) -> str:
    import hocket.ops as H
    from hocket.ops.reference import moe_experts_reference

    hidden, ffn, experts, k, tokens = (options[n] for n in ("hidden", "ffn", "experts", "topk", "tokens"))
    e_local = experts // world
    dev = _device()
    gen = torch.Generator().manual_seed(0)  # every rank's tokens and every expert, the same on every rank
    xs = [torch.randn(tokens, hidden, generator=gen) for _ in range(world)]
    bias = torch.zeros(experts) if options["routing"] == "uniform" else -1.5 * torch.log1p(torch.arange(experts))
    tops = [torch.topk((torch.randn(tokens, experts, generator=gen) + bias).softmax(-1), k, dim=1)
            for _ in range(world)]
    w1 = torch.randn(experts, hidden, 2 * ffn, generator=gen) / hidden ** 0.5
    w2 = torch.randn(experts, ffn, hidden, generator=gen) / ffn ** 0.5
    shared = SharedExpert(hidden, ffn // 2, gen)
    mine = slice(rank * e_local, (rank + 1) * e_local)

    # the whole layer in this process
    ref_x = [x.clone().requires_grad_() for x in xs]
    ref_w1 = w1.clone().requires_grad_()
    ref_shared = SharedExpert(hidden, ffn // 2, torch.Generator().manual_seed(1))
    ref_shared.load_state_dict(shared.state_dict())
    outs = moe_experts_reference(ref_x, [t.indices for t in tops], [t.values for t in tops],
                                 list(ref_w1.split(e_local)), list(w2.split(e_local)), shared=ref_shared)
    sum(o.sum() for o in outs).backward()

    plan = {"strategy": options["plan"], "splits": options["splits"], "transport": options["transport"]}
    if options["plan"] in ("token_blocks", "expert_groups"):
        plan["chunks"] = options["chunks"]
    x = xs[rank].to(dev).requires_grad_()
    w_gate_up = w1[mine].to(dev).requires_grad_()
    shared = shared.to(dev)
    ids, weights = tops[rank].indices.to(dev), tops[rank].values.to(dev)
    y = H.moe_experts(x, ids, weights, w_gate_up, w2[mine].to(dev), dist.group.WORLD, shared=shared, plan=plan)
    y.sum().backward()
    err = max(float((y.detach().cpu() - outs[rank].detach()).abs().max()),
              float((x.grad.cpu() - ref_x[rank].grad).abs().max()),
              float((w_gate_up.grad.cpu() - ref_w1.grad[mine]).abs().max()))
    assert err < 1e-3, f"rank {rank}: max error {err} against the whole layer"

    def timed(p) -> float:
        with torch.no_grad():
            for _ in range(2):
                H.moe_experts(x, ids, weights, w_gate_up, w2[mine].to(dev), dist.group.WORLD, shared=shared, plan=p)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(options["iters"]):
                H.moe_experts(x, ids, weights, w_gate_up, w2[mine].to(dev), dist.group.WORLD, shared=shared, plan=p)
            return (time.perf_counter() - start) * 1e3 / options["iters"]

    ms, base = timed(plan), timed({"strategy": "sequential"})
    return (f"moe_experts E={experts} top-{k} hidden {hidden} ffn {ffn} {tokens} tokens/rank world {world} "
            f"{options['routing']} routing, plan {plan}: max error {err:.2e} (forward and gradients), "
            f"{ms:.2f} ms per call vs sequential {base:.2f} ms")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2, help="ranks to spawn when not under torchrun")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--ffn", type=int, default=96)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--topk", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128, help="tokens per rank")
    parser.add_argument("--routing", default="uniform", choices=("uniform", "zipf"))
    parser.add_argument("--plan", default="token_blocks",
                        choices=("sequential", "token_blocks", "per_source", "expert_groups", "shared_overlap"))
    parser.add_argument("--chunks", type=int, default=2, help="blocks (token_blocks) or groups (expert_groups)")
    parser.add_argument("--splits", default="exchanged", choices=("exchanged", "padded"))
    parser.add_argument("--transport", default="collective", choices=("collective", "host_staged"))
    parser.add_argument("--iters", type=int, default=5)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    from hocket.launch import run_everywhere

    args = parse_args(argv)
    options = {k: v for k, v in vars(args).items() if k != "world"}
    run_everywhere(run, options, world_size=args.world, timeout_s=300)


if __name__ == "__main__":
    main()

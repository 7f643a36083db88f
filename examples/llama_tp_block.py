"""A tensor-parallel Llama block, overlapped by hocket.compile: the three lines a training script adds.

    torchrun --nproc-per-node 2 examples/llama_tp_block.py           # GPUs (NCCL), or CPU ranks (gloo)
    python examples/llama_tp_block.py --world 2                        # self-spawned CPU ranks

The block is sharded the usual PyTorch way (ColwiseParallel / RowwiseParallel with
sequence parallelism, SequenceParallel norms). ``hocket.compile`` then finds its
all-gather+matmul and matmul+reduce-scatter sites in the forward and backward graphs,
rewrites those its planner predicts faster into hocket operators, and fills the gaps of
the rest. The script checks a few training steps against the eager module and prints
``hocket.explain``.
"""

from __future__ import annotations

import argparse
import copy

import torch

import hocket
from hocket.models.llama_block import LlamaBlock, LlamaBlockConfig, parallelize_llama_block, shard_sequence
from hocket.ops.tolerance import assert_close


def train_steps(rank: int, world: int, options: dict) -> str:
    """Run on every rank: eager and hocket.compile side by side, same weights, same batches."""
    from torch.distributed.device_mesh import init_device_mesh

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    dtype = getattr(torch, options["dtype"])
    config = LlamaBlockConfig(dim=options["dim"], n_heads=options["heads"], n_kv_heads=options["kv_heads"],
                              hidden_dim=options["hidden"], max_seq_len=options["seq"])
    torch.manual_seed(0)  # the same full weights on every rank before sharding
    base = LlamaBlock(config).to(device=device, dtype=dtype)
    mesh = init_device_mesh(device.type, (world,))
    eager = parallelize_llama_block(copy.deepcopy(base), mesh)

    model = parallelize_llama_block(copy.deepcopy(base), mesh)                    # as before
    model = hocket.compile(model, backend=options["backend"], dynamic=False,     # + hocket
                           autotune=options["autotune"])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    eager_optimizer = torch.optim.SGD(eager.parameters(), lr=1e-3)

    gen = torch.Generator(device="cpu").manual_seed(1)
    for _ in range(options["steps"]):
        x_full = torch.randn(options["batch"], options["seq"], config.dim, generator=gen).to(device, dtype)
        x = shard_sequence(x_full, rank, world)
        outputs = []
        for module, opt in ((eager, eager_optimizer), (model, optimizer)):
            opt.zero_grad(set_to_none=True)
            y = module(x)
            y.float().square().mean().backward()
            opt.step()
            outputs.append(y.detach())
        # same weights updated by the same gradients: the outputs of every step agree
        assert_close(outputs[1], outputs[0], world=world, what="block output")
    return hocket.explain(model).format()                                       # what hocket did


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2, help="ranks to spawn when not under torchrun")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--backend", default="aot_eager", choices=("aot_eager", "inductor"),
                        help="aot_eager needs no C++ build; inductor is torch.compile's default")
    parser.add_argument("--autotune", action="store_true",
                        help="measure each site's candidate plans on the live group while compiling")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    from hocket.launch import run_everywhere

    args = parse_args(argv)
    options = {k: v for k, v in vars(args).items() if k != "world"}
    run_everywhere(train_steps, options, world_size=args.world, timeout_s=900)


if __name__ == "__main__":
    main()

"""A tensor-parallel MLP block with uneven column/row shards sized by device speed, trained one step on gloo.

    python examples/uneven_mlp.py                                   # 2 self-spawned CPU ranks (gloo)
    python examples/uneven_mlp.py --cluster mixed-nvidia-amd --ranks 0,4 --hidden 1024
    torchrun --nproc-per-node 2 examples/uneven_mlp.py              # GPUs (NCCL) or CPU ranks

The block is ``Y = silu(X @ W1) @ W2`` with the hidden dimension split over the ranks: rank ``r`` holds the
columns ``W1[:, h_r]`` (column-parallel, a local GEMM) and the rows ``W2[h_r, :]`` (row-parallel), and
``hocket.ops.matmul_all_reduce`` sums the partial products while it computes them (``shard_rows=`` every rank's
local ``k``, which may differ). The split ``h_r`` is what :func:`hocket.plan.shards.recommend_shards` recommends for the group of
devices ``--ranks`` of the described cluster ``--cluster`` (default: an A100 and an H100 of the
``mixed-a100-h100-pcie`` preset): the faster device gets the wider shard. On CPU ranks the devices are alike, so
the uneven split costs time here; the example shows that the operators take it and that the outputs and
gradients are those of the unsharded block. It checks the forward output and both weight gradients against
the unsharded reference, takes one SGD step, and prints the split and the check.
"""

from __future__ import annotations

import argparse

import torch


def recommended_split(options: dict, world: int) -> tuple[list[int], str]:
    """Per-rank hidden sizes for the described devices, and the lines saying why.

    The split is sized at the shape of a real block (``--size-tokens``, ``--size-dim``, ``--size-hidden``:
    Llama-3-70B's MLP by default, where the GEMMs dominate) and scaled to this example's ``--hidden`` in
    multiples of 16: at the example's own tiny shape the communication would dominate and the split stay even.
    """
    from hocket.core.site import Site
    from hocket.hardware import load_cluster
    from hocket.plan.shards import recommend_shards, shard_lines

    cluster = load_cluster(options["cluster"])
    ranks = tuple(int(r) for r in options["ranks"].split(","))
    if len(ranks) != world:
        raise ValueError(f"--ranks {options['ranks']!r} names {len(ranks)} devices but {world} ranks run; "
                         f"give one device per rank")
    group = cluster.subcluster(ranks, name=f"{cluster.name}{list(ranks)}")
    big = options["size_hidden"]
    if big % world:
        raise ValueError(f"--size-hidden {big} must be divisible by the {world} ranks")
    site = Site(kind="mm_ar", m=options["size_tokens"], k=big // world, n=options["size_dim"], world=world,
                dtype="bfloat16", name="mlp.down")
    rec = recommend_shards(site, group)
    hidden, unit = options["hidden"], 16
    if hidden % unit:
        raise ValueError(f"--hidden {hidden} must be a multiple of {unit}")
    units = hidden // unit
    exact = [units * s / big for s in rec.sizes()]
    scaled = [int(x) for x in exact]
    for i in sorted(range(world), key=lambda i: exact[i] - scaled[i], reverse=True)[:units - sum(scaled)]:
        scaled[i] += 1  # largest remainders first, so the sizes add up to --hidden
    return [u * unit for u in scaled], "\n".join(shard_lines(rec))


def train_step(rank: int, world: int, options: dict) -> str:
    """Run on every rank: the uneven block, its reference, one SGD step."""
    import torch.distributed as dist

    import hocket.ops
    from hocket.ops.tolerance import assert_close

    sizes, why = recommended_split(options, world)
    start = sum(sizes[:rank])
    cols = slice(start, start + sizes[rank])
    dim, hidden, tokens = options["dim"], options["hidden"], options["tokens"]
    gen = torch.Generator().manual_seed(0)  # the same full weights and input on every rank
    W1 = torch.randn(dim, hidden, generator=gen) / dim ** 0.5
    W2 = torch.randn(hidden, dim, generator=gen) / hidden ** 0.5
    X = torch.randn(tokens, dim, generator=gen)

    w1 = W1[:, cols].clone().requires_grad_(True)  # column-parallel shard: this rank's hidden units
    w2 = W2[cols, :].clone().requires_grad_(True)  # row-parallel shard: the same hidden units
    group = dist.group.WORLD
    h = torch.nn.functional.silu(X @ w1)
    Y = hocket.ops.matmul_all_reduce(h, w2, "sum", group, shard_rows=sizes)  # every rank's local k
    loss = Y.square().mean()
    loss.backward()

    ref_w1, ref_w2 = W1.clone().requires_grad_(True), W2.clone().requires_grad_(True)
    ref_y = torch.nn.functional.silu(X @ ref_w1) @ ref_w2
    ref_y.square().mean().backward()
    assert_close(Y.detach(), ref_y.detach(), world=world, what="block output")
    assert_close(w1.grad, ref_w1.grad[:, cols], world=world, what="W1 shard gradient")
    assert_close(w2.grad, ref_w2.grad[cols, :], world=world, what="W2 shard gradient")

    with torch.no_grad():  # one SGD step on the shards
        w1 -= options["lr"] * w1.grad
        w2 -= options["lr"] * w2.grad
    after = hocket.ops.matmul_all_reduce(torch.nn.functional.silu(X @ w1), w2, "sum", group,
                                         shard_rows=sizes).square().mean()
    return (f"{why}\nscaled to --hidden {hidden}: the {world} ranks hold hidden sizes {sizes}; output and gradients "
            f"match the unsharded block; loss {loss.item():.6f} -> {after.item():.6f} after one SGD step")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2, help="ranks to spawn when not under torchrun")
    parser.add_argument("--cluster", default="mixed-a100-h100-pcie", help="described cluster the split is sized for")
    parser.add_argument("--ranks", default="0,4", help="its devices the ranks stand for (default: an A100, an H100)")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--size-tokens", type=int, default=8192, help="tokens of the block the split is sized at")
    parser.add_argument("--size-dim", type=int, default=8192, help="model width of that block")
    parser.add_argument("--size-hidden", type=int, default=28672, help="FFN width of that block")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    from hocket.launch import run_everywhere

    args = parse_args(argv)
    options = {k: v for k, v in vars(args).items() if k != "world"}
    run_everywhere(train_step, options, world_size=args.world, timeout_s=300)


if __name__ == "__main__":
    main()

"""A minimal check that ranks start and meet: ``torchrun --nproc-per-node 2 -m hocket.launch.selfcheck``.

Each rank all-reduces ``rank + 1`` and prints one line ``selfcheck rank=.. world=..
local_rank=.. backend=.. device=.. sum=.. threads=..``; the sum must be
``world * (world + 1) / 2`` on every rank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from hocket.launch.backend import device_for_rank


def rank_identity(rank: int, world_size: int) -> tuple[int, int, float, int]:
    """(rank, world size, all-reduced sum of rank + 1, compute threads) on a rank's device."""
    device = device_for_rank(rank)
    value = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(value)
    return rank, world_size, float(value.item()), torch.get_num_threads()


def main() -> None:
    from hocket.launch.process_group import init_torchrun

    ctx = init_torchrun()
    rank, world, total, threads = rank_identity(ctx.rank, ctx.world_size)
    print(
        f"selfcheck rank={rank} world={world} local_rank={ctx.local_rank} backend={ctx.backend} "
        f"device={ctx.device} sum={total:g} threads={threads}",
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

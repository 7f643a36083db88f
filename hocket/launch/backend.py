"""Which torch.distributed backend a rank uses, and which device it computes on."""

from __future__ import annotations

import torch
import torch.distributed as dist

from hocket.launch.torchrun import detect_torchrun

BACKENDS = ("auto", "gloo", "nccl")


def choose_backend(backend: str, *, local_world_size: int) -> str:
    """Resolve ``backend`` ("auto", "gloo", "nccl") for ranks sharing one host.

    "auto" means NCCL when each of the ``local_world_size`` ranks on this host gets a CUDA device of
    its own (one rank on a one-GPU machine included: ``hocket calibrate --world 1`` there measures the
    GPU, not the CPU), otherwise gloo.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {BACKENDS}")
    if local_world_size < 1:
        raise ValueError(f"local_world_size={local_world_size} must be >= 1")
    if backend != "auto":
        if backend == "nccl" and torch.cuda.device_count() < local_world_size:
            raise ValueError(
                f"backend='nccl' needs one CUDA device per local rank: {local_world_size} ranks, "
                f"{torch.cuda.device_count()} devices; use backend='gloo' or fewer ranks"
            )
        return backend
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return "nccl" if count >= 1 and count >= local_world_size else "gloo"


def device_for_rank(local_rank: int | None = None, *, backend: str | None = None) -> torch.device:
    """The device a rank computes on: ``cuda:<local_rank>`` under NCCL, else the CPU.

    ``backend`` defaults to the initialised default process group's backend;
    ``local_rank`` defaults to ``LOCAL_RANK`` (torchrun) or the global rank.
    """
    if backend is None:
        if not dist.is_initialized():
            raise ValueError(
                "device_for_rank(backend=None) needs an initialised process group; "
                "pass backend='gloo'/'nccl' or call hocket.launch.init_torchrun() first"
            )
        backend = str(dist.get_backend())
    if "nccl" not in backend:
        return torch.device("cpu")
    if local_rank is None:
        env = detect_torchrun()
        local_rank = env.local_rank if env is not None else dist.get_rank()
    count = torch.cuda.device_count()
    if not 0 <= local_rank < count:
        raise ValueError(f"local_rank={local_rank} has no CUDA device of its own ({count} visible)")
    return torch.device("cuda", local_rank)

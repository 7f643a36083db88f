"""Random cases are drawn once, in the driver, and every rank gets the same one.

The driver draws a case (shapes, dtype, a seed: hypothesis does this in tests) and
sends it to every rank; ranks derive their tensors from the seed, never from their own
draws (ranks that draw independently diverge and hang). ``rank_generator`` gives each
rank its own reproducible stream (its shard); ``shared_generator`` the same stream on
every rank (a replicated operand); ``check_same_case`` proves all ranks hold one case.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle

import torch
import torch.distributed as dist

_RANK_STRIDE = 1_000_003  # a prime: rank streams of nearby seeds do not coincide


def rank_generator(seed: int, *, rank: int | None = None, device: str | torch.device = "cpu") -> torch.Generator:
    """A generator seeded by (``seed``, ``rank``): different on each rank, reproducible."""
    if rank is None:
        rank = dist.get_rank() if dist.is_initialized() else 0
    gen = torch.Generator(device=device)
    gen.manual_seed((int(seed) * _RANK_STRIDE + rank + 1) % (2**63))
    return gen


def shared_generator(seed: int, *, device: str | torch.device = "cpu") -> torch.Generator:
    """A generator seeded by ``seed`` alone: the same stream on every rank."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed) % (2**63))
    return gen


def _feed(hasher: hashlib._Hash, obj: object) -> None:
    """Hash ``obj`` by value; a tensor's pickle is not byte-stable across processes."""
    if isinstance(obj, torch.Tensor):
        flat = obj.detach().cpu().contiguous().reshape(-1)
        hasher.update(f"tensor{tuple(obj.shape)}{obj.dtype}".encode())
        hasher.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    elif isinstance(obj, dict):
        hasher.update(f"dict{len(obj)}".encode())
        for key in sorted(obj, key=repr):
            _feed(hasher, key)
            _feed(hasher, obj[key])
    elif isinstance(obj, (list, tuple)):
        hasher.update(f"{type(obj).__name__}{len(obj)}".encode())
        for item in obj:
            _feed(hasher, item)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        hasher.update(type(obj).__qualname__.encode())
        for f in dataclasses.fields(obj):
            _feed(hasher, f.name)
            _feed(hasher, getattr(obj, f.name))
    elif obj is None or isinstance(obj, (bool, int, float, str, bytes, torch.dtype, torch.device)):
        hasher.update(f"{type(obj).__name__}:{obj!r}".encode())
    else:
        hasher.update(pickle.dumps(obj, protocol=4))


def case_digest(case: object) -> str:
    """A short digest of a case by value (tensors by dtype, shape and bytes), to compare across ranks."""
    hasher = hashlib.sha256()
    _feed(hasher, case)
    return hasher.hexdigest()[:16]


def check_same_case(case: object, *, group: dist.ProcessGroup | None = None) -> None:
    """Raise ``ValueError`` on every rank unless all ranks of ``group`` hold the same case."""
    mine = case_digest(case)
    digests: list[str | None] = [None] * dist.get_world_size(group)
    dist.all_gather_object(digests, mine, group=group)
    if len(set(digests)) != 1:
        listed = ", ".join(f"rank {r}: {d}" for r, d in enumerate(digests))
        raise ValueError(
            f"ranks hold different cases ({listed}); draw the case once in the driver and send it to every rank"
        )

"""Local input checks for the operators: they need no communication and run before any.

Every error is a ``ValueError`` (bad value or shape) or ``TypeError`` (wrong kind of
object) naming the argument, what was given and how to fix it. The checks return the
normalised dim (negative dims are accepted and mapped to ``0..ndim-1``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

REDUCE_OPS = ("sum", "avg")
MATMUL_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def _check_tensor(name: str, t: object, *, min_dim: int, max_dim: int | None = None,
                  empty_dim: int | None = None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() < min_dim or (max_dim is not None and t.dim() > max_dim):
        want = f"exactly {min_dim}" if max_dim == min_dim else f"at least {min_dim}"
        raise ValueError(f"{name} must have {want} dims, got shape {tuple(t.shape)}; "
                         + ("pass B as a 2-D [K, N] matrix" if max_dim == 2 else "pass [..., rows, K]"))
    if t.numel() == 0 and not (empty_dim is not None and t.dim() > 0 and t.shape[empty_dim % t.dim()] == 0
                               and all(s > 0 for i, s in enumerate(t.shape) if i != empty_dim % t.dim())):
        raise ValueError(f"{name} has a zero-size dim (shape {tuple(t.shape)}); hocket operators need non-empty operands")
    if t.dtype not in MATMUL_DTYPES:
        raise ValueError(f"{name}.dtype={t.dtype} is not supported; use one of "
                         f"{[str(d) for d in MATMUL_DTYPES]} (cast with .to(torch.bfloat16))")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name} is on device {t.device}; hocket runs on cpu (gloo) or cuda (NCCL) tensors")
    return t


def _check_same(a_name: str, a: torch.Tensor, b_name: str, b: torch.Tensor) -> None:
    if a.dtype != b.dtype:
        raise ValueError(f"{b_name}.dtype={b.dtype} differs from {a_name}.dtype={a.dtype}; "
                         f"cast both to one dtype (e.g. {b_name}.to({a_name}.dtype))")
    if a.device != b.device:
        raise ValueError(f"{b_name} is on {b.device} but {a_name} is on {a.device}; move both to one device")


def check_dim(name: str, dim: object, ndim: int, what: str) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"{name} must be an int, got {type(dim).__name__}")
    if not -ndim <= dim < ndim:
        raise ValueError(f"{name}={dim} is out of range for {what} with {ndim} dims; use 0..{ndim - 1} "
                         f"(or -{ndim}..-1)")
    return dim % ndim


def check_reduce_op(reduce_op: object) -> str:
    if reduce_op not in REDUCE_OPS:
        raise ValueError(f"reduce_op={reduce_op!r} is not supported; use one of {REDUCE_OPS}")
    return reduce_op


def check_world(world: object) -> int:
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"group size {world!r} is invalid; the group needs at least one rank")
    return world


def check_backend_device(backend: str, t: torch.Tensor, name: str) -> None:
    if backend == "nccl" and not t.is_cuda:
        raise ValueError(f"{name} is on {t.device} but the group's backend is nccl; move the tensors to cuda "
                         "or use a gloo group for CPU tensors")


def check_shard_rows(shard_rows: object, world: int, *, total: int | None, what: str) -> tuple[int, ...]:
    """``shard_rows`` (one size >= 0 per rank, adding up to ``total`` when given, not all zero) as a tuple;
    ``()`` for even shards (empty or None)."""
    if shard_rows is None or (isinstance(shard_rows, (list, tuple)) and len(shard_rows) == 0):
        return ()
    if isinstance(shard_rows, (str, bytes, torch.Tensor)) or not isinstance(shard_rows, Sequence) or any(
            not isinstance(s, int) or isinstance(s, bool) for s in shard_rows):
        raise TypeError(f"shard_rows={shard_rows!r} must be a list of ints, one per rank ({what})")
    sizes = tuple(shard_rows)
    if len(sizes) != world:
        raise ValueError(f"shard_rows={list(sizes)} has {len(sizes)} entries but the group has {world} ranks; "
                         f"give one size per rank ({what})")
    if any(s < 0 for s in sizes):
        raise ValueError(f"shard_rows={list(sizes)} has a negative size; every rank holds >= 0 rows ({what})")
    if sum(sizes) == 0:
        raise ValueError(f"shard_rows={list(sizes)} are all zero; at least one rank must hold rows ({what})")
    if total is not None and sum(sizes) != total:
        raise ValueError(f"shard_rows={list(sizes)} add up to {sum(sizes)} but {what} has {total}; give sizes "
                         f"that add up to {total}")
    return sizes


def check_all_gather_matmul(A_shard: object, Bs: object, gather_dim: object, world: int,
                            shard_rows: object = (), rank: int | None = None) -> int:
    """Checks for ``all_gather_matmul``; returns the normalised gather dim. ``shard_rows``: every rank's
    size along the gather dim (uneven shards; empty: even), whose entry ``rank`` must be this rank's."""
    sizes = check_shard_rows(shard_rows, world, total=None, what="the gather dim's size on each rank")
    gdim = gather_dim if isinstance(gather_dim, int) and not isinstance(gather_dim, bool) else None
    A_shard = _check_tensor("A_shard", A_shard, min_dim=2, empty_dim=gdim if sizes else None)
    if isinstance(Bs, torch.Tensor) or not isinstance(Bs, Sequence):
        raise TypeError(f"Bs must be a list of 2-D tensors, got {type(Bs).__name__}; wrap one B as [B]")
    if len(Bs) == 0:
        raise ValueError("Bs is empty; pass at least one [K, N] matrix, e.g. Bs=[B]")
    dim = check_dim("gather_dim", gather_dim, A_shard.dim(), f"A_shard of shape {tuple(A_shard.shape)}")
    if sizes and rank is not None and sizes[rank] != A_shard.shape[dim]:
        raise ValueError(f"shard_rows={list(sizes)} gives rank {rank} {sizes[rank]} rows along gather_dim={dim} "
                         f"but its A_shard has shape {tuple(A_shard.shape)} ({A_shard.shape[dim]}); pass every "
                         f"rank's actual size, or shard_rows=None to read them from the tensors")
    k_local = A_shard.shape[-1]
    k_full = (sum(sizes) if sizes else k_local * world) if dim == A_shard.dim() - 1 else k_local
    for i, B in enumerate(Bs):
        B = _check_tensor(f"Bs[{i}]", B, min_dim=2, max_dim=2)
        _check_same("A_shard", A_shard, f"Bs[{i}]", B)
        if B.shape[0] != k_full:
            how = (f"gathering the last dim (K) of A_shard {tuple(A_shard.shape)} over {world} ranks gives "
                   f"K={k_full}" if k_full != k_local else f"A_shard {tuple(A_shard.shape)} has K={k_local}")
            raise ValueError(f"Bs[{i}] has shape {tuple(B.shape)} but {how}; B must be [{k_full}, N]")
    return dim


def check_matmul_reduce_scatter(A: object, B: object, reduce_op: object, scatter_dim: object, world: int,
                                shard_rows: object = ()) -> int:
    """Checks for ``matmul_reduce_scatter``; returns the normalised scatter dim. ``shard_rows``: the size
    along the scatter dim each rank receives (uneven shards; empty: even, a multiple of the group size)."""
    A, B = _check_matmul_pair(A, B)
    check_reduce_op(reduce_op)
    out_shape = (*A.shape[:-1], B.shape[1])
    dim = check_dim("scatter_dim", scatter_dim, len(out_shape), f"the output of shape {out_shape}")
    if shard_rows is not None and not (isinstance(shard_rows, (list, tuple)) and len(shard_rows) == 0):
        check_shard_rows(shard_rows, world, total=out_shape[dim],
                         what=f"dim {dim} of the output A @ B of shape {out_shape}")
        return dim
    if out_shape[dim] % world:
        raise ValueError(f"scatter_dim={dim}: the output A @ B has shape {out_shape} and its dim {dim} "
                         f"(size {out_shape[dim]}) is not divisible by the group size {world}; pad that dim to "
                         f"a multiple of {world} or scatter another dim")
    return dim


def check_matmul_all_reduce(A: object, B: object, reduce_op: object, *, uneven: bool = False) -> None:
    """Checks for ``matmul_all_reduce``; ``uneven``: the ranks' local K differ, so this rank's may be 0."""
    _check_matmul_pair(A, B, empty_k=uneven)
    check_reduce_op(reduce_op)


def _check_matmul_pair(A: object, B: object, *, empty_k: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    A = _check_tensor("A", A, min_dim=2, empty_dim=-1 if empty_k else None)
    B = _check_tensor("B", B, min_dim=2, max_dim=2, empty_dim=0 if empty_k else None)
    _check_same("A", A, "B", B)
    if A.shape[-1] != B.shape[0]:
        raise ValueError(f"K mismatch: A has shape {tuple(A.shape)} (K={A.shape[-1]}) but B has shape "
                         f"{tuple(B.shape)} (K={B.shape[0]}); B must be [{A.shape[-1]}, N]")
    return A, B

"""A small row piece's GEMM split along k, so that it runs on every SM.

A pipeline's exposed piece (the first piece of an offload to host: its copy waits for it; the
last piece from host: nothing overlaps its GEMM) is short on rows, so the library GEMM has
few output tiles: on an H200 a 128 x 8192 x 7168 bf16 piece took 0.054 ms, as long as a
256-row one (benchmarks/results/h200/run9_pieces). Cut along k into ``parts``, the same
work is ``parts`` times as many tiles: one batched GEMM of the k-slices
(``torch.bmm(..., out_dtype=torch.float32)`` where the build has it, so every partial sum
stays in fp32), then one reduction over the slices and one rounding into ``out``. The
result matches ``torch.mm`` to the rounding of one bf16 store.

:func:`split_k_parts` is the rule (plain Python); :func:`split_k_mm` runs it.
"""

from __future__ import annotations

import torch

TILE_ROWS, TILE_COLS = 128, 256
"""the library's large output tile (the unit of work one SM takes)."""
MAX_PARTS = 8
MIN_K_PER_PART = 512
"""a k-slice shorter than this spends more on its tile's prologue and epilogue than it saves."""

_FP32_PARTIALS: dict[str, bool] = {}
"""device type -> whether ``torch.bmm(..., out_dtype=torch.float32)`` runs there (probed once)."""


def split_k_parts(m: int, n: int, k: int, sm_count: int | None) -> int:
    """How many k-slices a ``[m, k] @ [k, n]`` piece is cut into: the largest power of two up to
    ``MAX_PARTS`` whose tiles (``TILE_ROWS`` x ``TILE_COLS`` output tiles times the parts) still
    fit in one wave of ``sm_count`` SMs, with slices of at least ``MIN_K_PER_PART`` that divide
    ``k``; 1 (no split) when the piece already fills the SMs or the device has none (CPU)."""
    for name, value in (("m", m), ("n", n), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int (a GEMM dimension)")
    if sm_count is None or sm_count < 2:
        return 1
    tiles = -(-m // TILE_ROWS) * -(-n // TILE_COLS)
    parts = 1
    while (parts * 2 <= MAX_PARTS and tiles * parts * 2 <= sm_count and k % (parts * 2) == 0
           and k // (parts * 2) >= MIN_K_PER_PART):
        parts *= 2
    return parts


def _fp32_partials(a3: torch.Tensor, b3: torch.Tensor) -> torch.Tensor | None:
    """``bmm`` of the slices into fp32, or None where this build has no ``out_dtype`` bmm."""
    if a3.dtype == torch.float32:
        return torch.bmm(a3, b3)
    kind = a3.device.type
    if _FP32_PARTIALS.get(kind) is False:
        return None
    try:
        result = torch.bmm(a3, b3, out_dtype=torch.float32)
    except (TypeError, RuntimeError, NotImplementedError):
        _FP32_PARTIALS[kind] = False
        return None
    _FP32_PARTIALS[kind] = True
    return result


def split_k_mm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, parts: int) -> torch.Tensor:
    """``out = a @ b`` with k cut into ``parts`` slices (``parts == 1`` or a k that does not split
    evenly: plain ``torch.mm``). ``out`` is ``[m, n]`` in ``a``'s dtype (a view is fine)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a {tuple(a.shape)} and b {tuple(b.shape)} must be [m, k] and [k, n]")
    if tuple(out.shape) != (a.shape[0], b.shape[1]):
        raise ValueError(f"out is {tuple(out.shape)}; it must be [{a.shape[0]}, {b.shape[1]}]")
    if not isinstance(parts, int) or isinstance(parts, bool) or parts < 1:
        raise ValueError(f"parts={parts!r} must be an int >= 1")
    m, k = a.shape
    n = b.shape[1]
    if parts == 1 or k % parts or m == 0:
        return torch.mm(a, b, out=out)
    if a.stride(1) != 1 or b.stride(1) != 1:
        a, b = a.contiguous(), b.contiguous()
    piece = k // parts
    a3 = a.as_strided((parts, m, piece), (piece, a.stride(0), 1))  # slice s: a[:, s*piece:(s+1)*piece]
    b3 = b.as_strided((parts, piece, n), (piece * b.stride(0), b.stride(0), 1))
    partials = _fp32_partials(a3, b3)
    if partials is None:  # partials in the input dtype, summed in fp32
        partials = torch.bmm(a3, b3)
    out.copy_(partials.sum(dim=0, dtype=torch.float32))
    return out

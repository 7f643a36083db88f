"""Tensor descriptors (TMA) for the tile-fused GEMMs' operands, built on the host per launch.

A descriptor addresses a 2-D row-major tensor whose base and row pitch are 16-byte aligned
and whose rows are contiguous; out-of-range blocks read as zero, so uneven shapes need no
masks. ``operand_descriptors`` returns None for each descriptor when the config does not ask
for them or the operands cannot have them, and the launch then loads through pointers.
"""

from __future__ import annotations

import torch

from hocket.kernels.config import TileConfig

ALIGN_BYTES = 16
"""What a tensor-map needs of the base address and of every stride but the last."""


def descriptor_ready(t: torch.Tensor) -> bool:
    """Whether ``t`` (2-D) can be addressed by a tensor descriptor: unit column stride,
    16-byte aligned base and row pitch."""
    if t.dim() != 2 or t.stride(1) != 1 or t.shape[0] < 1 or t.shape[1] < 1:
        return False
    return t.data_ptr() % ALIGN_BYTES == 0 and (t.stride(0) * t.element_size()) % ALIGN_BYTES == 0


def uses_descriptors(cfg: TileConfig, a: torch.Tensor, b: torch.Tensor) -> bool:
    """``cfg.tma`` and both operands descriptor-ready."""
    return cfg.tma and descriptor_ready(a) and descriptor_ready(b)


def operand_descriptors(cfg: TileConfig, a: torch.Tensor, b: torch.Tensor, narrow_n: int):
    """(A's, B's, B's narrow-tile) descriptors, or three Nones (pointer loads).

    A's blocks are ``[block_m, block_k]``, B's ``[block_k, block_n]`` and, where the kernel has
    narrow tiles (``narrow_n > 0``), ``[block_k, narrow_n]``.
    """
    if not uses_descriptors(cfg, a, b):
        return None, None, None
    from triton.tools.tensor_descriptor import TensorDescriptor

    a_desc = TensorDescriptor.from_tensor(a, [cfg.block_m, cfg.block_k])
    b_desc = TensorDescriptor.from_tensor(b, [cfg.block_k, cfg.block_n])
    narrow = TensorDescriptor.from_tensor(b, [cfg.block_k, narrow_n]) if narrow_n > 0 else None
    return a_desc, b_desc, narrow

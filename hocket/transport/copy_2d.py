"""Strided (2D) asynchronous copies between pinned host memory and a GPU, on a given stream.

torch copies a non-contiguous host view through a temporary and a host-side step, which is
neither asynchronous nor what a pipeline wants. A block of rows *and columns* of a row-major
matrix is a 2D region: ``height`` rows of ``width`` bytes, each ``pitch`` bytes apart, which
the copy engines move in one DMA. The offload pipelines use it at their exposed edge: to
host, the first rows are produced and copied a column block at a time (a column block's GEMM
reads only its slice of B); from host, the last rows arrive a k block at a time (each block's
partial product reads only its rows of B).

The driver entry point (``cuMemcpy2DAsync``) is called through :mod:`ctypes` on ``libcuda``
like :mod:`hocket.kernels.stream_memops`; both pointers are passed as unified addresses
(pinned host memory allocated by torch is mapped into the GPU's address space).
"""

from __future__ import annotations

import ctypes
import functools

import torch

_MEMORYTYPE_UNIFIED = 4  # CU_MEMORYTYPE_UNIFIED: the pointer is a unified virtual address


class _Memcpy2D(ctypes.Structure):
    """``CUDA_MEMCPY2D`` (cuda.h): source and destination position, kind, pointer and pitch,
    then the region's width in bytes and height in rows."""

    _fields_ = [
        ("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t), ("srcMemoryType", ctypes.c_int),
        ("srcHost", ctypes.c_void_p), ("srcDevice", ctypes.c_uint64), ("srcArray", ctypes.c_void_p),
        ("srcPitch", ctypes.c_size_t),
        ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t), ("dstMemoryType", ctypes.c_int),
        ("dstHost", ctypes.c_void_p), ("dstDevice", ctypes.c_uint64), ("dstArray", ctypes.c_void_p),
        ("dstPitch", ctypes.c_size_t),
        ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t),
    ]


@functools.lru_cache(maxsize=1)
def _memcpy_2d_async():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise RuntimeError(f"strided host copies need the CUDA driver (libcuda.so.1 could not be loaded: {exc}); "
                           f"use row pieces (contiguous copies) instead") from exc
    fn = getattr(lib, "cuMemcpy2DAsync_v2", None) or getattr(lib, "cuMemcpy2DAsync", None)
    if fn is None:
        raise RuntimeError("this CUDA driver exports no cuMemcpy2DAsync; use row pieces (contiguous copies) instead")
    fn.argtypes = (ctypes.POINTER(_Memcpy2D), ctypes.c_void_p)
    fn.restype = ctypes.c_int
    return fn


def region(t: torch.Tensor, name: str) -> tuple[int, int, int]:
    """``(pitch, width, height)`` in bytes and rows of a 2D view whose rows are contiguous.

    Raises ``ValueError`` naming ``name`` when ``t`` is not such a view.
    """
    if t.dim() != 2:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; a 2D copy needs a matrix view (rows x columns)")
    if t.shape[1] > 1 and t.stride(1) != 1:
        raise ValueError(f"{name} has strides {tuple(t.stride())}; its rows must be contiguous (stride 1 along "
                         f"columns): take column blocks of a row-major matrix, not of its transpose")
    item = t.element_size()
    width = t.shape[1] * item
    pitch = max(t.stride(0) * item, width) if t.shape[0] > 1 else width
    return pitch, width, t.shape[0]


def check_pair(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Raise ``ValueError`` unless ``dst`` and ``src`` are same-shape, same-dtype row-contiguous
    matrices, one on a GPU and the other pinned on the host (or both on one GPU)."""
    region(dst, "dst")
    region(src, "src")
    if dst.shape != src.shape or dst.dtype != src.dtype:
        raise ValueError(f"dst is {tuple(dst.shape)} {dst.dtype} but src is {tuple(src.shape)} {src.dtype}; "
                         f"a 2D copy moves one region as it is")
    for name, t in (("dst", dst), ("src", src)):
        if t.device.type == "cpu" and not t.is_pinned():
            raise ValueError(f"{name} is in pageable host memory; a 2D copy needs pinned memory "
                             f"(torch.empty(..., pin_memory=True))")
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{name} is on {t.device}; a 2D copy moves between pinned host memory and a CUDA GPU")
    if dst.device.type == "cpu" and src.device.type == "cpu":
        raise ValueError("dst and src are both on the host; copy them with torch (Tensor.copy_)")


def copy_2d_async(dst: torch.Tensor, src: torch.Tensor, stream: torch.cuda.Stream) -> None:
    """Enqueue ``dst.copy_(src)`` on ``stream`` as one strided DMA (``cuMemcpy2DAsync``).

    ``dst``/``src``: same-shape matrices whose rows are contiguous (any row stride), one pinned on
    the host and one on ``stream``'s GPU. The host side must stay alive and untouched until the
    stream passes the copy, as for any asynchronous copy.
    """
    check_pair(dst, src)
    if dst.numel() == 0:
        return
    s_pitch, width, height = region(src, "src")
    d_pitch, _, _ = region(dst, "dst")
    spec = _Memcpy2D()
    spec.srcMemoryType = _MEMORYTYPE_UNIFIED
    spec.srcDevice = src.data_ptr()
    spec.srcPitch = s_pitch
    spec.dstMemoryType = _MEMORYTYPE_UNIFIED
    spec.dstDevice = dst.data_ptr()
    spec.dstPitch = d_pitch
    spec.WidthInBytes = width
    spec.Height = height
    result = _memcpy_2d_async()(ctypes.byref(spec), ctypes.c_void_p(stream.cuda_stream))
    if result:
        raise RuntimeError(f"cuMemcpy2DAsync of {height} rows x {width} bytes (pitches {s_pitch} -> {d_pitch}) "
                           f"failed with CUDA driver error {result}")

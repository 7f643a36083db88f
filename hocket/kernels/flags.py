"""Flag primitives of the tile-fused kernels (Triton; imported lazily by hocket.kernels).

A flag is one int32 in device (or host-mapped) memory; 0 = not ready, 1 = ready.

* ``wait_flag`` (device function): poll with system-scope acquire loads until the flag is
  set, at most ``max_spins`` polls; on timeout record ``code`` in the error buffer. A wait
  that starts after another wait already failed gives up at once, so a lost flag ends
  the kernel in about one spin cap instead of one cap per tile.
* ``async_proxy_fence`` (device function): after a wait, before loads through tensor
  descriptors (TMA reads through the async proxy, which an acquire alone does not order).
* ``raise_flag`` (device function): system-scope release store of 1, after the caller's
  prior writes (callers put a ``tl.debug_barrier()`` before it so every thread's stores are
  ordered before the release).
* ``wait_flag_kernel`` / ``set_flag_kernel``: one-program kernels for streams (a copy
  stream waits on a producer group's flag; a copy stream raises a consumer's flag when
  ``cuStreamWriteValue32`` is not reachable through torch).
* host helpers: ``reset_flags``, ``set_flag_on_stream``, ``wait_flag_on_stream``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hocket.kernels.config import FP_FUSION
from hocket.kernels.errors import COPY_WAIT_SLOT


@triton.jit
def wait_flag(flag_ptr, err_ptr, code, max_spins):
    """Spin (bounded) until ``*flag_ptr >= 1`` with acquire semantics; record ``code`` on timeout."""
    failed_before = tl.load(err_ptr, volatile=True)
    cap = tl.where(failed_before != 0, 0, max_spins)
    value = tl.atomic_add(flag_ptr, 0, sem="acquire", scope="sys")
    spins = 0
    while (value < 1) & (spins < cap):
        value = tl.atomic_add(flag_ptr, 0, sem="acquire", scope="sys")
        spins += 1
    if value < 1:
        tl.atomic_cas(err_ptr, 0, code)


@triton.jit
def async_proxy_fence(value):
    """``fence.proxy.async.global``: order the flag read before this (generic proxy) ahead of
    the tensor-descriptor (TMA, async proxy) loads after it. Returns ``value`` (inline
    assembly must produce something). GPU only: the interpreter cannot run PTX."""
    return tl.inline_asm_elementwise("fence.proxy.async.global;\n mov.b32 $0, $1;", "=r,r", [value],
                                     dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def raise_flag(flag_ptr):
    tl.atomic_xchg(flag_ptr, 1, sem="release", scope="sys")


@triton.jit(do_not_specialize=["index", "max_spins"])
def wait_flag_kernel(flags_ptr, index, err_ptr, max_spins, ERR_SLOT: tl.constexpr):
    wait_flag(flags_ptr + index, err_ptr + ERR_SLOT, index + 1, max_spins)


@triton.jit(do_not_specialize=["index"])
def set_flag_kernel(flags_ptr, index):
    raise_flag(flags_ptr + index)


def reset_flags(*tensors: torch.Tensor) -> None:
    """Zero flags / counters / error buffers on the current stream (a memset, no kernel)."""
    for t in tensors:
        t.zero_()


def stream_write_available() -> bool:
    """Whether torch exposes ``cuStreamWriteValue32`` (``symm_mem.stream_write_value32_``)."""
    return hasattr(torch.ops, "symm_mem") and hasattr(torch.ops.symm_mem, "stream_write_value32_")


def set_flag_on_stream(flags: torch.Tensor, index: int, *, method: str = "auto") -> None:
    """Raise ``flags[index]`` on the current stream, after the work already on it.

    ``method="stream_write"`` uses ``cuStreamWriteValue32`` through torch (no SM needed, it
    fences system-wide before the write); ``"kernel"`` launches a one-program Triton
    kernel; ``"auto"`` prefers the first.
    """
    if method == "auto":
        method = "stream_write" if stream_write_available() else "kernel"
    if method == "stream_write":
        torch.ops.symm_mem.stream_write_value32_(flags.view(torch.uint32), int(index), 1)
    elif method == "kernel":
        set_flag_kernel[(1,)](flags, int(index), num_warps=1, **FP_FUSION)
    else:
        raise ValueError(f"method={method!r} must be 'auto', 'stream_write' or 'kernel'")


def wait_flag_on_stream(flags: torch.Tensor, index: int, errors: torch.Tensor, *, max_spins: int) -> None:
    """Hold the current stream until ``flags[index]`` rises (one program spins; bounded)."""
    wait_flag_kernel[(1,)](flags, int(index), errors, int(max_spins), ERR_SLOT=COPY_WAIT_SLOT, num_warps=1,
                           **FP_FUSION)

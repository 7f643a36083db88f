"""Flags between GPUs: a stream waits until a range of flags that peers raise has risen (Triton).

Peer transports (``hocket.ops.lowering.peer_pipe``) push data into another GPU's
symmetric memory and then raise that GPU's flag with ``set_flag_on_stream`` (one
program, system-scope release). The receiving GPU's compute stream waits with
:func:`wait_flag_range_on_stream`: one program polls flags ``start .. start+count-1``
with system-scope acquire loads, each poll bounded, and records ``index + 1`` of the
first flag that never rose into a one-slot error buffer. The wait occupies one SM while
it spins; the work that raises the flags runs on another GPU (or on copy engines), so
the spin always ends or times out. See docs/transports.md.
"""

from __future__ import annotations

import torch
import triton

from hocket.kernels.config import FP_FUSION
from hocket.kernels.flags import wait_flag


@triton.jit(do_not_specialize=["start", "count", "max_spins"])
def wait_flag_range_kernel(flags_ptr, start, count, err_ptr, max_spins):
    for i in range(start, start + count):
        wait_flag(flags_ptr + i, err_ptr, i + 1, max_spins)


def peer_error_buffer(device: torch.device | str) -> torch.Tensor:
    """One int32 slot: ``index + 1`` of the first peer flag that never rose, else 0."""
    return torch.zeros(1, dtype=torch.int32, device=device)


def wait_flag_range_on_stream(flags: torch.Tensor, start: int, count: int, errors: torch.Tensor, *,
                              max_spins: int) -> None:
    """Hold the current stream until ``flags[start:start+count]`` have all risen (bounded)."""
    if count < 1:
        return
    if not 0 <= start and start + count <= flags.numel():
        raise ValueError(f"flag range {start}..{start + count - 1} is outside the {flags.numel()} flags")
    wait_flag_range_kernel[(1,)](flags, int(start), int(count), errors, int(max_spins), num_warps=1, **FP_FUSION)

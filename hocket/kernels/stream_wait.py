"""Stream waits on a flag value in the GPU's front end (``cuStreamWaitValue32``), no SM used.

A copy that must start when a kernel raises a flag (a producer GEMM's finished group) can
be gated by the stream itself: the D2H stream holds at a *wait-value* operation until the
flag is >= the value, then its next copy starts at once. Compared with a one-program spin
kernel plus an event (``hocket.kernels.flags.wait_flag_on_stream``) this needs no SM, no
kernel launch and no cross-stream event between the flag's rise and the copy.

The driver call itself is :mod:`hocket.kernels.stream_memops` (``ctypes`` on ``libcuda``; torch
exposes the write but not the wait); this module is its tensor-flag form.

No bound: the driver's wait has no timeout. Use it only for flags that the work enqueued
*before* the wait raises unconditionally (the producer GEMM raises every group flag when
it finishes; a kernel fault ends the CUDA context and the wait with it). A flag that may
never rise (a peer's, a lost chunk's) takes the bounded spin kernel instead, or a watchdog that
releases the wait from the host (the host-staged relay: ``hocket.transport.relay_watchdog``).
"""

from __future__ import annotations

import functools

import torch

from hocket.kernels import stream_memops


def _check_flags(flags: torch.Tensor, index: int) -> None:
    if not isinstance(flags, torch.Tensor) or flags.dtype != torch.int32 or flags.device.type != "cuda":
        raise TypeError(f"flags must be an int32 CUDA tensor, got {getattr(flags, 'dtype', type(flags))} on "
                        f"{getattr(flags, 'device', '?')}")
    if not flags.is_contiguous():
        raise ValueError(f"flags must be contiguous (stride {flags.stride()}); pass flags.contiguous()")
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < flags.numel():
        raise ValueError(f"index={index!r} must be an int in [0, {flags.numel()}) (the flag to wait on)")


def wait_value_on_stream(flags: torch.Tensor, index: int, *, stream: torch.cuda.Stream | None = None,
                         value: int = 1) -> None:
    """Hold ``stream`` (default: the current one) until ``flags[index] >= value``; unbounded
    (see the module note): the flag must be raised by work enqueued before this call."""
    _check_flags(flags, index)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
        raise ValueError(f"value={value!r} must be an int in [0, 2**31)")
    if not stream_memops.available():
        raise RuntimeError("cuStreamWaitValue32 is not reachable (no libcuda.so.1 with it); "
                           "use hocket.kernels.wait_flag_on_stream (a bounded spin kernel) instead")
    stream = stream if stream is not None else torch.cuda.current_stream(flags.device)
    stream_memops.wait_value_geq(stream, flags.data_ptr() + index * flags.element_size(), value)


@functools.cache
def stream_wait_available(device_index: int) -> bool:
    """Whether this device's streams accept a driver wait-value (checked once per device on
    a flag that is already set, so the probe never waits)."""
    if not isinstance(device_index, int) or isinstance(device_index, bool) or device_index < 0:
        raise ValueError(f"device_index={device_index!r} must be a CUDA device index >= 0")
    if not stream_memops.available():
        return False
    with torch.cuda.device(device_index):
        flag = torch.ones(1, dtype=torch.int32, device=f"cuda:{device_index}")
        stream = torch.cuda.Stream(device_index)
        stream.wait_stream(torch.cuda.current_stream(device_index))
        try:
            stream_memops.wait_value_geq(stream, flag.data_ptr(), 1)
        except RuntimeError:  # the driver refused the operation on this device
            return False
        finally:
            stream.synchronize()
    return True

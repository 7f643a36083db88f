"""CUDA stream memory operations: a stream waits for, or writes, a 32-bit value in memory the GPU
can reach (here: pinned host memory that several processes map), without any SM and without the
host waiting.

:mod:`hocket.kernels.stream_wait` holds a copy stream until a producer GEMM's flag rises with the
same wait. The host-staged relay (``hocket.transport.host_relay``) uses them as its cross-process
signals: after a rank's device-to-host copy of a message its copy stream sets
the slot's flag in the shared header to 1; a peer's host-to-device stream waits until it is 1, copies,
and resets it to 0, which the sender waits for before it reuses the slot. The wait is done by the GPU's stream front end
(``cuStreamWaitValue32``), not by a spinning kernel, so it neither needs a free SM beside a GEMM
that fills them all nor holds the launching thread.

torch has no public binding for the wait (it has ``symm_mem.stream_write_value32_`` for writes), so
this module calls the CUDA driver's documented entry points through :mod:`ctypes` (``libcuda``, the
driver torch itself runs on). A stream wait has no timeout of its own: its caller bounds it with a
watchdog that writes the awaited value from the host when the peer never does (see
``hocket.transport.relay_watchdog``).
"""

from __future__ import annotations

import ctypes
import functools

import torch

WAIT_GEQ = 0x0
"""``CU_STREAM_WAIT_VALUE_GEQ``: wait until ``(int32_t)(*addr - value) >= 0`` (wraps like a
sequence number)."""
WAIT_EQ = 0x1
"""``CU_STREAM_WAIT_VALUE_EQ``: wait until ``*addr == value``."""
WRITE_DEFAULT = 0x0
"""``CU_STREAM_WRITE_VALUE_DEFAULT``: a system-wide memory fence before the write, so the stream's
earlier copies are visible to any reader that sees the value."""
_HOST_REGISTER_PORTABLE = 0x1
_HOST_REGISTER_MAPPED = 0x2
HOST_REGISTER_FLAGS = _HOST_REGISTER_PORTABLE | _HOST_REGISTER_MAPPED
"""``cudaHostRegister`` flags for memory the streams of this module address: mapped into the device
address space, in every context of the process."""


class StreamMemopsUnavailable(RuntimeError):
    """This process cannot issue stream memory operations (no CUDA driver, or one without them)."""


@functools.lru_cache(maxsize=1)
def _driver():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise StreamMemopsUnavailable(f"the CUDA driver library libcuda.so.1 could not be loaded ({exc}); "
                                      f"stream memory operations (the host-staged relay's signals) need an NVIDIA "
                                      f"driver: install one, or use a plan with transport='collective'") from exc
    functions = {}
    for name in ("cuStreamWaitValue32", "cuStreamWriteValue32"):
        fn = getattr(lib, f"{name}_v2", None) or getattr(lib, name, None)
        if fn is None:
            raise StreamMemopsUnavailable(f"the CUDA driver has no {name}; the host-staged relay's signals need "
                                          f"CUDA >= 11.7 stream memory operations: update the NVIDIA driver, or "
                                          f"use a plan with transport='collective'")
        fn.argtypes = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint)
        fn.restype = ctypes.c_int
        functions[name] = fn
    get_pointer = lib.cuMemHostGetDevicePointer_v2
    get_pointer.argtypes = (ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint)
    get_pointer.restype = ctypes.c_int
    functions["cuMemHostGetDevicePointer"] = get_pointer
    return functions


def available() -> bool:
    """Whether stream memory operations can be issued here (a CUDA device and its driver)."""
    if not torch.cuda.is_available():
        return False
    try:
        _driver()
    except StreamMemopsUnavailable:
        return False
    return True


def _check(result: int, what: str) -> None:
    if result != 0:
        raise RuntimeError(f"{what} failed with CUDA driver error {result} (CUresult; 801 = stream memory operations "
                           f"not supported on this device/driver): update the NVIDIA driver, or use a plan with "
                           f"transport='collective' instead of the host-staged relay")


@functools.lru_cache(maxsize=256)
def _handle(cuda_stream: int) -> ctypes.c_void_p:
    """The driver handle of a stream (``torch.cuda.Stream.cuda_stream``), made once per stream: the
    relay issues several memory operations per message on the same few streams."""
    return ctypes.c_void_p(cuda_stream)


def device_pointer(host_ptr: int) -> int:
    """The device address of registered (``HOST_REGISTER_FLAGS``) host memory at ``host_ptr``; the
    calling thread must have the device's context current (any torch CUDA call on it does that)."""
    out = ctypes.c_uint64(0)
    _check(_driver()["cuMemHostGetDevicePointer"](ctypes.byref(out), ctypes.c_void_p(host_ptr), 0),
           f"cuMemHostGetDevicePointer(0x{host_ptr:x})")
    return int(out.value)


def _check_value(value: int) -> int:
    if not 0 <= int(value) < 2**32:
        raise ValueError(f"value={value!r} must fit in 32 unsigned bits")
    return int(value)


def wait_value_geq(stream: torch.cuda.Stream, address: int, value: int) -> None:
    """Work enqueued on ``stream`` after this starts once the 32-bit word at device ``address`` is >=
    ``value`` (sequence-number comparison). Unbounded: the caller must arrange a release."""
    result = _driver()["cuStreamWaitValue32"](_handle(stream.cuda_stream), address, _check_value(value), WAIT_GEQ)
    if result:  # the message only on failure: this runs several times per relay message
        _check(result, f"cuStreamWaitValue32(address 0x{address:x}, >= {value})")


def wait_value_eq(stream: torch.cuda.Stream, address: int, value: int) -> None:
    """Work enqueued on ``stream`` after this starts once the 32-bit word at device ``address`` equals
    ``value`` (a flag that toggles: the value is a constant, so a CUDA graph may capture the wait).
    Unbounded: the caller must arrange a release."""
    result = _driver()["cuStreamWaitValue32"](_handle(stream.cuda_stream), address, _check_value(value), WAIT_EQ)
    if result:
        _check(result, f"cuStreamWaitValue32(address 0x{address:x}, == {value})")


def write_value(stream: torch.cuda.Stream, address: int, value: int) -> None:
    """Write ``value`` to the 32-bit word at device ``address`` once ``stream``'s earlier work is done
    (after a system-wide fence)."""
    result = _driver()["cuStreamWriteValue32"](_handle(stream.cuda_stream), address, _check_value(value),
                                               WRITE_DEFAULT)
    if result:
        _check(result, f"cuStreamWriteValue32(address 0x{address:x}, {value})")

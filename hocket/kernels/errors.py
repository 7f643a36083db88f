"""Timeouts recorded by spinning kernels, turned into clear host errors (no Triton needed).

A kernel that gives up waiting writes ``index + 1`` of the flag it waited on into one
slot of a small int32 error buffer; the host reads the buffer after the work is done.
"""

from __future__ import annotations

import torch

CONSUMER_SLOT = 0
"""consumer GEMM tiles waiting on an input chunk's flag."""
COPY_WAIT_SLOT = 1
"""a copy stream waiting on a producer group's flag before its transfer."""
NUM_SLOTS = 2

SPINS_PER_SECOND = 1_000_000
"""Rough rate of flag polls (one acquire load each takes ~0.5-2 us on an H200)."""
MAX_SPINS = 2**31 - 1


class FlagTimeoutError(RuntimeError):
    """A kernel waited on a flag that never rose within its spin cap."""


def error_buffer(device: torch.device | str) -> torch.Tensor:
    return torch.zeros(NUM_SLOTS, dtype=torch.int32, device=device)


def spins_for_timeout(timeout_s: float) -> int:
    """Spin cap for a wait bounded by about ``timeout_s`` seconds."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s!r} must be > 0 seconds (HOCKET_TIMEOUT_S)")
    return max(1, min(MAX_SPINS, int(timeout_s * SPINS_PER_SECOND)))


def raise_on_timeout(errors: torch.Tensor, *, max_spins: int, context: str = "") -> None:
    """Read the error buffer (synchronises with its device) and raise if any wait gave up."""
    values = errors.detach().to("cpu").tolist()
    where = f" in {context}" if context else ""
    consumer, copy_wait = values[CONSUMER_SLOT], values[COPY_WAIT_SLOT]
    if consumer:
        raise FlagTimeoutError(
            f"chunk {consumer - 1}'s flag never rose{where}: the consumer GEMM gave up after "
            f"{max_spins} polls, so its output is invalid. The transfer that should deliver chunk "
            f"{consumer - 1} was not enqueued, failed, or is slower than the bound (raise HOCKET_TIMEOUT_S)."
        )
    if copy_wait:
        raise FlagTimeoutError(
            f"group {copy_wait - 1}'s flag never rose{where}: the copy stream waited {max_spins} polls "
            f"for the producer GEMM to finish that group, so the transferred result is invalid. "
            f"The producer was not launched, failed, or is slower than the bound (raise HOCKET_TIMEOUT_S)."
        )

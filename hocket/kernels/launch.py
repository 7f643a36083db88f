"""Host launchers of the tile-fused GEMMs and their warm-up (imports Triton)."""

from __future__ import annotations

import torch
from triton.runtime.interpreter import InterpretedFunction

from hocket.kernels.config import FP_FUSION
from hocket.kernels.consumer import consumer_gemm_kernel
from hocket.kernels.descriptors import operand_descriptors
from hocket.kernels.errors import COPY_WAIT_SLOT
from hocket.kernels.flags import set_flag_on_stream, wait_flag_kernel
from hocket.kernels.producer import producer_gemm_kernel
from hocket.kernels.workspace import ConsumerWorkspace, ProducerWorkspace, signature

_INTERPRETED = isinstance(consumer_gemm_kernel, InterpretedFunction)
"""True when TRITON_INTERPRET=1 was set before this module was imported (CPU tests)."""


def _not_warmed(ws, a, b, out) -> RuntimeError:
    return RuntimeError(
        f"the {ws.kind} GEMM was not warmed up for A{tuple(a.shape)} {a.dtype}, B{tuple(b.shape)}, "
        f"out{tuple(out.shape)} (or their strides/alignment changed): call "
        f"hocket.kernels.warmup_{ws.kind}(workspace, A, B, out) first, before any spinning work is "
        f"enqueued; loading a kernel beside a spinning one can deadlock"
    )


def consumer_gemm(a: torch.Tensor, b: torch.Tensor, *, workspace: ConsumerWorkspace, out: torch.Tensor,
                  wait: bool = True) -> torch.Tensor:
    """``out = a @ b`` in one persistent launch; with ``wait`` each tile first waits on the
    flags of the chunks of ``a`` it reads (``workspace.flags``, raised by the transfer).

    Every flag this launch waits on must be raised by work already enqueued (or by another
    device); the launch is bounded by ``workspace.max_spins`` polls per wait and records a
    timeout in ``workspace.errors`` (see ``hocket.kernels.errors.raise_on_timeout``).
    """
    ws = workspace
    ws.check_operands(a, b, out)
    if wait and signature(a, b, out) not in ws.warmed:
        raise _not_warmed(ws, a, b, out)
    _launch_consumer(ws, a, b, out, wait=wait)
    return out


def _descriptors(ws, a, b) -> tuple:
    """The operands' descriptors (or Nones) and the TMA constexpr of this launch."""
    descs = operand_descriptors(ws.config, a, b, ws.schedule.narrow_block_n or 0)
    return descs, descs[0] is not None


def _launch_consumer(ws: ConsumerWorkspace, a, b, out, *, wait: bool) -> None:
    descs, tma = _descriptors(ws, a, b)
    consumer_gemm_kernel[(ws.num_programs,)](
        a, b, out, *descs, ws.table, ws.flags, ws.errors, *ws.split_args(), ws.m, ws.n, ws.k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        ws.num_tiles, ws.max_spins, WAIT=wait, TMA=tma, PROXY_FENCE=tma and wait and not _INTERPRETED,
        **ws.launch_flags(interpreted=_INTERPRETED))


def producer_gemm(a: torch.Tensor, b: torch.Tensor, *, workspace: ProducerWorkspace, out: torch.Tensor,
                  signal: bool = True) -> torch.Tensor:
    """``out = a @ b`` in one persistent launch, group by group; with ``signal`` each
    finished group raises ``workspace.flags[group]`` (counters and flags must be zero:
    ``reset_producer(workspace)`` on the same stream first)."""
    ws = workspace
    ws.check_operands(a, b, out)
    if signal and signature(a, b, out) not in ws.warmed:
        raise _not_warmed(ws, a, b, out)
    _launch_producer(ws, a, b, out, signal=signal)
    return out


def _launch_producer(ws: ProducerWorkspace, a, b, out, *, signal: bool) -> None:
    descs, tma = _descriptors(ws, a, b)
    producer_gemm_kernel[(ws.num_programs,)](
        a, b, out, *descs, ws.table, ws.counters, ws.flags, *ws.split_args(), ws.m, ws.n, ws.k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        ws.num_tiles, SIGNAL=signal, TMA=tma, **ws.launch_flags(interpreted=_INTERPRETED))


def reset_consumer(ws: ConsumerWorkspace) -> None:
    """Zero chunk flags and the error buffer on the current stream."""
    ws.flags.zero_()
    ws.errors.zero_()
    ws.reset_splits()


def reset_producer(ws: ProducerWorkspace) -> None:
    """Zero group flags, group counters and the error buffer on the current stream."""
    ws.flags.zero_()
    ws.counters.zero_()
    ws.errors.zero_()
    ws.reset_splits()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def warmup_consumer(ws: ConsumerWorkspace, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *,
                    flag_method: str = "auto") -> None:
    """Compile and load every kernel a consumer call with these operands uses, flags pre-set
    (nothing spins): the consumer GEMM and, if flags are raised by a kernel, that kernel.
    Writes ``out`` (overwritten by the next real call) and leaves the flags reset."""
    ws.check_operands(a, b, out)
    ws.flags.fill_(1)
    ws.errors.zero_()
    _launch_consumer(ws, a, b, out, wait=True)
    if ws.device.type == "cuda":
        set_flag_on_stream(ws.flags, 0, method=flag_method)
    _sync(ws.device)
    reset_consumer(ws)
    _sync(ws.device)
    ws.warmed.add(signature(a, b, out))


def warmup_producer(ws: ProducerWorkspace, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """Compile and load the producer GEMM (signalling) and the copy-side flag wait, without
    spinning (the wait runs after the producer raised every flag)."""
    ws.check_operands(a, b, out)
    reset_producer(ws)
    _launch_producer(ws, a, b, out, signal=True)
    wait_flag_kernel[(1,)](ws.flags, 0, ws.errors, ws.max_spins, ERR_SLOT=COPY_WAIT_SLOT, num_warps=1, **FP_FUSION)
    _sync(ws.device)
    if int(ws.flags.min()) != 1 or int(ws.errors.max()) != 0:
        raise RuntimeError(f"producer warm-up did not raise every group flag: flags={ws.flags.tolist()}, "
                           f"errors={ws.errors.tolist()}")
    reset_producer(ws)
    _sync(ws.device)
    ws.warmed.add(signature(a, b, out))

"""Single-device offload operators: a GEMM whose input comes from, or whose output goes to,
pinned host memory over PCIe, with the copy overlapped with the GEMM.

* ``matmul_from_host(A_host, B)`` -> ``A_host @ B`` on B's GPU; ``A_host`` is pinned host memory.
* ``matmul_to_host(A, B, out=None)`` -> ``A @ B`` in pinned host memory.

Strategies (``plan.strategy``; ``plan.chunks`` pieces; the transport is always host_staged):

* ``sequential``: copy then mm (or mm then copy), one stream;
* ``chunked``: row chunks, copies on a copy stream, one ``torch.mm`` per chunk, ordered by events;
* ``tile_fused``: one persistent Triton GEMM whose tiles wait on chunk flags raised after
  each host->device copy (``consumer_gemm``), or whose finished row groups raise flags that
  release each group's device->host copy (``producer_gemm``).

``plan=None`` runs the plan :func:`hocket.plan.offload.choose_offload_plan` predicts fastest for the
call's shape on this machine (sequential, even or ramped ``chunked``, ``tile_fused``), chosen once per
shape bucket of ``m`` (:func:`hocket.ops.offload_plans.planned`).

Pieces (``hocket.ops.offload_pieces``): ``plan.split_sizes`` if given, else even for
``chunked`` and a geometric ramp for ``tile_fused`` (one row block where the pipeline is
exposed: the first group to host, the last chunk from host; that piece's tiles are narrow;
``hocket.kernels.schedule.trapezoid_row_offsets`` gives sizes small at both ends).

tile_fused defaults (``OffloadContext``): the shape's tile config (``offload_tile_config``:
``config_for``'s tiles with tensor-descriptor loads), fixed-stride tiles, narrow tiles on the
edge piece and on as many more row blocks as fill the launch's last wave (``fused_narrow_rows``),
to-host copies held at their flags by a driver wait on the copy stream (spin kernels on a side
stream where the driver has none), from-host chunk flags raised behind each copy on the copy
stream. The options measured no better than these and removed are listed in
benchmarks/results/h200/2026-12-01_probes.md.

Resources (copy streams, pinned and device staging buffers, kernel workspaces) live in an
:class:`OffloadContext`; without ``context=`` each device gets one default context, kept
until :func:`close_offload_contexts`.
"""

from __future__ import annotations

import functools

import torch

from hocket.core.plan import Plan
from hocket.kernels.config import TileConfig, fused_config, persistent_programs
from hocket.kernels.errors import NUM_SLOTS, raise_on_timeout
from hocket.kernels.schedule import tail_narrow_rows
from hocket.kernels.workspace import ConsumerWorkspace, ProducerWorkspace
from hocket.ops.executors import executor_for, register_executor
from hocket.ops.offload_fused import fused_from_host, fused_to_host
from hocket.ops.offload_pieces import EDGE_PIECES, edge_rows, piece_offsets
from hocket.ops.offload_plans import CHUNK_ALIGN_ROWS, _resolve_plan
from hocket.transport.host_staged import HostStagedContext, cuda_device, require_cuda

COPY_WAITS = ("auto", "stream", "side_kernel")


def _matrix(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D [rows, cols], got shape {tuple(t.shape)}; fold batch dims into rows")
    return t


def _check_pair(a_name: str, a: torch.Tensor, b: torch.Tensor) -> None:
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{a_name}.shape={tuple(a.shape)} and B.shape={tuple(b.shape)}: inner dims differ "
                         f"(k={a.shape[1]} vs {b.shape[0]}); B must be [k, n]")
    if a.dtype != b.dtype:
        raise ValueError(f"{a_name}.dtype={a.dtype} but B.dtype={b.dtype}; cast one so both match")


def _check_pinned_host(name: str, t: torch.Tensor) -> None:
    if t.device.type != "cpu":
        raise ValueError(f"{name} is on {t.device}; it must be in pinned host memory ({name}.cpu().pin_memory())")
    if not t.is_pinned():
        raise ValueError(f"{name} is pageable host memory; pin it ({name}.pin_memory()) so copies can overlap")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (stride {t.stride()}); use {name}.contiguous()")


def _check_cuda(name: str, t: torch.Tensor) -> None:
    if t.device.type != "cuda":
        raise ValueError(f"{name} is on {t.device}; it must be on a CUDA device ({name}.cuda())")


def _resolve_copy_wait(copy_wait: str, device: torch.device) -> str:
    from hocket.kernels.stream_wait import stream_wait_available

    if copy_wait == "stream" and not stream_wait_available(device.index):
        raise ValueError(f"copy_wait='stream' but {device} offers no stream wait-value (cuStreamWaitValue32); "
                         f"use copy_wait='side_kernel'")
    if copy_wait != "auto":
        return copy_wait
    return "stream" if stream_wait_available(device.index) else "side_kernel"


def offload_tile_config(m: int, n: int, k: int, dtype: torch.dtype) -> TileConfig:
    """The offload operators' default tile config (see :meth:`OffloadContext.tile_config`).

    16-bit: ``config_for``'s tiles (128x256x64, 4 stages, 128-wide narrow tiles, where ``n >= 256``)
    loaded through tensor descriptors (``tma=True``). On an H200 (``probe_fused_tma.py`` in
    benchmarks/results/h200/2026-12-01_probes.md; tile_fused medians of 50 and the fused GEMM alone in
    alternation with cuBLAS), against the previous default (128x128 tiles through pointers for n >= 2048;
    64-wide edge tiles): with the context's last-wave balancing the GEMM alone went from 79-93% to 91-97%
    of cuBLAS on the eight offload cells of benchmarks/results/h200/2026-11-30_offload-defaults.md, while
    every tile_fused pipeline stayed within 0.02 ms
    (8192x8192x7168 to / from host 2.257 / 2.531 against 2.256 / 2.528). 128x128 tiles lose to host
    at n=1280 (0.843 against 0.513 ms). Operands whose rows a descriptor cannot address load through
    pointers. Other dtypes: ``config_for`` (descriptor loads not measured there)."""
    return fused_config(m, n, k, dtype)


@functools.lru_cache(maxsize=256)
def fused_narrow_rows(offsets: tuple[int, ...], *, direction: str, n: int, config: TileConfig, programs: int,
                      edge_pieces: int = EDGE_PIECES, balance_tail: bool = True) -> int:
    """Rows of a tile_fused offload whose tiles are narrow (``config.narrow_n`` wide).

    Cached: the operators ask on every call (the workspace is keyed by the answer), and with
    ``balance_tail`` the search over row counts takes milliseconds of Python (2-4.5 ms here for
    m = 4096-8192): uncached, that host time *was* the call in a back-to-back loop (the balanced
    pipelines measured 1.2-7x slower than without on an H200, benchmarks/results/h200/2026-12-01_probes.md).

    The ``edge_pieces`` pieces at the exposed edge (``edge_rows``: first to host, last from
    host); with ``balance_tail``, as many more whole row blocks as make the ``programs``-program fixed-stride launch's busiest program shortest
    (``hocket.kernels.schedule.tail_narrow_rows``): the narrow tiles fill what would be
    a mostly empty last wave of full tiles.
    """
    m = offsets[-1]
    narrow = edge_rows(offsets, direction=direction, pieces=edge_pieces)
    if not balance_tail or config.narrow_n >= config.block_n:
        return narrow
    candidates = list(range(narrow, m, config.block_m))  # whole row blocks at the narrow end
    return tail_narrow_rows(m=m, n=n, block_m=config.block_m, block_n=config.block_n,
                            narrow_block_n=config.narrow_n, programs=programs, candidates=candidates,
                            narrow_first=direction == "to_host")


class _TimeoutWatch:
    """Timeout codes of asynchronous tile-fused calls, read without stalling the GPU:
    each call copies its error buffer into a small pinned mirror behind an event."""

    def __init__(self) -> None:
        self._pending: list[tuple[torch.Tensor, torch.cuda.Event, int, str]] = []

    def watch(self, errors: torch.Tensor, *, max_spins: int, what: str) -> None:
        mirror = torch.empty(NUM_SLOTS, dtype=torch.int32, pin_memory=True)
        mirror.copy_(errors, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._pending.append((mirror, event, max_spins, what))

    def poll(self, *, block: bool) -> None:
        keep = []
        pending, self._pending = self._pending, []
        for mirror, event, max_spins, what in pending:
            if block:
                event.synchronize()
            elif not event.query():
                keep.append((mirror, event, max_spins, what))
                continue
            raise_on_timeout(mirror, max_spins=max_spins, context=what)
        self._pending = keep


class OffloadContext:
    """Streams, staging buffers and kernel workspaces of the offload ops on one device.

    ``config``: the tile config of the tile-fused GEMMs (None: :func:`offload_tile_config` each
    shape). ``num_programs``: their persistent grid (None: :func:`persistent_programs` of the
    device). ``flag_method``: how the copy streams raise chunk flags (``HostStagedContext``).
    ``edge_pieces``: how many pieces at the exposed edge (the first group to host, the last chunk
    from host) get narrow tiles (0: none). ``balance_tail``: more narrow row blocks where they fill
    the persistent launch's last wave (``fused_narrow_rows``); on an H200 the GEMM alone of
    8192x8192x1280 went from 80-83% to 92-97% of cuBLAS with it, pipelines within 0.02 ms.

    ``copy_wait``: how a to-host group's copy waits for its flag: ``"stream"`` (the D2H stream
    holds on the flag value in the GPU's front end, ``hocket.kernels.wait_value_on_stream``) or
    ``"side_kernel"`` (bounded spin kernels on a side stream, handed over with events);
    ``"auto"`` (the default): ``"stream"`` where the driver offers it, else ``"side_kernel"``.
    On an H200 the driver wait took 2.257-2.262 ms in every context to host on 8192x8192x7168
    (tile_fused(8)); the spin kernels 2.24 or 2.43 ms depending on the context.

    ``edge_splits``: a ``tile_fused`` plan's exposed piece has each tile cut along K into this many
    slices inside the persistent launch (``hocket.kernels.gemm_tile.gemm_split_tile``); 1 (the
    default): none. No split count (2, 4, 8) beat the unsplit kernel on an H200 (0.00 to -0.13 ms).

    Every figure: benchmarks/results/h200/2026-12-01_probes.md (with the options removed as no better:
    ticket-counter tiles, from-host flags off the copy stream, two copy streams, spin-kernel waits on
    the copy stream, a ``chunked`` exposed piece split along k).
    """

    def __init__(self, device: torch.device | str | int | None = None, *, config: TileConfig | None = None,
                 num_programs: int | None = None, flag_method: str = "auto", edge_pieces: int = EDGE_PIECES,
                 copy_wait: str = "auto", balance_tail: bool = True, edge_splits: int = 1) -> None:
        require_cuda("hocket.ops offload operators")
        if not isinstance(edge_pieces, int) or isinstance(edge_pieces, bool) or edge_pieces < 0:
            raise ValueError(f"edge_pieces={edge_pieces!r} must be an int >= 0 (0: no narrow tiles)")
        if copy_wait not in COPY_WAITS:
            raise ValueError(f"copy_wait={copy_wait!r} must be one of {COPY_WAITS}")
        if not isinstance(balance_tail, bool):
            raise TypeError(f"balance_tail={balance_tail!r} must be a bool")
        if not isinstance(edge_splits, int) or isinstance(edge_splits, bool) or edge_splits < 1:
            raise ValueError(f"edge_splits={edge_splits!r} must be an int >= 1 (K slices of each tile of the "
                             f"exposed piece in tile_fused plans; 1: none)")
        self.device = cuda_device(device)
        self.staged = HostStagedContext(self.device, flag_method=flag_method)
        self.config = config
        self.num_programs = num_programs
        self.edge_pieces = edge_pieces
        self.copy_wait = _resolve_copy_wait(copy_wait, self.device)
        self.balance_tail = balance_tail
        self.edge_splits = edge_splits
        self._workspaces: dict[tuple, ConsumerWorkspace | ProducerWorkspace] = {}
        self.timeouts = _TimeoutWatch()

    def tile_config(self, m: int, n: int, k: int, dtype: torch.dtype) -> TileConfig:
        """The context's ``config``, else :func:`offload_tile_config` (128-wide narrow edge tiles: with
        pointer loads they made the to-host operator slower on an H200, 8192x3584x8192 2.744 ms against
        2.491 with 64-wide ones; with descriptor loads they ran as fast, 2.515 against 2.517;
        benchmarks/results/h200/2026-12-01_probes.md)."""
        if self.config is not None:
            return self.config
        return offload_tile_config(m, n, k, dtype)

    def programs(self) -> int:
        """Persistent grid size of the tile-fused GEMMs on this device."""
        if self.num_programs is not None:
            return self.num_programs
        return persistent_programs(torch.cuda.get_device_properties(self.device).multi_processor_count)

    def _narrow_rows(self, offsets: tuple[int, ...], n: int, cfg: TileConfig, direction: str) -> int:
        return fused_narrow_rows(offsets, direction=direction, n=n, config=cfg, programs=self.programs(),
                                 edge_pieces=self.edge_pieces, balance_tail=self.balance_tail)

    def consumer(self, m: int, n: int, k: int, dtype: torch.dtype, plan: Plan) -> ConsumerWorkspace:
        """The consumer workspace of ``plan``'s chunks (built on first use)."""
        cfg = self.tile_config(m, n, k, dtype)
        offsets = piece_offsets(plan, m, align=cfg.block_m, direction="from_host")
        narrow = self._narrow_rows(offsets, n, cfg, "from_host")
        split_rows = edge_rows(offsets, direction="from_host", pieces=1) if self.edge_splits > 1 else 0
        key = ("consumer", m, n, k, dtype, offsets, narrow, cfg, split_rows, self.edge_splits)
        if key not in self._workspaces:
            self._workspaces[key] = ConsumerWorkspace(
                m=m, n=n, k=k, dtype=dtype, device=self.device, config=cfg, num_programs=self.num_programs,
                chunk_offsets=offsets, narrow_rows=narrow, split_rows=split_rows,
                splits=self.edge_splits)
        return self._workspaces[key]

    def producer(self, m: int, n: int, k: int, dtype: torch.dtype, plan: Plan) -> ProducerWorkspace:
        """The producer workspace of ``plan``'s flag groups (built on first use)."""
        cfg = self.tile_config(m, n, k, dtype)
        offsets = piece_offsets(plan, m, align=cfg.block_m, direction="to_host")
        narrow = self._narrow_rows(offsets, n, cfg, "to_host")
        split_rows = edge_rows(offsets, direction="to_host", pieces=1) if self.edge_splits > 1 else 0
        key = ("producer", m, n, k, dtype, offsets, narrow, cfg, split_rows, self.edge_splits)
        if key not in self._workspaces:
            self._workspaces[key] = ProducerWorkspace(m=m, n=n, k=k, dtype=dtype, device=self.device, config=cfg,
                                                      num_programs=self.num_programs, group_offsets=offsets,
                                                      narrow_rows=narrow, split_rows=split_rows,
                                                      splits=self.edge_splits)
        return self._workspaces[key]

    def check(self) -> None:
        """Wait for every tile-fused call so far and raise if one of its flag waits timed out."""
        self.timeouts.poll(block=True)

    def close(self) -> None:
        self.check()
        self.staged.close()
        self._workspaces.clear()

    def __enter__(self) -> OffloadContext:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_DEFAULT_CONTEXTS: dict[torch.device, OffloadContext] = {}


def offload_context(device: torch.device | str | int | None = None) -> OffloadContext:
    """The default context of ``device`` (created on first use)."""
    dev = cuda_device(device)
    if dev not in _DEFAULT_CONTEXTS:
        _DEFAULT_CONTEXTS[dev] = OffloadContext(dev)
    return _DEFAULT_CONTEXTS[dev]


def close_offload_contexts() -> None:
    """Close every default offload context (waits for their work, frees their buffers)."""
    while _DEFAULT_CONTEXTS:
        _, ctx = _DEFAULT_CONTEXTS.popitem()
        ctx.close()


def matmul_from_host(A_host: torch.Tensor, B: torch.Tensor, *, out: torch.Tensor | None = None, plan=None,
                     context: OffloadContext | None = None) -> torch.Tensor:
    """``A_host @ B`` on B's GPU, where ``A_host`` [m, k] lives in pinned host memory.

    The result (``out``, a contiguous [m, n] tensor on B's device, or a new one) is ordered
    on the current stream like any CUDA op. A
    tile-fused call's flag timeouts (never expected) raise on a later call or on
    ``context.check()``.
    """
    _matrix("A_host", A_host)
    _matrix("B", B)
    _check_pair("A_host", A_host, B)
    require_cuda("hocket.ops.matmul_from_host")
    _check_pinned_host("A_host", A_host)
    _check_cuda("B", B)
    m, k = A_host.shape
    n = B.shape[1]
    if out is None:
        out = torch.empty(m, n, dtype=B.dtype, device=B.device)
    _matrix("out", out)
    if tuple(out.shape) != (m, n) or out.dtype != B.dtype or out.device != B.device or not out.is_contiguous():
        raise ValueError(f"out is {tuple(out.shape)} {out.dtype} on {out.device}; it must be a contiguous "
                         f"[{m}, {n}] {B.dtype} tensor on {B.device}")
    plan = _resolve_plan(plan, m, site=("h2d_mm", m, k, n, B.dtype))
    ctx = context or offload_context(B.device)
    if B.device != ctx.device:
        raise ValueError(f"B is on {B.device} but the offload context is on {ctx.device}")
    ctx.timeouts.poll(block=False)
    with torch.cuda.device(ctx.device):  # Triton launches on the current device
        return _from_host(ctx, A_host, B, out, plan)


def _from_host(ctx: OffloadContext, A_host: torch.Tensor, B: torch.Tensor, out: torch.Tensor,
               plan: Plan) -> torch.Tensor:
    m, k = A_host.shape
    a_dev = ctx.staged.device_buffer("from_host.A", (m, k), A_host.dtype)
    executor_for("h2d_mm", plan.strategy)(ctx, A_host, a_dev, B, out, plan)
    return out


def _from_host_sequential(ctx: OffloadContext, A_host, a_dev, B, out, plan: Plan) -> None:
    a_dev.copy_(A_host, non_blocking=True)
    torch.mm(a_dev, B, out=out)


def _from_host_chunked(ctx: OffloadContext, A_host, a_dev, B, out, plan: Plan) -> None:
    m = A_host.shape[0]
    current = torch.cuda.current_stream(ctx.device)
    offsets = piece_offsets(plan, m, align=CHUNK_ALIGN_ROWS, direction="from_host")
    start = current.record_event()
    events = ctx.staged.h2d_chunks(A_host, a_dev, offsets, after=start)
    for i, event in enumerate(events):
        current.wait_event(event)
        rows = slice(offsets[i], offsets[i + 1])
        torch.mm(a_dev[rows], B, out=out[rows])


def matmul_to_host(A: torch.Tensor, B: torch.Tensor, *, out: torch.Tensor | None = None, plan=None,
                   context: OffloadContext | None = None, non_blocking: bool = False) -> torch.Tensor:
    """``A @ B`` (both on one GPU) written to pinned host memory ``out`` [m, n] (new if None).

    ``non_blocking=False`` returns once ``out`` holds the result; ``True`` returns at once,
    with the current CUDA stream ordered after the copies (synchronise it before reading
    ``out`` on the host; timeouts then surface on ``context.check()``).
    """
    _matrix("A", A)
    _matrix("B", B)
    _check_pair("A", A, B)
    m, n = A.shape[0], B.shape[1]
    if out is not None:
        _matrix("out", out)
        if tuple(out.shape) != (m, n) or out.dtype != A.dtype:
            raise ValueError(f"out is {tuple(out.shape)} {out.dtype}; it must be [{m}, {n}] {A.dtype}")
    require_cuda("hocket.ops.matmul_to_host")
    _check_cuda("A", A)
    _check_cuda("B", B)
    if A.device != B.device:
        raise ValueError(f"A is on {A.device} but B is on {B.device}; put both on one GPU")
    if out is None:
        out = torch.empty(m, n, dtype=A.dtype, pin_memory=True)
    _check_pinned_host("out", out)
    plan = _resolve_plan(plan, m, site=("mm_d2h", m, A.shape[1], n, A.dtype))
    ctx = context or offload_context(A.device)
    if A.device != ctx.device:
        raise ValueError(f"A is on {A.device} but the offload context is on {ctx.device}")
    ctx.timeouts.poll(block=False)
    with torch.cuda.device(ctx.device):  # Triton launches on the current device
        _to_host(ctx, A, B, out, plan)
        if not non_blocking:
            torch.cuda.current_stream().synchronize()
            ctx.timeouts.poll(block=True)
    return out


def _to_host(ctx: OffloadContext, A: torch.Tensor, B: torch.Tensor, out: torch.Tensor, plan: Plan) -> None:
    m, n = A.shape[0], B.shape[1]
    c_dev = ctx.staged.device_buffer("to_host.C", (m, n), A.dtype)
    current = torch.cuda.current_stream(ctx.device)
    done = executor_for("mm_d2h", plan.strategy)(ctx, A, B, c_dev, out, plan)
    if done is not None:
        current.wait_event(done)


def _to_host_sequential(ctx: OffloadContext, A, B, c_dev, out, plan: Plan) -> None:
    torch.mm(A, B, out=c_dev)
    out.copy_(c_dev, non_blocking=True)


def _to_host_chunked(ctx: OffloadContext, A, B, c_dev, out, plan: Plan):
    """Each piece's GEMM, then its copy; returns the last copy's event (the caller's stream waits on it)."""
    m = A.shape[0]
    current = torch.cuda.current_stream(ctx.device)
    done = None
    offsets = piece_offsets(plan, m, align=CHUNK_ALIGN_ROWS, direction="to_host")
    for i in range(len(offsets) - 1):
        rows = slice(offsets[i], offsets[i + 1])
        torch.mm(A[rows], B, out=c_dev[rows])
        # issued right behind its GEMM: from an idle GPU the first copy is queued before the
        # later GEMMs are issued, not after all of them
        done = ctx.staged.d2h_groups(c_dev, out, offsets[i:i + 2], events=[current.record_event()])[-1]
    return done


def _to_host_fused(ctx: OffloadContext, A, B, c_dev, out, plan: Plan) -> None:
    fused_to_host(ctx, A, B, c_dev, out, plan)


def _from_host_fused(ctx: OffloadContext, A_host, a_dev, B, out, plan: Plan) -> None:
    fused_from_host(ctx, A_host, a_dev, B, out, plan)


for _name, _from, _to in (("sequential", _from_host_sequential, _to_host_sequential),
                          ("chunked", _from_host_chunked, _to_host_chunked),
                          ("tile_fused", _from_host_fused, _to_host_fused)):
    register_executor(_name, "h2d_mm", _from)
    register_executor(_name, "mm_d2h", _to)
del _name, _from, _to

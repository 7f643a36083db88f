"""Host issue overhead: CPU microseconds to put one item of GPU work on the queues.

What the executors issue per piece (``hocket.cost.issue``): a kernel launch (``launch``:
``torch.mm`` into a preallocated output, as the executors call it), a collective call with
its stream wait (``collective``: ``all_reduce`` of a small tensor through the transport,
then ``wait()``), a P2P ring exchange (``p2p``: send to the next rank, receive from the
previous, ``wait()``), a peer copy with its event (``copy_engine``: into the next rank's symmetric
memory, as the transport copies, where the group is NCCL on one node's GPUs) and a pinned-host copy
on a side stream with its event (``host_copy``), and the operator's own ``entry``: one
sequential ``hocket.ops.all_gather_matmul`` call on tiny operands (its dispatch, plan lookup,
argument handling and output allocation) less the collective and the launch it issues. On a NCCL group of
GPUs also the host-staged relay (``hocket.transport.host_relay``): an all-gather of one message and one cut
into about ten tiny messages give its cost per call (``relay_call``) and per message
(``relay_message``); ``relay_split`` is what one more piece costs an own-data-first pipeline that moves
all its pieces in one relay call, besides that piece's message and GEMM launch (:func:`relay_piece_us`).
The ``_host`` items of the host-signalled relay and ``relay_piece`` (a pipeline of one relay call per
piece) went with those variants; a profile that has them keeps them, unused.
Each item is issued
``iters`` times back to back and the host time (``perf_counter``) is divided by the count;
the device is never synchronised inside the loop, so only the host side is measured. The items
(and the operator call) take turns in ``ISSUE_ROUNDS`` rounds and each keeps its median round, so a
host that slows for a second slows one round of every item instead of all of one item: timed one
block per item, one 2xH200 lease read ``entry`` at 199 us (one slow reading of the operator call) against
47-124 us on others (benchmarks/results/validation/2026-12-01_measured-rules.md). The result is the maximum over
ranks (the slowest host gates the pipeline). A host can
also stay slow for longer than a sitting (1xH200: three calibrations 30 s apart read host_copy at 32 /
52 / 36 us, benchmarks/results/h200/2026-12-01_offload-plan-none.md), so the runner times the items in
``CalibrateConfig.issue_sittings`` sittings spread over the
calibration and keeps each item's median over them (:func:`combine_sittings`).

GPU ranks only: on CPU ranks the work runs on the issuing thread and the cost model has no
separate issue chain.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from hocket.calibrate.transfers import symmetric_peer_copy
from hocket.core.sizes import MIB, sizes_in_force
from hocket.timing.timer import max_across_ranks
from hocket.transport.stream_switch import on_stream

ISSUE_ITERS = 50
"""Items timed per kind (after one warm-up round), over all rounds."""
ISSUE_ROUNDS = 5
"""Rounds the items take turns in (:func:`interleaved_host_us`)."""
SMALL_NUMEL = 4096
"""Elements of the tensors issued (small, so the device work never backs the queue up)."""


def _host_us(fn: Callable[[], object], iters: int) -> float:
    """One item's host microseconds per call: one warm-up, then ``iters`` calls in one block."""
    return interleaved_host_us({"item": fn}, iters, rounds=1)["item"]


def interleaved_host_us(items: dict[str, Callable[[], object]], iters: int, rounds: int = ISSUE_ROUNDS
                        ) -> dict[str, float]:
    """Host microseconds per call of each item: every item warmed up once, then ``rounds`` rounds in
    which each item in turn (sorted by name: the same order on every rank) is issued ``iters / rounds``
    times back to back; per item the median of its rounds."""
    if iters < 1 or rounds < 1:
        raise ValueError(f"iters={iters} and rounds={rounds} must be >= 1")
    rounds = min(rounds, iters)
    per_round = -(-iters // rounds)
    names = sorted(items)
    for name in names:
        items[name]()  # warm-up: first-call setup (communicators, kernels) is not issue cost
    samples: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            fn = items[name]
            start = time.perf_counter()
            for _ in range(per_round):
                fn()
            samples[name].append((time.perf_counter() - start) * 1e6 / per_round)
    return {name: statistics.median(values) for name, values in samples.items()}


def combine_sittings(sittings: list[dict[str, float]]) -> dict[str, float]:
    """Per item, the median of its readings over ``sittings`` (each a :func:`measure_issue_us` result, taken
    at a different moment of the run); an item some sittings lack keeps the median of those that have it."""
    names = sorted({name for sitting in sittings for name in sitting})
    return {name: statistics.median([s[name] for s in sittings if name in s]) for name in names}


def issue_items(*, group, device: torch.device, dtype: torch.dtype) -> dict[str, Callable[[], object]]:
    """The callables of each issued item that exists here (P2P and collectives need >= 2 ranks,
    ``copy_engine`` a second GPU)."""
    side = 64
    a, b = torch.randn(side, side, device=device).to(dtype), torch.randn(side, side, device=device).to(dtype)
    out = torch.empty(side, side, device=device, dtype=dtype)
    items: dict[str, Callable[[], object]] = {"launch": lambda: torch.mm(a, b, out=out)}
    world = dist.get_world_size(group) if dist.is_initialized() else 1
    if world > 1:
        from hocket.transport import TorchDistTransport, resolve_group

        handle = resolve_group(group if group is not None else dist.group.WORLD)
        transport = TorchDistTransport(handle)
        buf = torch.randn(SMALL_NUMEL, device=device).to(dtype)
        send, recv = torch.randn(SMALL_NUMEL, device=device).to(dtype), torch.empty_like(buf)
        to_next, from_prev = (handle.rank + 1) % world, (handle.rank - 1) % world
        items["collective"] = lambda: transport.all_reduce(buf).wait()
        items["p2p"] = lambda: transport.exchange([(send, to_next)], [(recv, from_prev)]).wait()
    made = symmetric_peer_copy(SMALL_NUMEL, dtype, device, 0, group) if world > 1 else None
    peer_copy = made[0] if made is not None else None
    if peer_copy is None and torch.cuda.device_count() > 1:  # one process with two GPUs: a plain peer copy
        peer = torch.device("cuda", ((device.index or 0) + 1) % torch.cuda.device_count())
        src, dst = torch.randn(SMALL_NUMEL, device=device).to(dtype), torch.empty(SMALL_NUMEL, device=peer, dtype=dtype)
        peer_copy = lambda: dst.copy_(src, non_blocking=True)  # noqa: E731
    if peer_copy is not None:
        done = torch.cuda.Event()

        def copy() -> None:
            peer_copy()
            done.record()
            torch.cuda.current_stream(device).wait_event(done)

        items["copy_engine"] = copy
    pinned = torch.randn(SMALL_NUMEL).to(dtype).pin_memory()
    on_device = torch.empty(SMALL_NUMEL, device=device, dtype=dtype)
    side_stream = torch.cuda.Stream(device)
    landed = torch.cuda.Event()

    def host_copy() -> None:
        # as the offload executors and the relay issue a piece's copy (hocket.transport.host_staged): an event
        # of the caller's stream, the side stream waiting on it under on_stream, the copy, its event, the
        # caller waiting on that; torch.cuda.stream here (~40 Python calls per switch, which the transports
        # dropped in 7b8fbe7) priced 1xH200's tiny ramped to-host pieces ~30% slow
        ready = torch.cuda.current_stream(device).record_event()
        with on_stream(side_stream):
            side_stream.wait_event(ready)
            on_device.copy_(pinned, non_blocking=True)
            landed.record(side_stream)
        torch.cuda.current_stream(device).wait_event(landed)

    items["host_copy"] = host_copy
    return items


def measure_issue_us(*, group, device: torch.device, dtype: torch.dtype, iters: int = ISSUE_ITERS
                     ) -> dict[str, float]:
    """Host microseconds per issued item, maximum over ranks; {} on CPU ranks. Every rank calls
    this (the collective and P2P items pair up across ranks)."""
    if device.type != "cuda":
        return {}
    if iters < 1:
        raise ValueError(f"iters={iters} must be >= 1")
    items = issue_items(group=group, device=device, dtype=dtype)
    call = operator_call(group=group, device=device, dtype=dtype)
    if call is not None and "collective" in items:
        items["operator"] = call
    measured = interleaved_host_us(items, iters)
    whole = measured.pop("operator", None)
    measured.update(relay_issue_us(group=group, device=device, dtype=dtype, iters=iters))
    if whole is not None:
        measured["entry"] = max(0.0, whole - measured["collective"] - measured["launch"])
    torch.cuda.synchronize(device)
    names = sorted(measured)
    values = max_across_ranks([measured[n] for n in names], group=group, device=device)
    return dict(zip(names, values))


def operator_call(*, group, device: torch.device, dtype: torch.dtype) -> Callable[[], object] | None:
    """One sequential hocket all-gather + matmul on tiny operands (None without a group of >= 2):
    its host time less one collective and one launch is the operator's ``entry`` cost."""
    if not dist.is_initialized() or dist.get_world_size(group) < 2:
        return None
    from hocket.core.plan import Plan
    from hocket.ops import all_gather_matmul

    side = 64
    shard = torch.randn(side, side, device=device).to(dtype)
    B = torch.randn(side, side, device=device).to(dtype)
    pg = group if group is not None else dist.group.WORLD
    plan = Plan()
    return lambda: all_gather_matmul(shard, [B], 0, pg, return_A=False, plan=plan)


RELAY_SHARD_NUMEL = 4096
RELAY_TINY_PIECE_MB = 1 / 1024
"""Messages of 1 KiB: a ``RELAY_SHARD_NUMEL`` shard of 2-byte elements becomes about ten of them."""


def relay_issue_us(*, group, device: torch.device, dtype: torch.dtype, iters: int) -> dict[str, float]:
    """Host microseconds of one host-staged relay call and of each message in it (module docstring);
    {} where the relay does not exist (fewer than two ranks, not a NCCL group of GPUs)."""
    if not dist.is_initialized() or dist.get_world_size(group) < 2:
        return {}
    from dataclasses import replace

    from hocket.transport import resolve_group
    from hocket.transport.host_relay import HostStagedTransport, relays_for

    handle = resolve_group(group if group is not None else dist.group.WORLD)
    if "nccl" not in handle.backend or device.type != "cuda":
        return {}
    shard = torch.randn(RELAY_SHARD_NUMEL, device=device).to(dtype)
    out = torch.empty(handle.world * RELAY_SHARD_NUMEL, device=device, dtype=dtype)
    per_call = {}
    for piece_mb in (1.0, RELAY_TINY_PIECE_MB):  # one relay (the same buffers), two message sizes
        relay = HostStagedTransport(handle, sizes=replace(sizes_in_force(), piece_bytes=int(piece_mb * MIB)))

        def call(relay=relay) -> None:
            relay.all_gather(out, shard).wait()

        us = _host_us(call, iters)
        before = relays_for(relay.sizes).get(handle, device).seq
        call()
        per_call[relays_for(relay.sizes).get(handle, device).seq - before] = us
    (one, one_us), (many, many_us) = sorted(per_call.items())
    if many <= one:
        return {}
    message = max(0.0, (many_us - one_us) / (many - one))
    call_us = max(0.0, one_us - one * message)
    split_us = relay_piece_us(group=group, device=device, dtype=dtype, iters=iters)
    launch_us = _host_us(lambda: torch.mm(shard.view(64, 64), shard.view(64, 64)), iters)
    out = {"relay_call": call_us, "relay_message": message}
    if split_us is not None:  # one more piece of one relay call: besides its message and its GEMM launch
        out["relay_split"] = max(0.0, split_us - message - launch_us)
    return out


RELAY_PIECES = 8


def relay_piece_us(*, group, device: torch.device, dtype: torch.dtype, iters: int) -> float | None:
    """Host microseconds one more piece costs a relay pipeline inside the operator: a tiny
    ``hocket.ops.all_gather_matmul`` as ``chunked(RELAY_PIECES)/host_staged[local_first]`` against
    ``chunked(1)``, the difference per extra piece. The pipeline moves all its pieces in one relay call, so
    a piece costs its message, its GEMM launch, its event and the pipeline's own bookkeeping (stage buffers,
    waits, arguments). None where the operator cannot run it."""
    from hocket.core.plan import Plan
    from hocket.ops import all_gather_matmul

    side = 64
    shard = torch.randn(side, side, device=device).to(dtype)
    B = torch.randn(side, side, device=device).to(dtype)
    pg = group if group is not None else dist.group.WORLD
    times = {}
    for chunks in (1, RELAY_PIECES):
        plan = Plan(strategy="chunked", chunks=chunks, order="local_first", transport="host_staged")
        times[chunks] = _host_us(lambda plan=plan: all_gather_matmul(shard, [B], 0, pg, return_A=False,
                                                                     plan=plan), iters)
    torch.cuda.synchronize(device)
    return max(0.0, (times[RELAY_PIECES] - times[1]) / (RELAY_PIECES - 1))

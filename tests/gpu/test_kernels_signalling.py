"""Signalling of the tile-fused kernels on a real GPU: consumer tiles spin while a copy
stream delivers chunks; producer groups reach the host as they complete; a flag that never
rises ends in a clear error within a bounded time; numerics vs fp32; every element written."""

from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET", "") not in ("", "0"):
    pytest.skip("TRITON_INTERPRET is set: run GPU tests in their own process", allow_module_level=True)

from hocket.kernels import (  # noqa: E402
    ConsumerWorkspace,
    FlagTimeoutError,
    ProducerWorkspace,
    consumer_gemm,
    even_row_offsets,
    producer_gemm,
    raise_on_timeout,
    reset_consumer,
    reset_producer,
    stream_write_available,
    wait_flag_on_stream,
    warmup_consumer,
    warmup_producer,
)
from hocket.kernels.config import default_config  # noqa: E402
from hocket.kernels.descriptors import uses_descriptors  # noqa: E402
from hocket.kernels.schedule import ramp_row_offsets  # noqa: E402
from hocket.ops.tolerance import tolerance  # noqa: E402
from hocket.transport.host_staged import HostStagedContext  # noqa: E402

DEV = torch.device("cuda", torch.cuda.current_device())
FLAG_METHODS = ["kernel"] + (["stream_write"] if stream_write_available() else [])
SLEEP_CYCLES = 2_000_000  # ~1 ms at H200 clocks: chunks land well after the consumer starts


def _assert_close_fp32(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert not out.isnan().any(), f"{what}: {int(out.isnan().sum())} elements never written (still NaN)"
    ref = torch.mm(a.float(), b.float()).double()
    tol = tolerance(out.dtype)
    scale = max(1.0, float(ref.abs().max()))
    err = (out.to(ref.device).double() - ref).abs()
    assert bool((err <= tol.atol * scale + tol.rtol * ref.abs()).all()), \
        f"{what}: max error {float(err.max()):.3g} (scale {scale:.3g}) beyond {out.dtype} tolerance"


@pytest.mark.parametrize("splits", [1, 4], ids=["whole", "split-last-chunk"])
@pytest.mark.parametrize("tma", [False, True], ids=["pointers", "descriptors"])
@pytest.mark.parametrize("flag_method", FLAG_METHODS)
@pytest.mark.parametrize("dtype,shape", [(torch.bfloat16, (4096, 1024, 2048)), (torch.float32, (1000, 520, 776))])
def test_consumer_waits_for_late_chunks(flag_method, dtype, shape, tma, splits):
    """Chunks land late, in reverse order, into a NaN-poisoned A: a tile that loaded before its
    flag rose (pointers, or descriptor loads not ordered after the wait) leaves NaN in out.
    ``splits``: the last chunk's tiles are cut along K (slices on different programs, fp32
    partials added by the last slice to arrive)."""
    m, k, n = shape
    a_host = torch.randn(m, k, dtype=torch.float32).to(dtype).pin_memory()
    b = torch.randn(k, n, device=DEV).to(dtype)
    chunks = 8
    cfg = replace(default_config(dtype), tma=tma)
    offsets = even_row_offsets(m, chunks, align=128 if dtype == torch.bfloat16 else 64)
    ws = ConsumerWorkspace(m=m, n=n, k=k, dtype=dtype, device=DEV, arrival=list(reversed(range(chunks))), config=cfg,
                           chunk_offsets=offsets, split_rows=offsets[1] if splits > 1 else 0, splits=splits)
    assert (ws.schedule.split_tiles > 0) == (splits > 1)
    a_dev = torch.empty(m, k, dtype=dtype, device=DEV)
    assert uses_descriptors(cfg, a_dev, b) == tma
    out = torch.empty(m, n, dtype=dtype, device=DEV)
    with HostStagedContext(DEV, flag_method=flag_method) as staged:
        warmup_consumer(ws, a_dev, b, out, flag_method=flag_method)
        a_dev.fill_(float("nan"))  # a tile that reads before its chunk landed produces NaN
        out.fill_(float("nan"))
        reset_consumer(ws)
        start = torch.cuda.current_stream().record_event()
        with torch.cuda.stream(staged.h2d_stream):
            staged.h2d_stream.wait_event(start)
            torch.cuda._sleep(SLEEP_CYCLES)
        offsets = ws.schedule.chunk_offsets
        for chunk in ws.schedule.arrival:  # enqueue copies (with a delay before each) before the consumer
            with torch.cuda.stream(staged.h2d_stream):
                torch.cuda._sleep(SLEEP_CYCLES // 4)
            staged.h2d_chunks(a_host, a_dev, offsets, order=[chunk], flags=ws.flags)
        consumer_gemm(a_dev, b, workspace=ws, out=out)
        torch.cuda.synchronize()
    raise_on_timeout(ws.errors, max_spins=ws.max_spins)
    _assert_close_fp32(out, a_host.to(DEV), b, f"consumer {dtype} {shape} via {flag_method}")


@pytest.mark.parametrize("tma", [False, True], ids=["pointers", "descriptors"])
@pytest.mark.parametrize("schedule", ["even", "ramp_narrow", "ramp_split"])
def test_producer_groups_reach_host_before_gemm_ends(schedule, tma):
    m, k, n, groups = 8192, 8192, 4096, 8
    dtype = torch.bfloat16
    a = torch.randn(m, k, device=DEV).to(dtype)
    b = torch.randn(k, n, device=DEV).to(dtype)
    c_dev = torch.empty(m, n, dtype=dtype, device=DEV)
    host = torch.empty(m, n, dtype=dtype, pin_memory=True)
    cfg = replace(default_config(dtype), tma=tma)
    if schedule == "even":
        ws = ProducerWorkspace(m=m, n=n, k=k, dtype=dtype, device=DEV, groups=groups, config=cfg)
    else:  # one row block first, growing groups; the first group's tiles narrow (and cut along K)
        split = dict(split_rows=128, splits=4) if schedule == "ramp_split" else {}
        ws = ProducerWorkspace(m=m, n=n, k=k, dtype=dtype, device=DEV, narrow_rows=128, config=cfg,
                               group_offsets=ramp_row_offsets(m, groups, align=128), **split)
        assert (ws.schedule.split_tiles > 0) == bool(split)
    with HostStagedContext(DEV) as staged:
        warmup_producer(ws, a, b, c_dev)
        c_dev.fill_(float("nan"))
        host.fill_(float("nan"))
        reset_producer(ws)
        torch.cuda._sleep(SLEEP_CYCLES)  # the host enqueues everything before t0: GPU times, not launch times
        t0 = torch.cuda.Event(enable_timing=True)
        t0.record()
        producer_gemm(a, b, workspace=ws, out=c_dev)
        gemm_done = torch.cuda.Event(enable_timing=True)
        gemm_done.record()
        copied = staged.d2h_groups(c_dev, host, ws.schedule.group_offsets, flags=ws.flags, errors=ws.errors,
                                   max_spins=ws.max_spins, after=t0, timing=True)
        seen_early = 0
        while not copied[-1].query():  # observe groups landing on the host while the GEMM runs
            if copied[0].query() and not gemm_done.query():
                seen_early = 1
        torch.cuda.synchronize()
    raise_on_timeout(ws.errors, max_spins=ws.max_spins)
    times_ms = [t0.elapsed_time(e) for e in copied]
    gemm_ms = t0.elapsed_time(gemm_done)
    offsets = ws.schedule.group_offsets
    sizes = [hi - lo for lo, hi in zip(offsets, offsets[1:])]
    print(f"\nproducer {m}x{k}x{n} {schedule} groups {sizes}: GEMM done at {gemm_ms:.3f} ms; group copies done at "
          + ", ".join(f"{t:.3f}" for t in times_ms) + f" ms; host saw group 0 before GEMM end: {bool(seen_early)}")
    assert times_ms == sorted(times_ms)
    assert times_ms[0] < gemm_ms, "group 0 must reach the host while later groups still compute"
    _assert_close_fp32(host, a, b, "producer groups on host")
    if ws.split_counters is not None:
        assert ws.split_counters.tolist() == [0] * ws.schedule.split_tiles, "each split tile's counter reset itself"


def test_consumer_flag_that_never_rises_is_a_clear_error_in_bounded_time():
    m, k, n = 1024, 256, 512
    dtype = torch.bfloat16
    a = torch.randn(m, k, device=DEV).to(dtype)
    b = torch.randn(k, n, device=DEV).to(dtype)
    out = torch.empty(m, n, dtype=dtype, device=DEV)
    ws = ConsumerWorkspace(m=m, n=n, k=k, dtype=dtype, device=DEV, chunk_offsets=(0, 512, 1024),
                           max_spins=200_000)
    warmup_consumer(ws, a, b, out)
    reset_consumer(ws)
    ws.flags[0] = 1  # chunk 1 is never delivered
    start = time.monotonic()
    consumer_gemm(a, b, workspace=ws, out=out)
    torch.cuda.synchronize()
    elapsed_s = time.monotonic() - start
    with pytest.raises(FlagTimeoutError, match="chunk 1's flag never rose"):
        raise_on_timeout(ws.errors, max_spins=ws.max_spins)
    print(f"\nconsumer gave up after {elapsed_s:.3f} s for {ws.max_spins} polls "
          f"({elapsed_s / ws.max_spins * 1e9:.0f} ns per poll)")
    assert elapsed_s < 60


def test_copy_side_wait_that_never_rises_is_a_clear_error():
    flags = torch.zeros(4, dtype=torch.int32, device=DEV)
    errors = torch.zeros(2, dtype=torch.int32, device=DEV)
    wait_flag_on_stream(flags, 0, errors, max_spins=1)  # compile + load before the real wait
    torch.cuda.synchronize()
    errors.zero_()
    wait_flag_on_stream(flags, 2, errors, max_spins=100_000)
    torch.cuda.synchronize()
    with pytest.raises(FlagTimeoutError, match="group 2's flag never rose"):
        raise_on_timeout(errors, max_spins=100_000)


def _time_ms(fn, iters: int = 20) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def test_tile_fused_gemm_alone_vs_cublas():
    m, k, n = 8192, 8192, 7168
    dtype = torch.bfloat16
    a = torch.randn(m, k, device=DEV).to(dtype)
    b = torch.randn(k, n, device=DEV).to(dtype)
    out = torch.empty(m, n, dtype=dtype, device=DEV)
    cws = ConsumerWorkspace(m=m, n=n, k=k, dtype=dtype, device=DEV, chunk_offsets=even_row_offsets(m, 16, align=128))
    pws = ProducerWorkspace(m=m, n=n, k=k, dtype=dtype, device=DEV, groups=16)
    warmup_consumer(cws, a, b, out)
    warmup_producer(pws, a, b, out)
    out.fill_(float("nan"))
    cws.flags.fill_(1)
    consumer_gemm(a, b, workspace=cws, out=out)
    torch.cuda.synchronize()
    _assert_close_fp32(out, a, b, "consumer, flags pre-set")
    flops = 2 * m * k * n
    cublas_ms = _time_ms(lambda: torch.mm(a, b, out=out))
    consumer_ms = _time_ms(lambda: consumer_gemm(a, b, workspace=cws, out=out))

    def produce():
        reset_producer(pws)
        producer_gemm(a, b, workspace=pws, out=out)

    producer_ms = _time_ms(produce)
    print(f"\n{m}x{k}x{n} bf16 TFLOP/s: cuBLAS {flops / cublas_ms / 1e9:.0f}, consumer (flags pre-set) "
          f"{flops / consumer_ms / 1e9:.0f} ({cublas_ms / consumer_ms:.0%}), producer (signalling) "
          f"{flops / producer_ms / 1e9:.0f} ({cublas_ms / producer_ms:.0%})")
    raise_on_timeout(cws.errors, max_spins=cws.max_spins)

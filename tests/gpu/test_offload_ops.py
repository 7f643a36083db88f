"""matmul_from_host / matmul_to_host on a real GPU: every strategy against an fp32
reference, outputs poisoned first, bad inputs named; the shared host buffer between two
GPU processes feeding a consumer GEMM."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET", "") not in ("", "0"):
    pytest.skip("TRITON_INTERPRET is set: run GPU tests in their own process", allow_module_level=True)

from hocket.core.plan import Plan  # noqa: E402
from hocket.core.site import Site  # noqa: E402
from hocket.kernels import ConsumerWorkspace, consumer_gemm, raise_on_timeout, reset_consumer, warmup_consumer  # noqa: E402
from hocket.ops.offload import OffloadContext, matmul_from_host, matmul_to_host  # noqa: E402
from hocket.ops.offload_timeline import offload_timeline  # noqa: E402
from hocket.ops.tolerance import tolerance  # noqa: E402
from hocket.plan.offload import ramp_sizes  # noqa: E402
from hocket.transport.shared_host_buffer import SharedHostBuffer  # noqa: E402

DEV = torch.device("cuda", torch.cuda.current_device())
PLANS = [Plan(strategy="sequential", transport="host_staged"), Plan(strategy="chunked", chunks=4, transport="host_staged"),
         Plan(strategy="tile_fused", chunks=4, transport="host_staged")]
CASES = [(torch.bfloat16, (2048, 1024, 1536)), (torch.bfloat16, (1000, 520, 776)), (torch.float32, (777, 300, 260)),
         (torch.bfloat16, (1100, 512, 2304)),  # 128-wide narrow tiles (offload_tile_config, n >= 2048)
         (torch.bfloat16, (1000, 515, 770))]  # rows not 16-byte aligned: the tma config loads through pointers


def _check(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    out = out.to(DEV)
    assert not out.isnan().any(), f"{what}: {int(out.isnan().sum())} elements never written"
    ref = torch.mm(a.to(DEV).double(), b.to(DEV).double())
    tol = tolerance(out.dtype)
    scale = max(1.0, float(ref.abs().max()))
    err = (out.double() - ref).abs()
    assert bool((err <= tol.atol * scale + tol.rtol * ref.abs()).all()), f"{what}: max error {float(err.max()):.3g}"


@pytest.fixture(scope="module")
def ctx():
    with OffloadContext(DEV) as context:
        yield context


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.describe())
@pytest.mark.parametrize("dtype,shape", CASES, ids=lambda c: str(c))
def test_matmul_from_host(ctx, plan, dtype, shape):
    m, k, n = shape
    for _ in range(2):  # the second call reuses the context's buffers and warmed kernels
        a_host = torch.randn(m, k).to(dtype).pin_memory()
        b = torch.randn(k, n, device=DEV).to(dtype)
        ctx.staged.device_buffer("from_host.A", (m, k), dtype).fill_(float("nan"))
        out = torch.full((m, n), float("nan"), dtype=dtype, device=DEV)
        result = matmul_from_host(a_host, b, out=out, plan=plan, context=ctx)
        assert result.data_ptr() == out.data_ptr()
        torch.cuda.synchronize()
        ctx.check()
        _check(out, a_host, b, f"matmul_from_host {plan.describe()} {dtype} {shape}")


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.describe())
@pytest.mark.parametrize("dtype,shape", CASES, ids=lambda c: str(c))
def test_matmul_to_host(ctx, plan, dtype, shape):
    m, k, n = shape
    out = torch.empty(m, n, dtype=dtype, pin_memory=True)
    for _ in range(2):
        a = torch.randn(m, k, device=DEV).to(dtype)
        b = torch.randn(k, n, device=DEV).to(dtype)
        out.fill_(float("nan"))
        result = matmul_to_host(a, b, out=out, plan=plan, context=ctx)
        assert result.data_ptr() == out.data_ptr() and result.is_pinned()
        _check(result, a, b, f"matmul_to_host {plan.describe()} {dtype} {shape}")


def _ramped_and_planned(kind: str, dtype, shape) -> list:
    """A ramped chunked plan (one row block at the exposed edge, hocket.plan.offload.ramp_sizes) and
    plan=None (what hocket.plan.offload.choose_offload_plan picks on this machine)."""
    m, k, n = shape
    site = Site(kind=kind, m=m, k=k, n=n, dtype=str(dtype).replace("torch.", ""), world=1)
    sizes = ramp_sizes(site, min(6, -(-m // 128)))
    return [Plan(strategy="chunked", chunks=len(sizes), split_sizes=sizes, transport="host_staged"), None]


@pytest.mark.parametrize("dtype,shape", CASES, ids=lambda c: str(c))
def test_ramped_pieces_and_plan_none(ctx, dtype, shape):
    m, k, n = shape
    for plan in _ramped_and_planned("h2d_mm", dtype, shape):
        a_host = torch.randn(m, k).to(dtype).pin_memory()
        b = torch.randn(k, n, device=DEV).to(dtype)
        ctx.staged.device_buffer("from_host.A", (m, k), dtype).fill_(float("nan"))
        out = torch.full((m, n), float("nan"), dtype=dtype, device=DEV)
        matmul_from_host(a_host, b, out=out, plan=plan, context=ctx)
        torch.cuda.synchronize()
        ctx.check()
        _check(out, a_host, b, f"matmul_from_host {plan} {dtype} {shape}")
    for plan in _ramped_and_planned("mm_d2h", dtype, shape):
        a = torch.randn(m, k, device=DEV).to(dtype)
        b = torch.randn(k, n, device=DEV).to(dtype)
        out = torch.full((m, n), float("nan"), dtype=dtype, pin_memory=True)
        _check(matmul_to_host(a, b, out=out, plan=plan, context=ctx), a, b, f"matmul_to_host {plan} {dtype} {shape}")


SETTINGS = [  # (edge_pieces, context knobs)
    (0, dict(copy_wait="side_kernel")),  # no narrow tiles; spin-kernel waits (the fallback of copy_wait="auto")
    (2, dict(copy_wait="side_kernel")),
    (1, dict(copy_wait="stream")),
    (1, dict(balance_tail=False)),
    (1, dict(edge_splits=4)),  # the exposed piece's tiles cut along K
    (1, dict(edge_splits=3, copy_wait="side_kernel")),
]


@pytest.mark.parametrize("edge_pieces,knobs", SETTINGS, ids=lambda s: str(s))
def test_tile_fused_schedules_agree(edge_pieces, knobs):
    """Other tile_fused settings: no narrow tiles and two narrow pieces with spin-kernel flag
    waits; stream waits on the flag value; no last-wave balancing; the exposed piece's tiles
    split along K; explicit uneven split_sizes; all exact."""
    from hocket.kernels.stream_wait import stream_wait_available

    if knobs.get("copy_wait") == "stream" and not stream_wait_available(DEV.index):
        pytest.skip("this driver offers no stream wait-value")
    m, k, n = 1536, 512, 1024
    dtype = torch.bfloat16
    plans = [Plan(strategy="tile_fused", chunks=5, transport="host_staged"),
             Plan(strategy="tile_fused", chunks=3, split_sizes=(256, 1024, 256), transport="host_staged")]
    with OffloadContext(DEV, edge_pieces=edge_pieces, **knobs) as context:
        for plan in plans * 2:  # twice: flags, counters and split counters must have been reset
            a = torch.randn(m, k, device=DEV).to(dtype)
            b = torch.randn(k, n, device=DEV).to(dtype)
            host = torch.full((m, n), float("nan"), dtype=dtype).pin_memory()
            matmul_to_host(a, b, out=host, plan=plan, context=context)
            _check(host, a, b, f"to_host {plan.describe()} edge {edge_pieces} {knobs}")
            a_host = a.cpu().pin_memory()
            out = torch.full((m, n), float("nan"), dtype=dtype, device=DEV)
            matmul_from_host(a_host, b, out=out, plan=plan, context=context)
            torch.cuda.synchronize()
            context.check()
            _check(out, a, b, f"from_host {plan.describe()} edge {edge_pieces} {knobs}")


@pytest.mark.parametrize("direction", ["to_host", "from_host"])
def test_timeline_of_a_tile_fused_call(ctx, direction):
    m, k, n = 4096, 2048, 2048
    dtype = torch.bfloat16
    plan = Plan(strategy="tile_fused", chunks=6, transport="host_staged")
    a = torch.randn(m, k, device=DEV).to(dtype)
    b = torch.randn(k, n, device=DEV).to(dtype)
    if direction == "to_host":
        out = torch.full((m, n), float("nan"), dtype=dtype).pin_memory()
        staging = ctx.staged.device_buffer("to_host.C", (m, n), dtype)
        t = offload_timeline(direction, a=a, b=b, out=out, staging=staging, plan=plan, context=ctx)
        assert t.piece_rows[0] == 128 and sum(t.piece_rows) == m
        assert list(t.ready_ms) == sorted(t.ready_ms) and list(t.copied_ms) == sorted(t.copied_ms)
        assert all(r <= c for r, c in zip(t.ready_ms, t.copied_ms)), "a group is copied after its flag"
        # when the first group is ready relative to the GEMM end is a speed property: see bench_single_gpu.py
    else:
        out = torch.full((m, n), float("nan"), dtype=dtype, device=DEV)
        staging = ctx.staged.device_buffer("from_host.A", (m, k), dtype)
        t = offload_timeline(direction, a=a.cpu().pin_memory(), b=b, out=out, staging=staging, plan=plan,
                             context=ctx)
        assert t.piece_rows[-1] == 128 and sum(t.piece_rows) == m
        assert t.gemm_done_ms >= max(t.copied_ms), "the GEMM ends after the last chunk landed"
    print(f"\n{t.describe()}; drain {t.drain_ms:.3f} ms")
    _check(out, a, b, f"timeline call {direction}")


def test_bad_inputs_named(ctx):
    b = torch.randn(64, 32, device=DEV)
    with pytest.raises(ValueError, match="pageable host memory"):
        matmul_from_host(torch.randn(16, 64), b, context=ctx)
    with pytest.raises(ValueError, match="A_host is on cuda"):
        matmul_from_host(torch.randn(16, 64, device=DEV), b, context=ctx)
    with pytest.raises(ValueError, match="B is on cpu"):
        matmul_from_host(torch.randn(16, 64).pin_memory(), torch.randn(64, 32), context=ctx)
    with pytest.raises(ValueError, match="out is pageable host memory"):
        matmul_to_host(torch.randn(16, 64, device=DEV), b, out=torch.empty(16, 32), context=ctx)


SENDER = textwrap.dedent("""
    import sys, torch
    from hocket.transport.shared_host_buffer import SharedHostBuffer
    path, src_path, chunks = sys.argv[1], sys.argv[2], int(sys.argv[3])
    src = torch.load(src_path).cuda()
    buf = SharedHostBuffer.attach(path, timeout_s=120)
    offsets = [src.shape[0] * i // chunks for i in range(chunks + 1)]
    buf.send_rows(src, offsets, 1, timeout_s=120)
    buf.wait_consumed(1, timeout_s=120)
    buf.close()
""")


def test_shared_host_buffer_feeds_consumer_gemm_across_processes(tmp_path):
    m, k, n, chunks = 2048, 1024, 1024, 4
    dtype = torch.bfloat16
    a = torch.randn(m, k).to(dtype)
    torch.save(a, tmp_path / "a.pt")
    b = torch.randn(k, n, device=DEV).to(dtype)
    offsets = tuple(m * i // chunks for i in range(chunks + 1))
    ws = ConsumerWorkspace(m=m, n=n, k=k, dtype=dtype, device=DEV, chunk_offsets=offsets)
    a_dev = torch.empty(m, k, dtype=dtype, device=DEV)
    out = torch.empty(m, n, dtype=dtype, device=DEV)
    warmup_consumer(ws, a_dev, b, out)
    a_dev.fill_(float("nan"))
    out.fill_(float("nan"))
    shm = Path("/dev/shm")  # tmpfs: cudaHostRegister can pin its pages in both processes
    path = (shm if shm.is_dir() else tmp_path) / f"hocket_pair_{os.getpid()}.buf"
    with SharedHostBuffer.create(path, nbytes=m * k * 2, num_chunks=chunks) as buf:
        sender = subprocess.Popen([sys.executable, "-c", SENDER, str(path), str(tmp_path / "a.pt"), str(chunks)],
                                  stderr=subprocess.PIPE, text=True)
        reset_consumer(ws)
        copy_stream = torch.cuda.Stream(DEV)
        copy_stream.wait_stream(torch.cuda.current_stream())
        consumer_gemm(a_dev, b, workspace=ws, out=out)  # spins while chunks arrive from the other process
        try:
            buf.recv_rows(a_dev, offsets, 1, stream=copy_stream, flags=ws.flags, timeout_s=120)
        except Exception as exc:  # say what the sender said (it may have died before publishing)
            sender.kill()
            _, err = sender.communicate(timeout=30)
            raise AssertionError(f"{exc}; sender exit code {sender.returncode}, its stderr:\n{err[-3000:]}") from exc
        torch.cuda.synchronize()
        _, err = sender.communicate(timeout=120)
        assert sender.returncode == 0, err
    raise_on_timeout(ws.errors, max_spins=ws.max_spins)
    _check(out, a, b, "consumer fed through the shared host buffer")

"""Run a calibration on ranks (self-spawned or under torchrun) and assemble the profile."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, replace

import torch
import torch.distributed as dist

from hocket.bench.progress import RankProgress
from hocket.calibrate.config import SITTING_CHECKPOINTS, CalibrateConfig, default_config
from hocket.calibrate.contention import kinds_for, measure_pair
from hocket.calibrate.gemm import gemm_call, gemm_point, torch_dtype
from hocket.calibrate.issue import combine_sittings, measure_issue_us
from hocket.calibrate.sustained import measure_sustained
from hocket.calibrate.transfers import make_transfer
from hocket.hardware.profile import CalibrationProfile, ContentionPoint, CurvePoint, GemmPoint, SustainedGemm
from hocket.timing.timer import TimingConfig, time_callable

CURVE_TRANSFERS = ("p2p", "copy_engine", "host_link", "host_relay")
STEADY_TRANSFERS = ("host_relay",)
"""transfers besides the collectives timed back to back too (``host_relay_steady``)"""
STEADY_P2P = ("p2p",)
"""the P2P exchange timed back to back too, kept with the collectives' (``collectives_steady["p2p"]``):
from idle it pays ~80 us of launch and release (2xH200: 0.27 ms for 32 MiB), replayed a ring step of
32 MiB ran 0.15 ms (benchmarks/results/validation/2026-12-01_measured-rules.md)"""
CAPTURED_TRANSFERS = ("host_relay",)
"""transfers timed as back-to-back CUDA graph replays too, on GPUs (``host_relay_captured``)"""
CAPTURED_SMALLEST_BYTES = 1 << 20
"""the captured curve also starts here when the steady sizes start higher: a replayed pipeline's
pieces are small (16 pieces of ag_mm 8192x4096x1536 move ~4 MiB each)"""


@dataclass(kw_only=True)
class Measurements:
    """What one rank measured (identical on every rank: times are maxima over ranks)."""

    gemm: list[GemmPoint] = field(default_factory=list)
    curves: dict[str, list[CurvePoint]] = field(default_factory=dict)
    steady_curves: dict[str, list[CurvePoint]] = field(default_factory=dict)
    captured_curves: dict[str, list[CurvePoint]] = field(default_factory=dict)
    contention: dict[str, ContentionPoint] = field(default_factory=dict)
    issue_us: dict[str, float] = field(default_factory=dict)
    issue_sittings: list[dict[str, float]] = field(default_factory=list)
    gemm_sustained: SustainedGemm | None = None
    world_size: int = 1
    backend: str = "gloo"
    device_type: str = "cpu"


def _steps(config: CalibrateConfig, device: torch.device) -> int:
    gemm = sum(1 for m, _, _ in config.gemm_shapes for c in config.gemm_chunks if c <= m)
    issue = config.issue_sittings if device.type == "cuda" else 0
    sustained = 1 if device.type == "cuda" and config.sustained_s > 0 else 0
    steady = (len(config.collectives) + len(STEADY_P2P) + len(STEADY_TRANSFERS)) * len(config.steady_sizes_bytes)
    captured = len(CAPTURED_TRANSFERS) * len(captured_sizes(config)) if device.type == "cuda" else 0
    return gemm + sustained + steady + captured + \
        (len(config.collectives) + len(CURVE_TRANSFERS)) * len(config.sizes_bytes) + len(kinds_for(device)) + issue


def captured_sizes(config: CalibrateConfig) -> tuple[int, ...]:
    """Sizes of the captured curves: the steady ones, from ``CAPTURED_SMALLEST_BYTES`` up."""
    if not config.steady_sizes_bytes:
        return ()
    return tuple(sorted({min(CAPTURED_SMALLEST_BYTES, min(config.steady_sizes_bytes)), *config.steady_sizes_bytes}))



def fastest_whole_gemm(config: CalibrateConfig, points: list[GemmPoint]) -> tuple[int, int, int]:
    """The grid shape whose whole (one-chunk) GEMM ran fastest in TFLOP/s: the most power-hungry one,
    so the first to meet the power cap (the sustained phase measures the ceiling on it); the same on
    every rank (the points are maxima over ranks); ``contention_shape`` without grid points."""
    whole = [p for p in points if (p.m, p.k, p.n) in set(config.gemm_shapes)]
    if not whole:
        return config.contention_shape
    best = max(whole, key=lambda p: p.tflops)
    return best.m, best.k, best.n


def measure(config: CalibrateConfig, *, group=None, device: torch.device | str = "cpu",
            show_progress: bool = True) -> Measurements:
    """Every rank of ``group`` calls this with the same config."""
    device = torch.device(device)
    timing = TimingConfig(warmup=config.warmup, iters=config.iters)
    distributed = dist.is_initialized()
    rank = dist.get_rank(group) if distributed else 0
    out = Measurements(world_size=dist.get_world_size(group) if distributed else 1,
                       backend=str(dist.get_backend(group)) if distributed else "none", device_type=device.type)
    with RankProgress(total=_steps(config, device), enabled=show_progress and rank == 0) as progress:
        checkpoints = SITTING_CHECKPOINTS[config.issue_sittings] if device.type == "cuda" else ()

        def sitting(checkpoint: str) -> None:
            """Time the host issue items here if this is one of the run's sittings (every rank calls it)."""
            if checkpoint in checkpoints:
                progress.step(f"host issue overhead per launch, collective, P2P exchange, peer copy ({checkpoint})")
                out.issue_sittings.append(measure_issue_us(group=group, device=device,
                                                           dtype=torch_dtype(config.dtype)))

        sitting("start")
        for m, k, n in config.gemm_shapes:
            for chunks in config.gemm_chunks:
                if chunks > m:
                    continue
                progress.step(f"GEMM {m}x{k}x{n} in {chunks} row chunk(s)")
                call = gemm_call(m, k, n, dtype=config.dtype, device=device, chunks=chunks)
                ms = time_callable(call, config=timing, group=group, device=device).median_ms
                out.gemm.append(gemm_point(m, k, n, dtype=config.dtype, chunks=chunks, total_ms=ms))
        sitting("after_gemm")
        if device.type == "cuda" and config.sustained_s > 0:  # right after the grid, in the grid's state
            m, k, n = fastest_whole_gemm(config, out.gemm)
            progress.step(f"GEMM {m}x{k}x{n} back to back for {config.sustained_s:g} s against a burst "
                          f"(sustained clocks)")
            out.gemm_sustained = measure_sustained(
                gemm_call(m, k, n, dtype=config.dtype, device=device), (m, k, n), dtype=config.dtype,
                duration_s=config.sustained_s, timing=timing, group=group, device=device)

        def curve(names, sizes, how: TimingConfig, label: str, into: dict[str, list[CurvePoint]],
                  captured: bool = False) -> None:
            for name in names:
                for nbytes in sizes:
                    progress.step(f"{name} {nbytes} B{label}")
                    made = make_transfer(name, nbytes, dtype=config.dtype, group=group, device=device)
                    if made is not None:
                        fn = made[0]
                        if captured:
                            from hocket.ops.captured import replayed

                            fn = replayed(fn, device, what=f"calibrate {name} {nbytes} B")
                        ms = time_callable(fn, config=how, group=group, device=device).median_ms
                        into.setdefault(name, []).append(CurvePoint(bytes=made[1], ms=ms))

        curve(config.collectives + CURVE_TRANSFERS, config.sizes_bytes, timing, "", out.curves)
        # the collectives (and the host relay) again, calls back to back: a loop's per-call cost
        curve(config.collectives + STEADY_P2P + STEADY_TRANSFERS, config.steady_sizes_bytes,
              replace(timing, reps=config.steady_reps),
              f", {config.steady_reps} calls back to back", out.steady_curves)
        if device.type == "cuda":  # the relay replayed from a CUDA graph: its device cost per call alone

            curve(CAPTURED_TRANSFERS, captured_sizes(config), replace(timing, reps=config.steady_reps),
                  f", {config.steady_reps} CUDA graph replays back to back", out.captured_curves, captured=True)
        sitting("after_curves")
        m, k, n = config.contention_shape
        gemm = gemm_call(m, k, n, dtype=config.dtype, device=device)
        for kind, transfer_name in kinds_for(device).items():
            progress.step(f"contention: GEMM beside {kind}")
            made = make_transfer(transfer_name, config.contention_bytes, dtype=config.dtype, group=group,
                                 device=device)
            if made is not None:
                out.contention[kind] = measure_pair(gemm, made[0], timing=timing, group=group, device=device)
        sitting("end")
        out.issue_us = combine_sittings(out.issue_sittings) if out.issue_sittings else {}
    return out


def build_profile(measured: Measurements, *, config: CalibrateConfig, fingerprint: dict) -> CalibrationProfile:
    curves = {name: tuple(points) for name, points in measured.curves.items()}
    return CalibrationProfile(
        fingerprint=fingerprint["hash"], fingerprint_data=fingerprint, world_size=measured.world_size,
        backend=measured.backend, device_type=measured.device_type, quick=config.quick,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gemm=tuple(measured.gemm),
        collectives={op: curves[op] for op in config.collectives if op in curves},
        collectives_steady={op: tuple(points) for op, points in measured.steady_curves.items()
                            if op not in STEADY_TRANSFERS},
        host_relay_steady=tuple(measured.steady_curves.get("host_relay", ())),
        host_relay_captured=tuple(measured.captured_curves.get("host_relay", ())),
        p2p=curves.get("p2p", ()), copy_engine=curves.get("copy_engine", ()), host_link=curves.get("host_link", ()),
        host_relay=curves.get("host_relay", ()), contention=dict(measured.contention), issue_us=dict(measured.issue_us),
        issue_sittings=tuple(dict(s) for s in measured.issue_sittings) if len(measured.issue_sittings) > 1 else (),
        gemm_sustained=measured.gemm_sustained)


def rank_entry(rank: int, world_size: int, config: CalibrateConfig | None, quick: bool,
               show_progress: bool) -> Measurements:
    """Entry point of a self-spawned rank (``hocket.launch.spawn``)."""
    from hocket.launch.backend import device_for_rank

    device = device_for_rank(rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    config = config or default_config(quick=quick, device_type=device.type)
    return measure(config, device=device, show_progress=show_progress)


@dataclass(frozen=True, kw_only=True)
class CalibrationRun:
    """A finished calibration: the profile, and whether this process should report it."""

    profile: CalibrationProfile | None
    is_reporter: bool
    launcher: str


def calibrate(*, quick: bool = False, config: CalibrateConfig | None = None, world_size: int = 2,
              backend: str = "auto", threads_per_rank: int | None = None, timeout_s: float = 1800.0,
              show_progress: bool = True) -> CalibrationRun:
    """Calibrate this machine: under torchrun when launched by it, else on self-spawned ranks.

    The fingerprint is taken by the launching process (torchrun: rank 0), so a later
    ``load_profile()`` in the same environment finds the profile.
    """
    from hocket.hardware.fingerprint import fingerprint
    from hocket.launch.torchrun import detect_torchrun

    if detect_torchrun() is not None:
        from hocket.launch.process_group import init_torchrun

        ctx = init_torchrun(backend=backend, timeout_s=timeout_s)
        if ctx.device.type == "cuda":
            torch.cuda.set_device(ctx.device)
        chosen = config or default_config(quick=quick, device_type=ctx.device.type)
        measured = measure(chosen, device=ctx.device, show_progress=show_progress)
        dist.barrier()
        profile = build_profile(measured, config=chosen, fingerprint=fingerprint()) if ctx.rank == 0 else None
        return CalibrationRun(profile=profile, is_reporter=ctx.rank == 0, launcher="torchrun")
    from hocket.launch.backend import choose_backend
    from hocket.launch.spawn import spawn

    resolved = choose_backend(backend, local_world_size=world_size)
    fp = fingerprint()
    results = spawn(rank_entry, world_size=world_size, backend=resolved, args=(config, quick, show_progress),
                    timeout_s=timeout_s, threads_per_rank=threads_per_rank)
    measured = results[0]
    chosen = config or default_config(quick=quick, device_type=measured.device_type)
    return CalibrationRun(profile=build_profile(measured, config=chosen, fingerprint=fp), is_reporter=True,
                          launcher="spawn")

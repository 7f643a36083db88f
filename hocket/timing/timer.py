"""Time a callable the way a collective operator must be timed.

Each sample starts behind a barrier, so every rank begins together; the sample's
time is the *maximum across ranks*, since a collective operator is done only when its
slowest rank is. CPU tensors are timed with ``time.perf_counter``; CUDA work with
CUDA events on the current stream. Warm-up iterations run first and are not recorded.

``reps`` calls run back to back inside one sample and the sample is their mean. With
``reps=1`` (the default) every call pays what the barrier leaves behind: the ranks leave
it at different host times (the first rank's collective waits for the last), and the
device idles until the host has issued the call's first kernels. In a training step the
host runs ahead and neither happens, so steady-state figures want ``reps > 1``: the
release skew and the first launch are then spread over ``reps`` calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from hocket.timing.stats import Summary, summarize


@dataclass(frozen=True, kw_only=True)
class TimingConfig:
    """How many iterations to warm up and to record."""

    warmup: int = 2
    iters: int = 10
    reps: int = 1
    """calls back to back per sample (the sample is their mean); see the module docstring."""

    def __post_init__(self) -> None:
        if not isinstance(self.warmup, int) or isinstance(self.warmup, bool) or self.warmup < 0:
            raise ValueError(f"TimingConfig.warmup={self.warmup!r} must be an int >= 0")
        if not isinstance(self.iters, int) or isinstance(self.iters, bool) or self.iters < 1:
            raise ValueError(f"TimingConfig.iters={self.iters!r} must be an int >= 1 (use 5 or more for a median)")
        _check_reps(self.reps, "TimingConfig.reps")


def _check_reps(reps, name: str = "reps") -> None:
    if not isinstance(reps, int) or isinstance(reps, bool) or reps < 1:
        raise ValueError(f"{name}={reps!r} must be an int >= 1 (calls back to back per sample; 1 = one call)")


def _distributed(group) -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def _barrier(group, device: torch.device) -> None:
    if not _distributed(group):
        return
    if device.type == "cuda":
        dist.barrier(group=group, device_ids=[device.index if device.index is not None else torch.cuda.current_device()])
    else:
        dist.barrier(group=group)


def max_across_ranks(samples_ms: list[float], *, group=None, device: torch.device | str = "cpu") -> list[float]:
    """Element-wise maximum of each rank's per-iteration times (identity without a group)."""
    if not _distributed(group):
        return list(samples_ms)
    device = torch.device(device)
    reduce_device = device if device.type == "cuda" else torch.device("cpu")
    values = torch.tensor(samples_ms, dtype=torch.float64, device=reduce_device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX, group=group)
    return values.cpu().tolist()


def _run_cpu(fn: Callable[[], object], *, group, iters: int, reps: int) -> list[float]:
    device = torch.device("cpu")
    samples = []
    for _ in range(iters):
        _barrier(group, device)
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        samples.append((time.perf_counter() - start) * 1e3 / reps)
    return samples


def _run_cuda(fn: Callable[[], object], *, group, iters: int, reps: int, device: torch.device) -> list[float]:
    events = []
    for _ in range(iters):
        _barrier(group, device)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) / reps for start, end in events]


def _check(fn, device) -> torch.device:
    if not callable(fn):
        raise TypeError(f"fn={fn!r} must be a callable taking no arguments")
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device={device} is not supported for timing; use a cpu or cuda device")
    return device


def sample_ms(fn: Callable[[], object], *, iters: int, warmup: int = 0, group=None,
              device: torch.device | str = "cpu", reps: int = 1) -> list[float]:
    """Per-sample times of ``fn`` in ms (each the mean of ``reps`` back-to-back calls),
    each the max across the ranks of ``group``."""
    device = _check(fn, device)
    _check_reps(reps)
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        samples = _run_cuda(fn, group=group, iters=iters, reps=reps, device=device)
    else:
        samples = _run_cpu(fn, group=group, iters=iters, reps=reps)
    return max_across_ranks(samples, group=group, device=device)


def time_callable(fn: Callable[[], object], *, config: TimingConfig = TimingConfig(), group=None,
                  device: torch.device | str = "cpu") -> Summary:
    """Warm up, then time ``fn`` ``config.iters`` times; every rank of ``group`` must call this."""
    return summarize(sample_ms(fn, iters=config.iters, warmup=config.warmup, group=group, device=device,
                               reps=config.reps))


def time_interleaved(fns: dict[str, Callable[[], object]], *, config: TimingConfig = TimingConfig(),
                     rounds: int = 1, group=None, device: torch.device | str = "cpu") -> dict[str, Summary]:
    """Time several callables in ``rounds`` interleaved rounds, so slow drifts in machine
    load (other processes on shared cores) spread over all of them instead of biasing one.

    Each callable is warmed up once, then gets ``config.iters`` iterations in total,
    split as evenly as possible over the rounds.
    """
    samples = interleaved_samples_ms(fns, config=config, rounds=rounds, group=group, device=device)
    return {name: summarize(values) for name, values in samples.items()}


def interleaved_samples_ms(fns: dict[str, Callable[[], object]], *, config: TimingConfig = TimingConfig(),
                           rounds: int = 1, group=None, device: torch.device | str = "cpu") -> dict[str, list[float]]:
    """:func:`time_interleaved`'s samples (ms, max across ranks) per callable, not summarised."""
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds={rounds!r} must be an int >= 1")
    if not fns:
        raise ValueError("fns is empty: give at least one named callable to time")
    rounds = min(rounds, config.iters)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        _check(fn, device)
        for _ in range(config.warmup):
            fn()
    for r in range(rounds):
        per_round = config.iters // rounds + (1 if r < config.iters % rounds else 0)
        for name, fn in fns.items():
            samples[name] += sample_ms(fn, iters=per_round, group=group, device=device, reps=config.reps)
    return samples

"""Run a SuiteSpec on ranks: under torchrun when launched by it, else on self-spawned local ranks."""

from __future__ import annotations

from dataclasses import dataclass

from hocket.bench.outcome import SiteOutcome
from hocket.bench.suite import SuiteSpec, measure_sites, rank_entry


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """How ranks are started (ignored fields under torchrun, which decides them itself)."""

    world_size: int = 2
    backend: str = "auto"
    threads_per_rank: int | None = None
    """compute threads per rank; None = this host's cores divided among its ranks."""
    timeout_s: float = 900.0
    """bound on the whole run and on every collective: a hang fails instead of waiting forever."""

    def __post_init__(self) -> None:
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise ValueError(f"world_size={self.world_size!r} must be an int >= 1 (e.g. --world-size 2)")
        if self.threads_per_rank is not None and self.threads_per_rank < 1:
            raise ValueError(f"threads_per_rank={self.threads_per_rank} must be >= 1")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s={self.timeout_s} must be > 0 seconds")


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """Outcomes plus what the run was (recorded in every results line)."""

    outcomes: list[SiteOutcome]
    is_reporter: bool
    """True on the one process that prints and writes (the driver, or torchrun's rank 0)."""
    backend: str
    world_size: int
    threads_per_rank: int
    launcher: str
    """"spawn" or "torchrun"."""
    captured: bool = False
    """Each plan was timed replayed from a CUDA graph (``hocket bench --graph``), not issued by the host."""
    eager_graphs: str = "off"
    """``HOCKET_EAGER_GRAPHS`` of the run: under ``auto``/``on`` the operators replay their own graphs."""

    def run_info(self) -> dict:
        """What every results line of the run records under ``run`` (``hocket validate`` prices a line by it:
        ``captured`` lines as replays, lines under eager graphs not at all)."""
        return {"backend": self.backend, "world_size": self.world_size, "threads_per_rank": self.threads_per_rank,
                "launcher": self.launcher, "captured": self.captured, "eager_graphs": self.eager_graphs}


def _eager_graphs(backend: str) -> str:
    """The run's eager-graph mode as it acted: CPU (gloo) calls are never replayed."""
    from hocket.env import eager_graphs

    return eager_graphs() if backend == "nccl" else "off"


def under_torchrun() -> bool:
    from hocket.launch.torchrun import detect_torchrun

    return detect_torchrun() is not None


def run_suite(spec: SuiteSpec, settings: RunSettings) -> RunResult:
    """Measure ``spec`` on every rank; only the reporter's result is meant to be shown."""
    import torch
    import torch.distributed as dist

    from hocket.launch.backend import choose_backend
    from hocket.launch.threads import default_threads_per_rank, set_rank_threads

    if under_torchrun():
        from hocket.launch.process_group import init_torchrun

        ctx = init_torchrun(backend=settings.backend, timeout_s=settings.timeout_s)
        if settings.threads_per_rank is not None:
            set_rank_threads(settings.threads_per_rank)
        outcomes = measure_sites(spec, device=ctx.device)
        dist.barrier()
        return RunResult(outcomes=outcomes, is_reporter=ctx.rank == 0, backend=ctx.backend,
                         world_size=ctx.world_size, threads_per_rank=torch.get_num_threads(), launcher="torchrun",
                         captured=spec.captured, eager_graphs=_eager_graphs(ctx.backend))
    from hocket.launch.spawn import spawn

    threads = settings.threads_per_rank or default_threads_per_rank(settings.world_size)
    backend = choose_backend(settings.backend, local_world_size=settings.world_size)
    results = spawn(rank_entry, world_size=settings.world_size, backend=backend, args=(spec,),
                    timeout_s=settings.timeout_s, threads_per_rank=threads)
    return RunResult(outcomes=results[0], is_reporter=True, backend=backend, world_size=settings.world_size,
                     threads_per_rank=threads, launcher="spawn", captured=spec.captured,
                     eager_graphs=_eager_graphs(backend))

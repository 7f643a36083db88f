"""Measure sites on every rank: check each plan against the reference, then time it.

``measure_sites`` runs on every rank of a process group (self-spawned or torchrun) and
returns the same outcomes on every rank: errors and times are reduced across ranks, so
every rank takes the same branch and none is left waiting in a collective.
Correct first, then timed: a plan whose result is off the reference is never timed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from hocket.bench.baselines import comm_alone, comm_transports, compute_alone
from hocket.bench.calls import compare, operator_call, reference_output
from hocket.bench.outcome import PlanOutcome, SiteOutcome
from hocket.bench.progress import RankProgress
from hocket.bench.workload import make_operands
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.timing.timer import TimingConfig, time_interleaved
from hocket.transport.group import resolve_group

REFUSALS = (ValueError, TypeError, NotImplementedError)
"""What an operator raises (on every rank, via its agreement step) when it refuses a plan."""


@dataclass(frozen=True, kw_only=True)
class SuiteSpec:
    """What to measure: each site with its plans, and how to time (picklable, sent to ranks)."""

    sites: tuple[tuple[Site, tuple[Plan, ...]], ...]
    timing: TimingConfig = field(default_factory=TimingConfig)
    rounds: int = 2
    """interleaved timing rounds (spreads drifting machine load over all candidates)."""
    seed: int = 0
    show_progress: bool = True
    captured: bool = False
    """check and time each plan replayed from a CUDA graph (``hocket.ops.CapturedCall``) instead of
    called eagerly (GPU ranks only; compute-alone and comm-alone stay eager); a plan whose transport a
    graph cannot capture is reported as refused."""

    def __post_init__(self) -> None:
        if not self.sites:
            raise ValueError("SuiteSpec.sites is empty: give at least one (site, plans) pair")
        if not isinstance(self.captured, bool):
            raise TypeError(f"SuiteSpec.captured={self.captured!r} must be True or False")
        for site, plans in self.sites:
            if not plans or plans[0].strategy != "sequential":
                raise ValueError(f"site {site.key}: plans must start with the sequential plan (every score needs it)")


def _agree(error: float, passed: bool, group, device: torch.device) -> tuple[float, bool]:
    """Largest error over ranks, and whether every rank passed (so all ranks branch alike)."""
    if not (dist.is_initialized() and dist.get_world_size(group) > 1):
        return error, passed
    t = torch.tensor([error, 0.0 if passed else 1.0], dtype=torch.float64,
                     device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t[0].item()), t[1].item() == 0.0


def plan_call(site: Site, plan: Plan, operands, group, *, captured: bool):
    """What is checked and timed for ``plan``: the operator call, or (``captured``) its replay from a
    CUDA graph captured here (raises a refusal where the plan cannot be captured)."""
    call = operator_call(site, plan, operands, group)
    if not captured:
        return call
    from hocket.ops.captured import replayed

    return replayed(call, operands.a.device, what=f"hocket bench {site.kind} {plan.describe()}")


def check_plan(site: Site, plan: Plan, operands, expected: torch.Tensor, *, group,
               device: torch.device, call=None) -> PlanOutcome:
    """Run ``plan`` once (``call``, default the operator call) and compare with the reference; the
    verdict is the same on every rank."""
    try:
        got = (call or operator_call(site, plan, operands, group))()
    except REFUSALS as exc:
        return PlanOutcome(plan=plan, max_error=float("nan"), tolerance=float("nan"), passed=False,
                           error=f"{type(exc).__name__}: {exc}")
    error, passed, atol = compare(site, got, expected)
    error, passed = _agree(float("inf") if math.isnan(error) else error, passed, group, device)
    return PlanOutcome(plan=plan, max_error=error, tolerance=atol, passed=passed)


def measure_site(site: Site, plans: tuple[Plan, ...], *, spec: SuiteSpec, group, device: torch.device,
                 progress: RankProgress) -> SiteOutcome:
    rank = dist.get_rank(group)
    operands = make_operands(site, rank=rank, device=device, seed=spec.seed)
    expected = reference_output(site, operands, group)
    checked, calls = [], []
    for plan in plans:
        progress.step(f"{site.kind} {site.m}×{site.k}×{site.n}: check {plan.describe()}")
        try:
            call = plan_call(site, plan, operands, group, captured=spec.captured)
        except REFUSALS as exc:  # a plan a CUDA graph cannot capture (every rank alike)
            checked.append(PlanOutcome(plan=plan, max_error=float("nan"), tolerance=float("nan"), passed=False,
                                       error=f"{type(exc).__name__}: {exc}"))
            calls.append(None)
            continue
        checked.append(check_plan(site, plan, operands, expected, group=group, device=device, call=call))
        calls.append(call)
    transports = comm_transports(resolve_group(group), device)
    candidates = {"compute_alone": compute_alone(site, device=device, seed=spec.seed)}
    for name in transports:
        candidates[f"comm:{name}"] = comm_alone(site, group=group, device=device, seed=spec.seed, transport=name)
    for i, outcome in enumerate(checked):
        if outcome.passed:
            candidates[f"plan{i}"] = calls[i]
    progress.step(f"{site.kind} {site.m}×{site.k}×{site.n}: time {len(candidates)} candidates")
    times = time_interleaved(candidates, config=spec.timing, rounds=spec.rounds, group=group, device=device)
    outcomes = tuple(
        PlanOutcome(plan=o.plan, max_error=o.max_error, tolerance=o.tolerance, passed=o.passed,
                    error=o.error, timing=times.get(f"plan{i}"))
        for i, o in enumerate(checked)
    )
    fastest = min(transports, key=lambda name: times[f"comm:{name}"].median_ms)
    return SiteOutcome(site=site, compute_alone=times["compute_alone"], comm_alone=times[f"comm:{fastest}"],
                       comm_transport=fastest, plans=outcomes)


def measure_sites(spec: SuiteSpec, *, group=None, device: torch.device | str = "cpu") -> list[SiteOutcome]:
    """Measure every site of ``spec`` on this rank (every rank of ``group`` must call it)."""
    device = torch.device(device)
    if not dist.is_initialized():
        raise ValueError("measure_sites needs an initialised process group; run it on ranks (hocket.launch)")
    group = dist.group.WORLD if group is None else group
    rank = dist.get_rank(group)
    total = sum(len(plans) + 1 for _, plans in spec.sites)
    with RankProgress(total=total, enabled=spec.show_progress and rank == 0) as progress:
        return [measure_site(site, plans, spec=spec, group=group, device=device, progress=progress)
                for site, plans in spec.sites]


def rank_entry(rank: int, world_size: int, spec: SuiteSpec) -> list[SiteOutcome]:
    """Target of ``hocket.launch.spawn``: measure on the default group, on this rank's device."""
    from hocket.launch.backend import device_for_rank

    del world_size  # the default group says it
    device = device_for_rank(backend=str(dist.get_backend()))
    for site, _ in spec.sites:
        if site.world != dist.get_world_size():
            raise ValueError(f"site {site.key} has world={site.world} but {dist.get_world_size()} ranks run it")
    torch.manual_seed(spec.seed + rank)
    return measure_sites(spec, device=device)

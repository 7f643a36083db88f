"""Rank-side cases of issue 38: a failure on the deciding rank, cache and profile faults, unclear inputs.

Every case returns an :class:`Outcome` instead of raising, so the ranks stay alive after the error (as a
training job's error handling keeps them) and the test compares every rank's outcome; ``s`` is how long
the fault took to surface on that rank (seconds, from the call to the exception or the result).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

import hocket.ops as H
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.env import overridden
from hocket.plan.autotune import AutotuneConfig, autotune
from hocket.plan.cache import CacheEnvironment, PlanCache

ENV = CacheEnvironment(fingerprint="faults", hocket_version="0", torch_version="0")
QUICK = AutotuneConfig(warmup=0, iters=2, rounds=1, extra_rounds=0, top_k=1, clear_win=False)


@dataclass(frozen=True)
class Outcome:
    ok: bool
    type: str = ""
    message: str = ""
    s: float = 0.0
    warnings: tuple[str, ...] = field(default_factory=tuple)
    result: object = None


def _outcome(fn: Callable[[], object]) -> Outcome:
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - the case's outcome, compared across ranks
            return Outcome(False, type(exc).__name__, str(exc), time.monotonic() - start,
                           tuple(str(w.message) for w in caught))
    return Outcome(True, s=time.monotonic() - start, warnings=tuple(str(w.message) for w in caught), result=result)


def _reset() -> None:
    from hocket.ops import dispatch, planning
    from hocket.ops.agreement import clear_agreement_cache
    from hocket.ops.live import set_process_planner

    clear_agreement_cache()
    dispatch.clear_prepared_cache()
    planning.clear_plan_cache()
    set_process_planner(None)


_env = overridden


def _site() -> Site:
    w = dist.get_world_size()
    return Site(kind="ag_mm", m=8 * w, k=16, n=8, world=w, dtype="float32")


def _runners(plan: Plan):
    return lambda: time.sleep(0.001)


def _check_ag_mm(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> bool:
    parts = [torch.empty_like(a) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, a)
    return bool(torch.allclose(out, torch.cat(parts) @ b, atol=1e-4))


def _ag_mm_call(plan=None) -> bool:
    gen = torch.Generator().manual_seed(dist.get_rank())
    a, b = torch.randn(8, 16, generator=gen), torch.randn(16, 8, generator=torch.Generator().manual_seed(7))
    out = H.all_gather_matmul(a, [b], 0, dist.group.WORLD, plan=plan)[1][0]
    return _check_ag_mm(out, a, b)


# -- 1. decisions travel with their failures ---------------------------------------------------------------

class _FailingCache(PlanCache):
    """A cache whose read (``get``) or write (``put``) raises on group rank 0 (the deciding rank)."""

    def __init__(self, path: str, failing: str) -> None:
        super().__init__(ENV, path)
        self.failing = failing

    def get(self, site_key):
        if self.failing == "get":
            raise RuntimeError(f"simulated failure reading {self.path}")
        return super().get(site_key)

    def put(self, site_key, plan, **kwargs):
        if self.failing == "put":
            raise RuntimeError(f"simulated failure writing {self.path}")
        return super().put(site_key, plan, **kwargs)


def autotune_rank0_fails(cache_dir: str, failing: str) -> Outcome:
    cache = _FailingCache(str(Path(cache_dir) / "plans.json"), failing)
    return _outcome(lambda: autotune(_site(), [Plan(), Plan(strategy="chunked", chunks=2)], _runners,
                                     config=QUICK, cache=cache).chosen.describe())


def autotune_runner_fails_on(bad_rank: int) -> Outcome:
    def make(plan: Plan):
        if dist.get_rank() == bad_rank and plan.strategy != "sequential":
            raise ValueError(f"cannot build a runner for {plan.describe()} on this rank")
        return _runners(plan)
    return _outcome(lambda: autotune(_site(), [Plan(), Plan(strategy="chunked", chunks=2)], make,
                                     config=QUICK).chosen.describe())


def autotune_cache_path(kind: str, base: str) -> Outcome:
    """Autotune through the live planner with a cache path that cannot be used (rank 0 reads and writes it)."""
    from hocket.ops.live import LiveConfig, LivePlanner, tune

    path = _bad_cache_path(kind, base)
    planner = LivePlanner(config=LiveConfig(tuning=QUICK), cache=PlanCache(ENV, path))
    return _outcome(lambda: tune(_site(), group=dist.group.WORLD, device="cpu", planner=planner).source)


def _bad_cache_path(kind: str, base: str) -> Path:
    root = Path(base)
    if kind == "below_a_file":
        (root / "afile").write_text("x")
        return root / "afile" / "sub" / "plans.json"
    if kind == "is_a_directory":
        (root / "plans.json").mkdir(parents=True, exist_ok=True)
        return root / "plans.json"
    raise KeyError(kind)


def planner_raises_on(bad_rank: int, exc_name: str) -> Outcome:
    """A plan=None call whose planner raises (an OSError, not only ValueError) on one rank."""
    from hocket.ops import live

    class Broken(live.LivePlanner):
        def decide(self, site, **kwargs):
            if dist.get_rank() == bad_rank:
                raise {"OSError": OSError, "RuntimeError": RuntimeError}[exc_name](f"planner broke on rank {bad_rank}")
            return super().decide(site, **kwargs)

    _reset()
    live.set_process_planner(Broken())
    try:
        return _outcome(_ag_mm_call)
    finally:
        _reset()


# -- 2. cache and profile faults degrade ----------------------------------------------------------------

def plan_none_with_cache_dir(kind: str, base: str) -> Outcome:
    """``plan=None`` (prediction, no autotune) with HOCKET_CACHE_DIR pointing somewhere unusable or broken."""
    root = Path(base)
    if kind == "below_a_file":
        (root / "afile").write_text("x")
        cache_dir = root / "afile" / "sub"
    else:
        cache_dir = root / "cache"
        cache_dir.mkdir(parents=True, exist_ok=True)
        plans = cache_dir / "plans.json"
        if kind == "is_a_directory":
            plans.mkdir(exist_ok=True)
        elif kind == "corrupt":
            plans.write_text("{not json")
        elif kind == "truncated":
            plans.write_text('{"format": "hocket-plan-cache", "schema": 1, "entries": {"a')
        elif kind == "foreign_schema":
            plans.write_text(json.dumps({"format": "hocket-plan-cache", "schema": 99, "entries": {}}))
        elif kind == "binary":
            plans.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
        else:
            raise KeyError(kind)
    dist.barrier()  # every rank has written its files before any reads them
    _reset()
    with _env({"HOCKET_CACHE_DIR": str(cache_dir), "HOCKET_AUTOTUNE": None}):
        try:
            return _outcome(_ag_mm_call)
        finally:
            _reset()


def cached_plan_cannot_run(base: str, autotuned: bool) -> Outcome:
    """A well-formed cache entry holding ``tile_fused`` for all_gather_matmul on CPU: skipped with a warning."""
    from hocket.ops import live
    from hocket.plan.bucket import bucket_site

    _reset()
    planner = live.LivePlanner(config=live.LiveConfig(tuning=QUICK), cache=PlanCache(ENV, Path(base) / "plans.json"))
    w = dist.get_world_size()
    site = Site(kind="ag_mm", m=8 * w, k=16, n=8, world=w, dtype="float32", ranks=tuple(range(w)))
    bucket = bucket_site(site, planner.config.bucket)
    if dist.get_rank() == 0:
        planner.cache.put(planner._cache_key(bucket), Plan(strategy="tile_fused", chunks=2), source="autotune")
    dist.barrier()
    planner.cache._entries = None  # every rank reads the file as written
    live.set_process_planner(planner)
    try:
        if autotuned:
            with _env({"HOCKET_AUTOTUNE": "1"}):
                return _outcome(lambda: (_ag_mm_call(), _ag_mm_call()))
        return _outcome(lambda: (_ag_mm_call(), _ag_mm_call()))
    finally:
        _reset()


def profile_fault(kind: str, base: str) -> Outcome:
    """HOCKET_PROFILE naming a corrupt, truncated, foreign-schema or missing profile: a warning, then plans."""
    path = Path(base) / f"profile-{kind}.json"
    if kind == "corrupt":
        path.write_text("{oops")
    elif kind == "truncated":
        path.write_text('{"fingerprint": "abc", "gemm": [')
    elif kind == "foreign_schema":
        path.write_text(json.dumps({"schema": 99, "fingerprint": "abc"}))
    elif kind == "binary":
        path.write_bytes(b"\x00\xff\xfe")
    elif kind != "missing":
        raise KeyError(kind)
    dist.barrier()
    _reset()
    with _env({"HOCKET_PROFILE": str(path), "HOCKET_CACHE_DIR": str(Path(base) / "cache"), "HOCKET_CLUSTER": None}):
        try:
            return _outcome(_ag_mm_call)
        finally:
            _reset()


# -- 4. clear errors, before any collective -----------------------------------------------------------

def reduce_op_enum(bad_rank: int | None) -> Outcome:
    _reset()
    w = dist.get_world_size()
    op = dist.ReduceOp.SUM if bad_rank is None or dist.get_rank() == bad_rank else "sum"
    a, b = torch.randn(2 * w, 8), torch.randn(8, 4)
    return _outcome(lambda: H.matmul_reduce_scatter(a, b, op, 0, dist.group.WORLD, plan="chunked").shape[0])


def timeout_env(value: str, bad_rank: int | None) -> Outcome:
    _reset()
    raw = value if bad_rank is None or dist.get_rank() == bad_rank else "60"
    with _env({"HOCKET_TIMEOUT_S": raw}):
        return _outcome(lambda: _ag_mm_call(plan="chunked"))


def not_a_member() -> Outcome:
    """A group of ranks 0 and 1; every rank calls with what new_group returned (NON_GROUP_MEMBER on rank 2)."""
    _reset()
    group = dist.new_group([0, 1])
    a, b = torch.randn(4, 8), torch.randn(8, 4)
    try:
        return _outcome(lambda: tuple(H.matmul_all_reduce(a, b, "sum", group, plan="chunked").shape))
    finally:
        dist.barrier()


def plan_json_not_an_object() -> Outcome:
    _reset()
    return _outcome(lambda: _ag_mm_call(plan="[1,2,3]"))


# -- 5. the timeout error helps ---------------------------------------------------------------------------

def diverge_after_first_call_default_mode(odd_rank: int) -> Outcome:
    """Default HOCKET_AGREEMENT: a rank that alone changes its shape on a later call meets the others in a data
    collective; the wait ends after HOCKET_TIMEOUT_S with an error that names the call and the fix."""
    _reset()
    g = dist.group.WORLD
    with _env({"HOCKET_TIMEOUT_S": "3", "HOCKET_AGREEMENT": None}):
        a, b = torch.randn(4, 8), torch.randn(8, 4)
        H.matmul_all_reduce(a, b, "sum", g, plan="chunked")
        if dist.get_rank() == odd_rank:
            a, b = torch.randn(4, 12), torch.randn(12, 4)
        return _outcome(lambda: H.matmul_all_reduce(a, b, "sum", g, plan="chunked").shape)


def peer_fails_at_once(bad_rank: int, out_dir: str) -> Outcome:
    """One rank exits at once instead of calling; the others' wait fails within seconds, saying so (their
    outcomes are written to ``out_dir/rank<r>.json``: the pool reports the dead rank, not their results)."""
    _reset()
    a, b = torch.randn(4, 8), torch.randn(8, 4)
    with _env({"HOCKET_TIMEOUT_S": "30"}):
        H.matmul_all_reduce(a, b, "sum", dist.group.WORLD, plan="chunked")  # agreed and prepared everywhere
        if dist.get_rank() == bad_rank:
            time.sleep(0.3)
            os._exit(3)
        outcome = _outcome(lambda: H.matmul_all_reduce(a, b, "sum", dist.group.WORLD, plan="chunked").shape)
    Path(out_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps(
        {"ok": outcome.ok, "type": outcome.type, "message": outcome.message, "s": outcome.s}))
    return outcome

"""The planner behind ``plan=None``: bucket the shape, decide once, reuse.

A :class:`LivePlanner` owns everything a running process needs to choose plans: the
cluster it runs on (``HOCKET_CLUSTER``, else ``hocket.hardware.probe()``), the
calibration profile, the on-disk cache and an in-memory table of decisions keyed by
the *bucketed* site key (:mod:`hocket.plan.bucket`), so a new sequence length reuses a
decision instead of planning again. After the first call for a bucket the cost is one
dict lookup.

Decisions come from, in order: the in-memory table; the on-disk cache (an autotuned
decision from an earlier run of this environment); measured autotuning, when switched
on (API argument, else ``HOCKET_AUTOTUNE``) and the caller supplies the live group;
otherwise prediction alone (:func:`hocket.plan.search.search`). Only strategies the
operators implement (``hocket.ops.executors.supported_table()``) are considered; a cached plan this
process cannot run (a strategy without an executor here, a transport this build lacks) is skipped with a
:class:`~hocket.plan.cache.PlanCacheWarning` naming the cache file. A cache file that cannot be read or
written only warns (:class:`~hocket.plan.cache.PlanCache`); under autotuning a failure on the deciding
rank reaches every rank as the same error (:func:`hocket.plan.autotune.broadcast_decision`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from hocket.core.plan import SEQUENTIAL, Plan
from hocket.core.site import Site
from hocket.ops import planning
from hocket.plan.autotune import (
    STEADY_REPS,
    AutotuneConfig,
    RunnerFactory,
    autotune,
    autotune_enabled,
    gather_texts,
    plans_to_time,
)
from hocket.plan.bucket import DEFAULT_BUCKET_POLICY, BucketPolicy, bucket_site, fit_plan
from hocket.plan.cache import PlanCache, PlanCacheWarning, current_environment
from hocket.plan.memory import live_free_memory_bytes
from hocket.plan.search import SearchConfig, SearchResult, search
from hocket.plan.space import SpaceConfig

RunnersFor = Callable[[Site], RunnerFactory]
"""Given the (bucketed) site, the RunnerFactory that times plans on it."""


class PlannerWarning(UserWarning):
    """The planner fell back to sequential (e.g. the cluster description does not fit the group)."""


@dataclass(frozen=True, kw_only=True)
class LiveConfig:
    """Configuration of a :class:`LivePlanner`."""

    search: SearchConfig = field(default_factory=SearchConfig)
    space: SpaceConfig = field(default_factory=SpaceConfig)
    bucket: BucketPolicy = DEFAULT_BUCKET_POLICY
    autotune: bool | None = None
    """True/False switch measured autotuning on/off; None follows ``HOCKET_AUTOTUNE`` (default off)."""
    tuning: AutotuneConfig = field(default_factory=AutotuneConfig)
    use_disk_cache: bool = True
    supported: Mapping[str, tuple[str, ...]] | None = None
    """kind -> strategies with an executor; None = ``hocket.ops.executors.supported_table()``."""
    steady_state: bool | None = None
    """price candidates as one call of a training loop (``SearchConfig.steady_state``): None =
    when the calibration profile carries measured host issue costs (``issue_us``, written by
    ``hocket calibrate`` on this machine), since the steady state is host-bound wherever those
    costs matter and the defaults can be 2x off; True = always; False = as ``search`` says."""
    eager_graphs: str = "off"
    """``auto`` / ``on``: price each candidate as hocket's CUDA graph replay of the call would run where it
    is replayed (:mod:`hocket.plan.eager_graphs`; ``HOCKET_EAGER_GRAPHS``); ``off``: as the host issues it."""

    def __post_init__(self) -> None:
        from hocket.plan.eager_graphs import check_mode

        check_mode(self.eager_graphs)


@dataclass(frozen=True, kw_only=True)
class Decision:
    """A decision for one bucket, before it is fitted to a call's exact shape."""

    plan: Plan
    source: str
    """``predicted``, ``cache`` or ``autotune`` (``disabled`` when HOCKET_DISABLE is set)."""
    bucket_key: str
    search: SearchResult | None = None
    timings_ms: Mapping[str, float] = field(default_factory=dict)
    """measured median ms per timed plan (plan JSON -> ms) when autotuned or read from the cache."""

    def measured_ms(self) -> tuple[float | None, float | None]:
        """(fastest measured sequential plan, the chosen plan) in ms; None where not measured."""
        sequential = [ms for key, ms in self.timings_ms.items() if Plan.from_json(key).strategy == "sequential"]
        return (min(sequential) if sequential else None), self.timings_ms.get(self.plan.to_json())


def _default_supported() -> Mapping[str, tuple[str, ...]]:
    """The strategies with a registered executor per operator kind (:func:`hocket.ops.executors.supported_table`)."""
    from hocket.ops.executors import supported_table

    return supported_table()


class LivePlanner:
    """Chooses plans for operator calls in this process (see module docstring)."""

    def __init__(self, *, cluster: object = None, profile: object = None, config: LiveConfig | None = None,
                 cache: PlanCache | None = None) -> None:
        self.config = config or LiveConfig()
        self._cluster = cluster
        self._profile = profile
        self._profile_loaded = profile is not None or cluster is not None
        self._cache = cache
        self._decisions: dict[str, Decision] = {}

    # -- lazily built resources ---------------------------------------------------------
    @property
    def cluster(self) -> object:
        if self._cluster is None:
            from hocket.env import cluster_env
            from hocket.hardware import load_cluster, probe

            name = cluster_env()
            self._cluster = load_cluster(name) if name else probe(cpu_ranks=_job_world_size())
        return self._cluster

    @property
    def profile(self) -> object:
        if not self._profile_loaded:
            from hocket.env import cluster_env
            from hocket.hardware.profile import load_profile

            self._profile = None if cluster_env() else load_profile()
            self._profile_loaded = True
        return self._profile

    @property
    def cache(self) -> PlanCache | None:
        if self._cache is None and self.config.use_disk_cache:
            from hocket.hardware import fingerprint

            self._cache = PlanCache(current_environment(fingerprint(self.cluster)["hash"]))
        return self._cache

    def _space_config(self, site: Site, *, measured: bool = False) -> SpaceConfig:
        """The space for ``site``: the strategies this process has executors for, the transports it
        registers; ``measured``: the candidates will be timed, so the variants a plan stands for are
        enumerated too (:attr:`SpaceConfig.variants`)."""
        supported = self.config.supported if self.config.supported is not None else _default_supported()
        allowed = set(supported.get(site.kind, ("sequential",)))
        strategies = tuple(s for s in self.config.space.strategies if s in allowed)
        transports = self.config.space.transports
        if self.config.supported is None:  # live executors: only transports this build registers
            from hocket.transport.registry import available_transports

            transports = tuple(t for t in transports if t in available_transports())
        return replace(self.config.space, strategies=strategies or ("sequential",), transports=transports,
                       variants=self.config.space.variants or measured)

    def search_config(self) -> SearchConfig:
        """``config.search``, in the steady state when ``config.steady_state`` asks for it (or, left
        None, when the profile has measured host issue costs)."""
        steady = self.config.steady_state
        if steady is None:
            steady = bool(getattr(self.profile, "issue_us", None))
        search_config = self.config.search
        return replace(search_config, steady_state=True) if steady and not search_config.steady_state \
            else search_config

    def tuning_config(self) -> AutotuneConfig:
        """``config.tuning`` with its ``reps`` decided where left None: ``STEADY_REPS`` calls back to back per
        sample when candidates are priced in the steady state (:meth:`search_config`), else one; a single
        call from an idle GPU also times the host's issue latency that a loop with the host ahead hides."""
        tuning = self.config.tuning
        if tuning.reps is not None:
            return tuning
        return replace(tuning, reps=STEADY_REPS if self.search_config().steady_state else 1)

    def _usable(self, bucket: Site) -> Callable[[Plan], str | None]:
        """Why a (cached) plan cannot run on ``bucket`` in this process, or None: its strategy has no executor
        for the site's kind here, or its transport is not registered in this build."""
        space = self._space_config(bucket)

        def refusal(plan: Plan) -> str | None:
            if plan.strategy not in space.strategies:
                return (f"strategy {plan.strategy!r} is not available for {bucket.kind} here; this process runs "
                        f"{space.strategies}")
            if plan.strategy != "sequential" and plan.transport not in space.transports:
                return f"transport {plan.transport!r} is not available here; this build has {space.transports}"
            return None
        return refusal

    def _cached(self, bucket: Site) -> object:
        """The disk cache's entry for ``bucket`` if this process can run its plan (else a warning, None)."""
        if self.cache is None:
            return None
        hit = self.cache.get(self._cache_key(bucket))
        refusal = self._usable(bucket)(hit.plan) if hit is not None else None
        if refusal is not None:
            warnings.warn(f"plan cache {self.cache.path}: the cached plan {hit.plan.describe()} for {bucket.key} "
                          f"cannot run here ({refusal}); skipping it and planning afresh", PlanCacheWarning,
                          stacklevel=4)
            return None
        return hit

    def _cache_key(self, bucket: Site) -> str:
        """The on-disk cache key of a bucket's decision: its key, apart per ``eager_graphs`` mode (a decision
        timed with calls replayed where they pay is not one for calls always issued)."""
        mode = self.config.eager_graphs
        return bucket.key if mode == "off" else f"{bucket.key}|eager_graphs={mode}"

    def _eager_graph_cost(self):
        """The CostFn of ``config.eager_graphs`` (None when off: ``search`` builds the plain one)."""
        if self.config.eager_graphs == "off":
            return None
        from hocket.plan.eager_graphs import eager_graph_cost_fn

        return eager_graph_cost_fn(self.cluster, self.profile, steady_state=self.search_config().steady_state,
                                   mode=self.config.eager_graphs)

    def _with_issued_leaders(self, bucket: Site, shortlist: tuple[Plan, ...], free: int | None) -> tuple[Plan, ...]:
        """``shortlist`` plus the two plans that lead when every candidate is priced as the host issues it
        (under ``eager_graphs`` the autotuner times each as it runs, replayed or not): the measured choice is
        then never worse than what the eager planner would have timed, wherever the replay pricing errs."""
        issued = search(bucket, self.cluster, profile=self.profile, config=self.search_config(),
                        space_config=self._space_config(bucket), free_memory_bytes=free)
        return tuple(dict.fromkeys((*shortlist, *issued.tuning_shortlist(2))))

    def replays(self, site: Site, plan: Plan, mode: str | None = None) -> bool:
        """Whether a call of ``plan`` on ``site`` is replayed from hocket's own CUDA graph under ``mode``
        (default ``config.eager_graphs``): never when off or when a graph cannot capture the plan; always
        under ``on``; under ``auto`` where the replay with its copies is priced below the issued call."""
        from hocket.plan.eager_graphs import check_mode, eager_graph_cost_fn, replayable

        mode = check_mode(mode if mode is not None else self.config.eager_graphs)
        if mode == "off" or not replayable(site, plan):
            return False
        if mode == "on":
            return True
        try:
            cost = eager_graph_cost_fn(self.cluster, self.profile, steady_state=self.search_config().steady_state,
                                       mode=mode)
            return bool(cost.replays(site, plan))
        except ValueError as exc:  # a cluster description that does not cover the group: issue it eagerly
            warnings.warn(f"hocket could not price replaying {site.key} ({exc}); its calls are issued eagerly",
                          PlannerWarning, stacklevel=2)
            return False

    # -- deciding -----------------------------------------------------------------------
    def decide(self, site: Site, *, group: object = None, runners: RunnersFor | None = None,
               device: object = "cpu", autotune_switch: bool | None = None) -> Decision:
        """The decision for ``site``'s bucket (made now if unknown).

        Autotuning needs ``runners`` (site -> RunnerFactory, called with the bucketed
        site) and then is collective over ``group``: every rank must call it for the
        same site.
        """
        from hocket.env import disabled

        bucket = bucket_site(site, self.config.bucket)
        if disabled():
            return Decision(plan=SEQUENTIAL, source="disabled", bucket_key=bucket.key)
        switch = autotune_switch if autotune_switch is not None else self.config.autotune
        measure = autotune_enabled(switch) and runners is not None
        known = self._decisions.get(bucket.key)
        if known is not None and not (measure and known.source == "predicted" and known.search is not None):
            return known  # a searched-but-unmeasured decision is measured once autotuning is asked for
        # Under autotune rank 0's candidates are used by every rank, so its free device
        # memory may set the budget; prediction alone must stay identical on every rank.
        free = live_free_memory_bytes() if measure else None
        result, failure = None, None
        try:
            result = search(bucket, self.cluster, profile=self.profile, config=self.search_config(),
                            space_config=self._space_config(bucket, measured=measure), free_memory_bytes=free,
                            cost_fn=self._eager_graph_cost())
        except ValueError as exc:
            failure = f"{exc}"
        if measure:  # autotuning is collective: every rank must know whether some rank could not search
            failures = [text for text in gather_texts(failure or "", group=group, device=device) if text]
            failure = failure or (f"another rank could not plan it: {failures[0]}" if failures else None)
        if failure is not None:
            warnings.warn(f"hocket could not plan {site.key} on cluster {getattr(self.cluster, 'name', '?')!r} "
                          f"({failure}); running it sequentially. Describe the cluster with HOCKET_CLUSTER=<preset "
                          f"or YAML> if this machine's probe does not cover the group.", PlannerWarning,
                          stacklevel=3)
            decision = Decision(plan=SEQUENTIAL, source="predicted", bucket_key=bucket.key)
            self._decisions[bucket.key] = decision
            return decision
        if measure:
            shortlist = plans_to_time(result, self.config.tuning.top_k)
            if self.config.eager_graphs != "off":  # and the plans that lead when issued: a replay's price is the
                shortlist = self._with_issued_leaders(bucket, shortlist, free)  # newer model
            tuned = autotune(bucket, shortlist, runners(bucket), group=group,
                             device=device, config=self.tuning_config(), cache=self.cache,
                             cache_key=self._cache_key(bucket), usable=self._usable(bucket))
            decision = Decision(plan=tuned.chosen, source=tuned.source, bucket_key=bucket.key, search=result,
                                timings_ms=dict(tuned.timings_ms))
        else:
            cached = self._cached(bucket)
            if cached is not None:
                decision = Decision(plan=cached.plan, source="cache", bucket_key=bucket.key, search=result,
                                    timings_ms=dict(cached.timings_ms))
            else:
                decision = Decision(plan=result.chosen, source="predicted", bucket_key=bucket.key, search=result)
        self._decisions[bucket.key] = decision
        return decision

    def plan(self, site: Site, **kwargs) -> Plan:
        """The plan for ``site``: its bucket's decision fitted to the exact shape."""
        return fit_plan(self.decide(site, **kwargs).plan, site)

    def forget(self) -> None:
        """Drop the in-memory decisions (the on-disk cache stays)."""
        self._decisions.clear()

    def known(self) -> dict[str, Decision]:
        return dict(self._decisions)


_PLANNERS: dict[str, LivePlanner] = {}


def process_planner() -> LivePlanner:
    """The planner ``plan=None`` uses in this process (created on first use)."""
    planner = _PLANNERS.get("default")
    if planner is None:
        planner = _PLANNERS["default"] = LivePlanner()
    return planner


def captured_planner() -> LivePlanner:
    """The planner of ``plan=None`` calls replayed from CUDA graphs (``hocket.ops.CapturedCall``): the
    process planner's cluster, profile and settings, over the plans a graph can capture
    (``SpaceConfig(captured=True)``, :mod:`hocket.plan.capture`), pricing with ``SearchConfig(captured=True)``, without the disk cache
    (its entries are eager decisions). It decides by prediction unless autotuning is asked for
    (``HOCKET_AUTOTUNE=1``, or :func:`tune` with ``captured=True``): then the candidates are timed as
    CUDA graph replays (``operator_runners(captured=True)``). Rebuilt when the process planner is replaced."""
    planner = _PLANNERS.get("captured")
    if planner is None:
        base = process_planner()
        space = replace(base.config.space, captured=True)
        config = replace(base.config, search=replace(base.config.search, captured=True), space=space,
                         autotune=False, use_disk_cache=False)
        planner = _PLANNERS["captured"] = LivePlanner(cluster=base._cluster, profile=base._profile, config=config)
        if base._profile_loaded:
            planner._profile_loaded = True
    return planner


def eager_graphs_planner(mode: str) -> LivePlanner:
    """The planner of ``plan=None`` calls under ``HOCKET_EAGER_GRAPHS=auto`` or ``on`` (``mode``): the
    process planner's cluster, profile and settings, pricing every candidate as it will run (replayed from
    hocket's own CUDA graph, with its copies, or issued by the host: :mod:`hocket.plan.eager_graphs`).
    Autotuning, where asked for, times each candidate's operator call as it runs in this mode; its decisions
    share the process planner's disk cache under keys of their own (:meth:`LivePlanner._cache_key`)."""
    from hocket.plan.eager_graphs import check_mode

    key = f"eager_graphs:{check_mode(mode)}"
    planner = _PLANNERS.get(key)
    if planner is None:
        base = process_planner()
        config = replace(base.config, eager_graphs=mode)
        planner = _PLANNERS[key] = LivePlanner(cluster=base._cluster, profile=base._profile, config=config)
        if base._profile_loaded:
            planner._profile_loaded = True
    return planner


def set_process_planner(planner: LivePlanner | None) -> None:
    """Replace (or with None, reset) the process planner, e.g. to give it a described cluster."""
    if planner is not None and not isinstance(planner, LivePlanner):
        raise TypeError(f"planner must be a hocket.ops.live.LivePlanner or None, got {type(planner).__name__}")
    _PLANNERS.clear()
    if planner is not None:
        _PLANNERS["default"] = planner


def operator_runners(site: Site, *, group: object, device: object = "cpu", seed: int = 0,
                     captured: bool = False) -> RunnerFactory:
    """A RunnerFactory that calls the hocket operator for ``site`` on fresh random inputs.

    Inputs are drawn once (the same on every rank), so timing compares plans only.
    ``group`` None means the default process group. ``captured``: each plan's call is captured in a
    CUDA graph when its runner is made (``hocket.ops.CapturedCall``, collective like the call) and the
    runner replays it, so a plan is timed as a loop of replays runs it (CUDA devices only).
    """
    import torch
    import torch.distributed as dist

    import hocket.ops as ops

    if group is None:
        group = dist.group.WORLD
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dtype = getattr(torch, site.dtype)
    world = site.world

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float32).to(dtype=dtype, device=device)

    if site.kind == "ag_mm":
        if site.dim == -1:
            a, gather_dim = rand(site.m, site.k // world), 1
        else:
            a, gather_dim = rand(site.m // world, site.k), 0
        bs = [rand(site.k, site.n) for _ in range(site.num_b)]

        def factory(plan: Plan) -> Callable[[], object]:
            return lambda: ops.all_gather_matmul(a, bs, gather_dim, group, return_A=False, plan=plan)
    elif site.kind == "mm_rs":
        a, b = rand(site.m, site.k), rand(site.k, site.n * site.num_b)
        scatter_dim = 1 if site.dim == -1 else 0

        def factory(plan: Plan) -> Callable[[], object]:
            return lambda: ops.matmul_reduce_scatter(a, b, "sum", scatter_dim, group, plan=plan)
    elif site.kind == "mm_ar":
        a, b = rand(site.m, site.k), rand(site.k, site.n * site.num_b)

        def factory(plan: Plan) -> Callable[[], object]:
            return lambda: ops.matmul_all_reduce(a, b, "sum", group, plan=plan)
    else:
        raise ValueError(f"site.kind={site.kind!r} has no hocket operator to autotune; "
                         f"autotune supports ag_mm, mm_rs and mm_ar")
    if not captured:
        return factory
    if torch.device(device).type != "cuda":
        raise ValueError(f"operator_runners(captured=True) needs a CUDA device, got device={device!r}: "
                         f"CUDA graphs capture GPU work only")
    from hocket.ops.captured import replayed

    return lambda plan: replayed(factory(plan), device, what=f"autotune {site.kind} {plan.describe()}")


def _job_world_size() -> int | None:
    """Ranks of the running job (CPU ranks for the probe), or None outside torch.distributed."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else None


def _live_device() -> object:
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def _can_capture_now() -> bool:
    """Whether candidates can be captured here to be timed: a CUDA device and no capture under way (the
    ``plan=None`` call inside a ``CapturedCall``'s own capture reuses the decision of its warm-up)."""
    import torch

    return torch.cuda.is_available() and not torch.cuda.is_current_stream_capturing()


def _whole_world(site: Site) -> bool:
    """True when ``site``'s group is the default process group (the only group found by ranks alone)."""
    import torch.distributed as dist

    return (dist.is_available() and dist.is_initialized()
            and site.group_ranks == tuple(range(dist.get_world_size())))


def tune(site: Site, *, group: object = None, autotune: bool | None = True, device: object = None,
         planner: LivePlanner | None = None, captured: bool = False) -> Decision:
    """Decide ``site`` on the live ``group`` now (collective: call on every rank), measuring
    the top-k predicted plans plus sequential when ``autotune`` (default on; None follows
    ``HOCKET_AUTOTUNE``). Later ``plan=None`` calls of that shape bucket reuse the decision.

    ``captured``: decide for calls replayed from CUDA graphs (:func:`captured_planner`, unless
    ``planner`` is given), timing each candidate as graph replays; later ``plan=None`` calls inside
    a ``hocket.ops.CapturedCall`` reuse that decision."""
    device = device if device is not None else _live_device()
    planner = planner or (captured_planner() if captured else process_planner())
    return planner.decide(site, group=group, device=device, autotune_switch=autotune,
                          runners=lambda s: operator_runners(s, group=group, device=device, captured=captured))


def plan_for_call(site: Site, *, captured: bool = False, eager_graphs: str = "off") -> Plan:
    """What ``plan=None`` runs (``hocket.ops.planning.choose_plan``).

    Prediction (or a cached decision) by default. With ``HOCKET_AUTOTUNE=1`` and a site
    on the default process group, outside torch.compile tracing, the first call of a
    shape bucket is autotuned on the live group (collective, like the call itself).
    ``captured``: a call to be replayed from a CUDA graph (:func:`captured_planner`): by prediction, or
    with ``HOCKET_AUTOTUNE=1`` (on a CUDA device, outside a capture) by timing the candidates as replays.
    ``eager_graphs`` (``auto`` / ``on``): an eager call that hocket may replay from its own CUDA graph
    (:func:`eager_graphs_planner`).
    """
    import torch

    planner = captured_planner() if captured else \
        eager_graphs_planner(eager_graphs) if eager_graphs != "off" else process_planner()
    if autotune_enabled(process_planner().config.autotune) and _whole_world(site) \
            and not torch.compiler.is_compiling() and not (captured and not _can_capture_now()):
        device = _live_device()
        decision = planner.decide(site, device=device, autotune_switch=True,
                                  runners=lambda s: operator_runners(s, group=None, device=device, captured=captured))
    else:
        decision = planner.decide(site)
    return fit_plan(decision.plan, site)


__all__ = ["Decision", "LiveConfig", "LivePlanner", "PlannerWarning", "captured_planner", "eager_graphs_planner",
           "operator_runners",
           "plan_for_call", "process_planner", "set_process_planner", "tune"]

# looked up per call, so a replaced ``hocket.ops.live.plan_for_call`` (a test's) is the one asked
planning.set_call_planner(lambda site, **options: plan_for_call(site, **options))

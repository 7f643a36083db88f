"""From one operator call to (group, Site, Plan, context): checks, planning and agreement, cached.

The first call with a given signature (operator, group, shapes, dtypes, devices, dim,
plan text, flags, direction, ``HOCKET_DISABLE``) runs the local input checks, builds
the Site, resolves the Plan and runs the cross-rank agreement; later calls with the
same signature are one dict lookup.

The hot path (a cache hit) is kept to a few microseconds: the key is built from
``torch.Size``/dtype/device objects as they are, and the settings it depends on
(``HOCKET_DISABLE``, ``HOCKET_AGREEMENT``, ``HOCKET_EAGER_GRAPHS``) are read raw on every call
(:func:`hocket.env.raw`) with their parsed meaning memoised (see :func:`_env_flags`), so a change of
one at runtime still takes effect on the next call; so does :func:`hocket.core.sizes.set_sizes`.

Every setting that changes what a rank executes is in the call's agreement descriptor
(:func:`settings_in_descriptor`), so ranks started with different values raise the same
:class:`~hocket.ops.agreement.AgreementError` at their first call instead of waiting.

A plan with ``hierarchy="intra_first"`` runs on the hierarchical transport
(:mod:`hocket.transport.hierarchical`) over the node of each group rank
(:func:`hocket.ops.lowering.hierarchy.group_nodes`): for an explicit plan that layout is in the descriptor
(``flags.hierarchy_nodes``) and a layout the hierarchy cannot run on is the rank's local error, reported on
every rank before any data moves; for a plan hocket chose, rank 0's layout is settled on every rank (or, where
rank 0 cannot run the hierarchy, every rank runs the plan flat with a warning: :func:`settled_nodes`).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.profiler import record_function

from hocket.core.plan import CAPTURABLE_TRANSPORTS, Plan
from hocket.core.site import Site
from hocket.core.sizes import TransportSizes, sizes_in_force
from hocket.env import agreement_every_call, autotune_env, disabled, eager_graphs, host_stage_dir, wait_timeout_s
from hocket.env import raw as raw_settings
from hocket.ops.agreement import Descriptor, agree, all_ranks_ok, mode_in_force, settle, settle_plan, settle_replay
from hocket.ops.context import context_for
from hocket.ops.eager_graph import EagerGraph, max_graphs, release_all
from hocket.ops.lowering import executor_for
from hocket.ops.lowering.hierarchy import group_nodes, hierarchical_executor
from hocket.ops.lowering.runtime import Runtime
from hocket.ops.planning import OP_NAMES, check_supported, choose_plan, explicit_plan, planning_captured
from hocket.plan.capture import capture_refusal
from hocket.transport.group import GroupHandle, process_group_of, resolve_group
from hocket.transport.pending import set_current_call
from hocket.transport.registry import get_transport


@dataclass(frozen=True, kw_only=True)
class Prepared:
    group: GroupHandle
    site: Site
    plan: Plan
    dim: int
    runtime: Runtime
    run: Callable
    """the strategy's executor for this operator."""
    label: str
    """the ``record_function`` range name: ``hocket::<op>[<plan>]``."""
    capture_check: bool = False
    """whether a call must first check whether it is being captured in a CUDA graph (a GPU call whose
    transport is not in ``CAPTURABLE_TRANSPORTS``)."""
    capture_refusal: str | None = None
    """why a CUDA graph cannot capture this call (:func:`hocket.plan.capture.capture_refusal`), or None."""
    graph: EagerGraph | None = None
    """the call's own CUDA graph when its calls are replayed (``HOCKET_EAGER_GRAPHS``,
    :mod:`hocket.ops.eager_graph`), else None."""
    where: str = ""
    """the call as a failed wait's error names it (:func:`call_description`)."""


_PREPARED: dict[tuple, Prepared] = {}


def clear_prepared_cache() -> None:
    _PREPARED.clear()
    release_all()


_ENV_PARSED: dict[tuple, tuple[bool, bool, str]] = {}


_HOT_SETTINGS = ("HOCKET_DISABLE", "HOCKET_AGREEMENT", "HOCKET_EAGER_GRAPHS")


def _raw_env() -> tuple:
    """The raw values of ``HOCKET_DISABLE``, ``HOCKET_AGREEMENT`` and ``HOCKET_EAGER_GRAPHS`` now."""
    return raw_settings(_HOT_SETTINGS)


SIZED_TRANSPORTS = ("copy_engine", "peer_read", "host_staged")
"""transports whose buffers and messages :class:`~hocket.core.sizes.TransportSizes` sizes."""


def settings_in_descriptor(plan: Plan | None, *, disabled_now: bool, graphs: str,
                           sizes: TransportSizes | None = None) -> dict:
    """The settings that change what this rank executes for a call of ``plan`` (None: left to hocket, so
    any transport may run), by name, for the agreement descriptor: ``HOCKET_DISABLE``, ``HOCKET_AGREEMENT``
    (a rank that exchanges when another skips would wait) and ``HOCKET_EAGER_GRAPHS`` (as it applies to the
    call: ``off`` off the GPU), with the eager-graph limit where graphs are on; for ``plan=None``
    ``HOCKET_AUTOTUNE`` (an autotuning rank runs timing collectives); where a sized transport may run, the
    :class:`~hocket.core.sizes.TransportSizes` in force (``sizes``, default :func:`sizes_in_force`), and where
    the host-staged relay may run, ``HOCKET_HOST_STAGE_DIR``. ``HOCKET_TIMEOUT_S``, ``HOCKET_CACHE_DIR``,
    ``HOCKET_PROFILE``, ``HOCKET_CLUSTER`` and ``HOCKET_GIT_HASH`` are not in it: a rank's timeout bounds only its own waits, and a plan left to hocket
    is rank 0's choice on every rank whatever each rank's cache, profile or cluster says."""
    settings: dict = {"HOCKET_DISABLE": disabled_now, "HOCKET_AGREEMENT": mode_in_force(),
                      "HOCKET_EAGER_GRAPHS": graphs}
    if graphs != "off":
        settings["eager_graphs_max"] = max_graphs()
    transport = None if plan is None else plan.transport
    if plan is None:
        settings["HOCKET_AUTOTUNE"] = autotune_env()
    if transport is None or transport in SIZED_TRANSPORTS:
        settings["transport_sizes"] = (sizes or sizes_in_force()).to_dict()
    if transport is None or transport == "host_staged":
        settings["HOCKET_HOST_STAGE_DIR"] = str(host_stage_dir())
    return settings


def _env_flags() -> tuple[bool, bool, str]:
    """``(disabled(), agreement_every_call(), eager_graphs())`` for the environment as it is now.

    The raw values are the memo key and :mod:`hocket.env` parses them, so its meaning of
    each flag is the only one and a runtime change of either variable takes effect at once.
    """
    raw = _raw_env()
    parsed = _ENV_PARSED.get(raw)
    if parsed is None:
        parsed = _ENV_PARSED[raw] = (disabled(), agreement_every_call(), eager_graphs())
    return parsed


def run_prepared(prep: Prepared, *args):
    """``prep.run(*args)``, inside a ``record_function(prep.label)`` range only while a profiler records
    (entering a range costs ~15 us even when nobody listens)."""
    if prep.capture_check and torch.cuda.is_current_stream_capturing():
        if prep.capture_refusal:
            raise ValueError(f"{prep.label}: this plan cannot be captured in a CUDA graph: {prep.capture_refusal}. "
                             f"Capture a plan over one of {CAPTURABLE_TRANSPORTS}, or leave plan=None inside "
                             f"hocket.ops.CapturedCall")
        if not planning_captured():
            raise ValueError(f"{prep.label}: a copy-engine call is captured only through hocket.ops.CapturedCall "
                             f"(its calls then use slots of their own and end on a barrier); a bare "
                             f"torch.cuda.graph would bake one slot parity of the eager protocol into every replay")
    set_current_call(prep.where)
    run = prep.run if prep.graph is None or torch.cuda.is_current_stream_capturing() else prep.graph
    try:
        if torch.autograd._profiler_enabled():
            with record_function(prep.label):
                return run(*args)
        return run(*args)
    finally:
        set_current_call("")  # a wait outside an operator call names its own transfer, not a finished call


def prepare(kind: str, *, group_name: str, tensors: Sequence[torch.Tensor], dim_arg: int, plan_text: str,
            flags: dict, direction: str, check: Callable[[int], int],
            site_of: Callable[[GroupHandle, int], Site]) -> Prepared:
    """Checks + Site + Plan + agreement for one call (cached by the call's signature).

    ``check(world)`` runs the local checks and returns the normalised dim;
    ``site_of(group, dim)`` builds the Site.
    """
    pg = process_group_of(group_name)
    settings_error: ValueError | None = None
    try:
        is_disabled, every_call, graphs = _env_flags()
    except ValueError as exc:  # a setting hocket.env rejects: reported to every rank by the agreement
        is_disabled, every_call, graphs, settings_error = disabled(), True, "off", exc
    device = tensors[0].device if tensors and isinstance(tensors[0], torch.Tensor) else torch.device("cpu")
    if device.type != "cuda" or planning_captured():
        graphs = "off"  # CUDA graphs capture GPU work only; a call planned for a capture is replayed by it
    sizes = sizes_in_force()
    key = (kind, group_name, id(pg), *[(t.shape, t.dtype, t.device) for t in tensors], dim_arg, plan_text,
           *flags.items(), direction, is_disabled, not plan_text and planning_captured(), graphs, sizes)
    hit = _PREPARED.get(key)
    if hit is not None and hit.group.pg is pg and not every_call:
        return hit
    group = resolve_group(pg)
    op = OP_NAMES[kind]
    try:
        wait_timeout_s()  # a bad HOCKET_TIMEOUT_S is reported to every rank here, not in a wait after data moved
    except ValueError as exc:
        settings_error = settings_error or exc
    site = plan = None
    dim = 0
    nodes: tuple[tuple[int, ...], str] | None = None
    local_error: ValueError | TypeError | None = settings_error or _flags_error(op, flags)
    try:
        if local_error is None:
            dim = check(group.world)
            site = site_of(group, dim)
            plan = explicit_plan(plan_text, site)
            if plan is not None and plan.hierarchy is not None:
                nodes = group_nodes(group, plan, uneven=bool(getattr(site, "uneven", False)))
    except (ValueError, TypeError) as exc:
        local_error = exc
    hierarchy_flags = {"hierarchy_nodes": list(nodes[0])} if nodes is not None else {}
    descriptor = Descriptor(
        op=op, site=site.to_dict() if site else {}, plan=plan.to_dict() if plan else {"choose": True},
        flags={**flags, "direction": direction, **hierarchy_flags,
               **settings_in_descriptor(plan if local_error is None else None, disabled_now=is_disabled,
                                        graphs=graphs, sizes=sizes)},
        error=f"{type(local_error).__name__}: {local_error}" if local_error else "")
    set_current_call(call_description(op, site, group, plan))
    try:
        agree(group, descriptor, device=device, local_error=local_error)
        if plan is None:
            plan = settle_plan(group, op, lambda: check_supported(kind, choose_plan(site, eager_graphs=graphs)),
                               device=device)
            if plan.hierarchy is not None:
                nodes = settled_nodes(group, op, plan, device, uneven=bool(getattr(site, "uneven", False)))
                if nodes is None:
                    plan = plan.with_(hierarchy=None)
    finally:
        set_current_call("")  # call() names the call again while it runs
    transport = _transport(plan, group, sizes, nodes)
    run = executor_for(kind, plan.strategy)
    if nodes is not None:
        run = hierarchical_executor(kind, plan, run)
    runtime = Runtime(group=group, ctx=context_for(group.name, device, tensors[0].dtype), transport=transport)
    label = f"hocket::{op}[{plan.describe()}{'/' + plan.hierarchy if plan.hierarchy else ''}]"
    graph = None
    if graphs != "off" and settle_replay(group, op, lambda: replays(site, plan, graphs), device=device):
        graph = EagerGraph(run, f"{label} (replayed)", device, limit=max_graphs(),
                           agree=lambda ok: all_ranks_ok(group, ok, device=device))
    prepared = Prepared(group=group, site=site, plan=plan, dim=dim, runtime=runtime, run=run, label=label,
                        graph=graph,
                        capture_check=device.type == "cuda" and plan.transport not in CAPTURABLE_TRANSPORTS,
                        capture_refusal=capture_refusal(site, plan) if site is not None else None,
                        where=call_description(op, site, group, plan))
    _PREPARED[key] = prepared
    return prepared


def call_description(op: str, site: Site | None, group: GroupHandle, plan: Plan | None) -> str:
    """``hocket.<op> [plan] on site <kind> m=.. k=.. n=.. <dtype> on group '<name>' as rank r of w``."""
    shape = (f" on site {site.kind} m={site.m} k={site.k} n={site.n}" + (f" x{site.num_b}" if site.num_b > 1 else "")
             + f" {site.dtype} dim={site.dim}") if site is not None else ""
    label = f" [{plan.describe()}]" if plan is not None else ""
    return f"hocket.{op}{label}{shape} on group {group.name!r} as rank {group.rank} of {group.world}"


_PLAIN = (str, int, float, bool, type(None))

FLAG_EXAMPLES = {"reduce_op": "reduce_op='sum' (or 'avg'), not torch.distributed.ReduceOp.SUM"}


def _flags_error(op: str, flags: dict) -> TypeError | None:
    """A clear error for a flag that is not a plain value (the operators take strings, ints and bools), else
    None; raised as the rank's local error, so every rank reports it before any data moves."""
    for name, value in flags.items():
        if not isinstance(value, _PLAIN):
            example = FLAG_EXAMPLES.get(name, f"a str, int or bool for {name}")
            return TypeError(f"hocket.{op}: {name}={value!r} is a {type(value).__module__}.{type(value).__qualname__}; "
                             f"pass {example}")
    return None


def _transport(plan: Plan, group: GroupHandle, sizes: TransportSizes, nodes: tuple[tuple[int, ...], str] | None):
    """``plan``'s transport on ``group``; a sized one (:data:`SIZED_TRANSPORTS`) with ``sizes``; with ``nodes``
    (the node of each group rank and the cluster's name, for a hierarchical plan) the hierarchical one."""
    if nodes is not None:
        return get_transport(plan.transport, group, hierarchy=plan.hierarchy, nodes=nodes[0], cluster_name=nodes[1])
    return get_transport(plan.transport, group, comm_sms=plan.comm_sms,
                         sizes=sizes if plan.transport in SIZED_TRANSPORTS else None)


def settled_nodes(group: GroupHandle, op: str, plan: Plan, device: torch.device, *,
                  uneven: bool = False) -> tuple[tuple[int, ...], str] | None:
    """The node layout of a hierarchical ``plan`` hocket chose: :func:`group_nodes` on every rank, rank 0's
    layout used everywhere. Where rank 0's cluster cannot run the hierarchy (a layout the space should not have
    offered it for), None on every rank, with a :class:`~hocket.ops.live.PlannerWarning` naming why: the call
    then runs the plan flat."""
    def choose() -> str:
        try:
            nodes, name = group_nodes(group, plan, uneven=uneven)
        except ValueError as exc:
            return json.dumps({"error": str(exc)})
        return json.dumps({"nodes": list(nodes), "cluster": name})

    got = json.loads(settle(group, op, "mapping the group's ranks onto the cluster's nodes for the hierarchy",
                            choose, device=device))
    if "error" in got:
        from hocket.ops.live import PlannerWarning

        warnings.warn(f"hocket.{op}: the planner chose {plan.describe()} with hierarchy={plan.hierarchy!r}, which "
                      f"rank 0 cannot run ({got['error']}); running it without the hierarchy", PlannerWarning,
                      stacklevel=3)
        return None
    return tuple(int(n) for n in got["nodes"]), str(got["cluster"])


def replays(site: Site, plan: Plan, mode: str) -> bool:
    """Whether this rank would replay ``plan``'s calls on ``site`` under ``mode`` (the eager-graph planner's
    pricing, :meth:`hocket.ops.live.LivePlanner.replays`); rank 0's answer is the one all ranks use."""
    from hocket.ops.live import eager_graphs_planner

    return eager_graphs_planner(mode).replays(site, plan)

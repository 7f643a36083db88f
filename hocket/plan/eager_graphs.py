"""Pricing eager calls that hocket replays from CUDA graphs of its own (``HOCKET_EAGER_GRAPHS``).

An overlapped plan issues many small items per call; where the host issues them slower than the
device runs them, the call runs at the host's pace (the two 0.3 ms cases of
benchmarks/results/h200x2/2026-12-01_nvlink-eager.md on slow-host leases).
:mod:`hocket.ops.eager_graph` then captures the call once and replays it: the host pays one replay
and a few copy launches, the device pays copying the call's inputs into the graph's and its outputs
out (a graph reads and writes fixed addresses, and an eager caller expects fresh output tensors).

A replayed call is priced as the replay (``predict(..., captured=True)``: no host issue cost but the
replay's, kernels ordered by their launch order) plus those copies (:func:`graph_copy_ms`: every input
and output read and written once at the device's memory rate, one launch each). ``auto`` replays where
that is below the call issued by the host (priced as the planner prices eager calls); ``on`` replays
every plan a graph can capture (:func:`replayable`). The same comparison is every candidate's price
when ``plan=None`` chooses (:func:`eager_graph_cost_fn`), so the planner weighs a pipeline of many
pieces, which the host could not keep fed, replayed.
"""

from __future__ import annotations

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.plan.capture import capture_refusal

MODES = ("off", "auto", "on")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"eager_graphs={mode!r} must be one of {MODES} (HOCKET_EAGER_GRAPHS)")
    return mode


def graph_copy_bytes(site: Site) -> tuple[int, int]:
    """(bytes, tensors) one rank copies per replayed call: its inputs into the graph's, its outputs out.
    ``ag_mm``: the shard of A and every B in, every ``A @ B`` out (a gathered A the caller asks back for
    is not in the Site, so not counted); ``mm_rs``: A and B in, the rank's block out; ``mm_ar``: A and B
    in, the whole product out."""
    item = site.itemsize
    if site.kind == "ag_mm":
        ins = site.m * site.k // site.world + site.num_b * site.k * site.n
        outs = site.num_b * site.m * site.n
        return (ins + outs) * item, 1 + 2 * site.num_b
    if site.kind == "mm_rs":
        ins = site.m * site.k + site.k * site.n * site.num_b
        outs = -(-site.m // site.world) * site.n * site.num_b
        return (ins + outs) * item, 3
    ins = site.m * site.k + site.k * site.n * site.num_b
    return (ins + site.m * site.n * site.num_b) * item, 3


def graph_copy_ms(site: Site, cluster: object) -> float:
    """Device ms of one replayed call's copies on the group's slowest device: each byte read and written
    once at ``memory_gbps * MEMORY_EFFICIENCY`` (:func:`hocket.cost.compute.memory_ms`), a launch per copy."""
    from hocket.cost.builder import group_facts
    from hocket.cost.compute import memory_ms

    device = group_facts(cluster, site.group_ranks, site.dtype)[1]
    nbytes, copies = graph_copy_bytes(site)
    return memory_ms(device, 2 * nbytes, launches=copies)


def replayable(site: Site, plan: Plan) -> bool:
    """Whether hocket can replay ``plan``'s calls from a graph: a plan a CUDA graph captures
    (:func:`hocket.plan.capture.capture_refusal`; the host-staged relay signals on the device, so it does)."""
    return capture_refusal(site, plan) is None


def eager_graph_cost_fn(cluster: object, profile: object = None, *, steady_state: bool = False,
                        mode: str = "auto"):
    """A CostFn for ``plan=None`` under ``mode``: a plan that is replayed (see :func:`replays_with`) is
    priced as the replay plus its copies, any other as the eager call (``steady_state`` as the planner's)."""
    from hocket.plan.search import predict_cost_fn

    check_mode(mode)
    eager = predict_cost_fn(cluster, profile, steady_state=steady_state)
    replay = predict_cost_fn(cluster, profile, captured=True)

    def cost(site: Site, plan: Plan) -> float:
        return _priced(site, plan, cluster, eager, replay, mode)[0]

    cost.replays = lambda site, plan: _priced(site, plan, cluster, eager, replay, mode)[1]
    return cost


def _priced(site: Site, plan: Plan, cluster: object, eager, replay, mode: str) -> tuple[float, bool]:
    from hocket.plan.search import PricedMs

    if mode == "off" or not replayable(site, plan):
        return eager(site, plan), False
    replayed_ms = replay(site, plan)
    replayed = PricedMs(float(replayed_ms) + graph_copy_ms(site, cluster),
                        host_ms=float(getattr(replayed_ms, "host_ms", 0.0)))
    if mode == "on":
        return replayed, True
    eager_ms = eager(site, plan)
    return (replayed, True) if replayed < eager_ms else (eager_ms, False)

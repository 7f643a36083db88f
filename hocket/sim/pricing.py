"""Durations and contention factors of a StepGraph's nodes on one rank class.

Everything here is a thin mapping onto ``hocket.cost`` so that the simulator and the cost
model agree: a ``Site`` becomes ``hocket.strategies.pipeline_stages`` (the very stage list
``predict`` schedules); an expert-parallel ``MoeSite`` becomes ``hocket.strategies.moe.moe_stages_of`` (the
stage list ``predict_moe`` schedules), priced on its own EP group (the ranks of DP replica 0's group, which every
replica class shares: a mixed cluster whose replicas differ prices their MoE sites on replica 0's devices);
a ``ComputeOp`` is priced with ``hocket.cost.compute`` (GEMM wave
model, memory roofline); a ``CommOp`` with ``hocket.cost.comm`` (alpha-beta per algorithm
and topology) and ``hocket.cost.contention`` (slowdown factors).

Only the attention core has no model in ``hocket.cost``; it is priced here as
FLOPs at ``ATTENTION_EFFICIENCY`` of the dense peak (fused flash-attention kernels reach
roughly 0.5-0.75 of peak on Hopper/Ampere), bounded below by its memory traffic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from hocket.core.plan import Plan

ATTENTION_EFFICIENCY = 0.6
"""Fraction of dense peak a fused attention kernel sustains (forward and backward alike)."""


@dataclass(frozen=True, kw_only=True)
class Priced:
    """One non-Site node on one rank class: solo time, the resource it occupies, its
    contention kind and factors."""

    ms: float
    resource: str
    kind: str
    slowdown_by: Mapping[str, float]


@dataclass(frozen=True, kw_only=True)
class SitePricing:
    """The stage list of one Site under the plan actually used (and why, if not the asked one)."""

    stages: tuple
    plan: Plan
    note: str = ""


class Pricer:
    """Prices nodes for one cluster (and profile), memoising by site key / op identity.

    ``choose_plan(site) -> Plan`` gives the plan to use; when the plan does not apply to
    the site (wrong kind, transport not offered) the site falls back to the sequential
    plan and the reason is kept in ``SitePricing.note``.
    """

    def __init__(self, cluster, *, profile=None, choose_plan: Callable[[object], Plan]) -> None:
        from hocket.cost.calibration import calibration_view

        self.cluster = cluster
        self.profile = profile
        self.calibration = calibration_view(profile)
        self.choose_plan = choose_plan
        self._sites: dict[tuple, SitePricing] = {}
        self._ops: dict[tuple, Priced] = {}
        self._topologies: dict[tuple, object] = {}

    # -- sites ----------------------------------------------------------------------
    def site(self, site, ranks: tuple[int, ...]) -> SitePricing:
        """Stage list of ``site`` run by the TP group ``ranks`` (the class's representative); an MoeSite runs on
        its own EP group (``ranks`` is ignored)."""
        from hocket.core.moe import MoeSite
        from hocket.plan.space import GroupFacts, baseline_plan
        from hocket.strategies import pipeline_stages

        if isinstance(site, MoeSite):
            return self._moe_site(site)
        plan = self.choose_plan(site)  # asked with the StepGraph's own site (its key names DP replica 0)
        if ranks and tuple(site.group_ranks) != tuple(ranks):
            site = replace(site, ranks=tuple(ranks))
        key = (site.key, plan.hash)
        hit = self._sites.get(key)
        if hit is not None:
            return hit
        try:
            priced = SitePricing(stages=tuple(pipeline_stages(site, plan, self.cluster, self.profile)), plan=plan)
        except ValueError as exc:  # the plan does not apply (kind, transport): run the baseline instead
            offered = self.cluster.group_transports(site.group_ranks) if site.world > 1 else frozenset({"collective"})
            fallback = baseline_plan(GroupFacts(transports=offered), site)
            if plan == fallback:
                raise
            priced = SitePricing(stages=tuple(pipeline_stages(site, fallback, self.cluster, self.profile)),
                                 plan=fallback, note=f"{site.name or site.kind}: {exc}; ran {fallback.describe()}")
        self._sites[key] = priced
        return priced

    def _moe_site(self, site) -> SitePricing:
        """Stage list of an MoeSite under the chosen plan; a plan that does not apply to it (a strategy of the
        TP sites, a shared overlap without a shared expert) runs sequential, with the reason in the note."""
        from hocket.strategies.moe import moe_plan, moe_stages_of

        plan = moe_plan(self.choose_plan(site))
        key = (site.key, plan.hash)
        hit = self._sites.get(key)
        if hit is not None:
            return hit
        try:
            priced = SitePricing(stages=tuple(moe_stages_of(site, plan, self.cluster, self.profile)), plan=plan)
        except ValueError as exc:
            fallback = moe_plan(None)
            if plan == fallback:
                raise
            priced = SitePricing(stages=tuple(moe_stages_of(site, fallback, self.cluster, self.profile)),
                                 plan=fallback, note=f"{site.name or site.kind}: {exc}; ran {fallback.describe()}")
        self._sites[key] = priced
        return priced

    # -- compute ops ----------------------------------------------------------------
    def compute(self, op, device) -> Priced:
        from hocket.core.site import DTYPE_BYTES
        from hocket.cost.compute import achievable_tflops, gemm_ms, launch_ms, memory_ms

        key = ("compute", op, device)
        hit = self._ops.get(key)
        if hit is not None:
            return hit
        if op.kind == "gemm" and op.m and op.k and op.n:
            ms = gemm_ms(device, m=op.m, k=op.k, n=op.n, dtype=op.dtype, itemsize=DTYPE_BYTES[op.dtype],
                         calibration=self.calibration)
        elif op.kind in ("gemm", "attention"):
            flops_ms = op.flops / (achievable_tflops(device, op.dtype) * ATTENTION_EFFICIENCY * 1e9)
            ms = max(flops_ms, memory_ms(device, op.nbytes, launches=0)) + launch_ms(device)
        else:
            ms = memory_ms(device, op.nbytes)
        priced = Priced(ms=ms, resource="compute", kind="compute",
                        slowdown_by=self.compute_slowdown(device, gemm_like=op.kind != "elementwise"))
        self._ops[key] = priced
        return priced

    def compute_slowdown(self, device, *, gemm_like: bool) -> dict[str, float]:
        """Factors for compute beside the step's own transfers (NCCL collectives and P2P)."""
        from hocket.cost.comm import DEFAULT_COMM_SMS
        from hocket.cost.contention import contention

        key = ("compute_slowdown", device, gemm_like)
        hit = self._ops.get(key)
        if hit is not None:
            return hit.slowdown_by
        factor = contention("sm_collective", device, transfer_gbps=_nic_gbps(self.cluster),
                            calibration=self.calibration).gemm_slowdown
        if gemm_like and device.sm_count and device.sm_count > DEFAULT_COMM_SMS:
            factor *= device.sm_count / (device.sm_count - DEFAULT_COMM_SMS)  # SMs the collective holds
        table = {"sm_collective": max(1.0, factor)} if device.sm_count else {}
        self._ops[key] = Priced(ms=0.0, resource="compute", kind="compute", slowdown_by=table)
        return table

    # -- communication ops -------------------------------------------------------------
    def comm(self, op, ranks: tuple[int, ...], device) -> Priced:
        """A CommOp over ``ranks`` (the group, or sender then receiver for send_recv)."""
        from hocket.cost import comm as comm_model
        from hocket.cost.contention import contention

        key = ("comm", op.op, op.nbytes, op.axis, ranks)
        hit = self._ops.get(key)
        if hit is not None:
            return hit
        topo = self._topology(ranks)
        offered = self.cluster.group_transports(ranks) if len(ranks) > 1 else frozenset({"collective", "p2p"})
        if op.op == "send_recv" and "p2p" in offered:
            transfer = comm_model.ring_step(float(op.nbytes), topo, transport="p2p", calibration=self.calibration)
        elif op.op == "send_recv":
            # no peer path (e.g. GPUs of different vendors): device -> pinned host -> device, the
            # two PCIe legs pipelined; priced as a two-rank host-staged broadcast of the payload
            transfer = comm_model.collective("broadcast", 2.0 * op.nbytes, topo, transport="host_staged",
                                             calibration=self.calibration)
        else:
            transport = "collective" if "collective" in offered else "host_staged"
            transfer = comm_model.collective(op.op, float(op.nbytes), topo, transport=transport,
                                             calibration=self.calibration)
        gbps = transfer.egress_bytes / (transfer.ms * 1e6) if transfer.ms > 0 else 0.0
        slow = contention(transfer.kind, device, transfer_gbps=gbps, calibration=self.calibration).transfer_slowdown
        priced = Priced(ms=transfer.ms, resource=transfer.resource, kind=transfer.kind,
                        slowdown_by={"compute": max(1.0, slow)})
        self._ops[key] = priced
        return priced

    def _topology(self, ranks: tuple[int, ...]):
        from hocket.cost import comm as comm_model

        topo = self._topologies.get(ranks)
        if topo is None:
            topo = self._topologies[ranks] = comm_model.group_topology(self.cluster, ranks)
        return topo


def _nic_gbps(cluster) -> float:
    """The inter-node NIC rate of the first node (what DP/PP traffic streams at), or 0."""
    nic = cluster.node(0).nic
    return nic.gbps_per_direction if nic is not None else 0.0

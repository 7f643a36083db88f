"""Where the ranks of a TP x PP x DP job sit, and which of them behave identically.

``ParallelLayout`` maps (tp, dp, pp) coordinates to global ranks. The default order
``tp-dp-pp`` (TP fastest, PP slowest, as Megatron-LM places them) keeps a TP group inside
a node and gives each pipeline stage a contiguous block of nodes, so on a cluster made
of halves of different GPUs whole stages land on one device type.

``rank_classes`` is the symmetry reduction the simulator relies on: two (replica, stage)
positions behave identically when their TP groups have the same devices and the same
links, so one *replica class* (a signature: per stage, the TP group's devices and links,
and the link to the next stage) stands for every DP replica with that signature. A
homogeneous 16,384-GPU job is one replica class; the half-H100/half-A100 preset is one
too (stages differ, replicas do not); a cluster mixed inside replicas gives a few.
"""

from __future__ import annotations

from dataclasses import dataclass

ORDERS = ("tp-dp-pp", "tp-pp-dp")


@dataclass(frozen=True, kw_only=True)
class ParallelLayout:
    """Rank placement of a tp x pp x dp job (``order``: fastest-varying first)."""

    tp: int
    pp: int
    dp: int
    order: str = "tp-dp-pp"

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ParallelLayout.{name}={value!r} must be an int >= 1 (parallel degree)")
        if self.order not in ORDERS:
            raise ValueError(f"ParallelLayout.order={self.order!r} is unknown; use one of {ORDERS}")

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    def rank(self, *, tp: int, dp: int, pp: int) -> int:
        if self.order == "tp-dp-pp":
            return tp + self.tp * (dp + self.dp * pp)
        return tp + self.tp * (pp + self.pp * dp)

    def coords(self, rank: int) -> tuple[int, int, int]:
        """``(tp, dp, pp)`` coordinates of a global rank (inverse of ``rank``)."""
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.world:
            raise ValueError(f"rank={rank!r} is outside the {self.world}-rank layout")
        t, rest = rank % self.tp, rank // self.tp
        if self.order == "tp-dp-pp":
            return t, rest % self.dp, rest // self.dp
        return t, rest // self.pp, rest % self.pp

    def tp_group(self, *, dp: int, pp: int) -> tuple[int, ...]:
        return tuple(self.rank(tp=t, dp=dp, pp=pp) for t in range(self.tp))

    def dp_group(self, *, tp: int, pp: int) -> tuple[int, ...]:
        return tuple(self.rank(tp=tp, dp=d, pp=pp) for d in range(self.dp))

    def check_fits(self, cluster) -> None:
        if self.world != cluster.world_size:
            raise ValueError(
                f"tp*pp*dp = {self.tp}*{self.pp}*{self.dp} = {self.world} ranks but cluster {cluster.name!r} has "
                f"{cluster.world_size}; choose degrees whose product is the cluster size"
            )


@dataclass(frozen=True, kw_only=True)
class StagePosition:
    """One pipeline stage of a replica class: its representative TP group and devices."""

    stage: int
    tp_ranks: tuple[int, ...]
    """global ranks of the representative replica's TP group on this stage."""
    device_models: tuple[str, ...]
    slowest: object
    """DeviceSpec of the slowest member (it gates the group's collectives)."""


@dataclass(frozen=True, kw_only=True)
class ReplicaClass:
    """DP replicas that behave identically; simulated once."""

    index: int
    replicas: tuple[int, ...]
    """dp coordinates of the replicas in the class."""
    stages: tuple[StagePosition, ...]

    @property
    def count(self) -> int:
        return len(self.replicas)

    def owner(self, stage: int) -> str:
        """The simulator owner name of this class's ``stage`` (a trace process)."""
        models = "+".join(sorted(set(self.stages[stage].device_models)))
        return f"c{self.index}.stage{stage:02d} [{models} x{self.count * len(self.stages[stage].tp_ranks)}]"


def _device_speed_key(device, dtype: str) -> float:
    peak = device.peak(dtype) or max((v for v in device.peak_tflops.values() if v), default=0.0)
    return float(peak)


def _link_key(link) -> tuple:
    return (link.kind, link.gbps_per_direction, link.latency_us)


def _node_key(cluster, ranks: tuple[int, ...]) -> tuple | None:
    """A key equal for groups whose ranks sit at the same local positions of identical
    node objects (so devices and links are equal); None when the group spans nodes."""
    node = cluster.node_of(ranks[0])
    if cluster.node_of(ranks[-1]) != node:
        return None
    return (id(cluster.node(node)), tuple(cluster.local_rank(r) for r in ranks))


def _tp_facts(cluster, ranks: tuple[int, ...], dtype: str, memo: dict) -> tuple:
    """(device models, TP link signature, slowest device) of a TP group, memoised by node structure."""
    key = _node_key(cluster, ranks)
    if key is not None and key in memo:
        return memo[key]
    devices = [cluster.device(r) for r in ranks]
    models = tuple(dev.model for dev in devices)
    tp_link = (
        _link_key(cluster.bottleneck_link(ranks)) if len(ranks) > 1 else None,
        tuple(sorted(cluster.group_transports(ranks))),
    )
    facts = (models, tp_link, min(devices, key=lambda dev: _device_speed_key(dev, dtype)))
    if key is not None:
        memo[key] = facts
    return facts


def _pair_link(cluster, a: int, b: int, memo: dict) -> tuple:
    """Link signature between two ranks, memoised by the node objects and local positions."""
    na, nb = cluster.node_of(a), cluster.node_of(b)
    key = (id(cluster.node(na)), cluster.local_rank(a), id(cluster.node(nb)), cluster.local_rank(b), na == nb)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _link_key(cluster.link(a, b))
    return hit


def rank_classes(cluster, layout: ParallelLayout, *, dtype: str = "bfloat16",
                 merge: bool = True) -> tuple[ReplicaClass, ...]:
    """Group the DP replicas of ``layout`` on ``cluster`` into classes of identical behaviour
    (``merge=False``: one class per replica, for the explicit simulation)."""
    layout.check_fits(cluster)
    groups: dict[tuple, list[int]] = {}
    positions: dict[tuple, tuple[StagePosition, ...]] = {}
    tp_memo: dict = {}
    pair_memo: dict = {}
    for d in range(layout.dp):
        signature = []
        stages = []
        for s in range(layout.pp):
            ranks = layout.tp_group(dp=d, pp=s)
            models, tp_link, slowest = _tp_facts(cluster, ranks, dtype, tp_memo)
            pp_link = None
            if s + 1 < layout.pp:
                pp_link = _pair_link(cluster, ranks[0], layout.rank(tp=0, dp=d, pp=s + 1), pair_memo)
            signature.append((models, tp_link, pp_link))
            stages.append(StagePosition(stage=s, tp_ranks=ranks, device_models=models, slowest=slowest))
        sig = tuple(signature) if merge else (d,)
        groups.setdefault(sig, []).append(d)
        positions.setdefault(sig, tuple(stages))
    return tuple(ReplicaClass(index=i, replicas=tuple(reps), stages=positions[sig])
                 for i, (sig, reps) in enumerate(groups.items()))

"""The parallel-configuration space: every (tp, cp, pp, dp, micro-batch, schedule, sharding, recomputation,
device grouping) a model can run with on a cluster, and every point left out with its reason.

Rules (``ParallelSpace`` holds the knobs):

* ``tp`` is a power of two that divides the attention heads, the KV heads, the hidden and (when the model has a
  dense MLP) FFN widths, and fits in the smallest node (``tp_across_nodes=True`` lifts the last rule); a micro-batch's
  tokens on a context-parallel rank (``micro_batch * seq / cp``) must divide by ``tp`` (sequence parallelism).
* ``cp`` is a power of two dividing ``seq`` with at least ``min_cp_tokens`` tokens per rank; ``cp > 1`` is
  tried only when ``seq >= cp_from_seq`` (long sequences).
* ``pp`` divides ``world / (tp * cp)`` and is at most the layer count; ``dp = world / (tp * cp * pp)``.
* the global batch (sequences) splits into ``dp`` replicas of ``micro_batches`` micro-batches of
  ``micro_batch`` sequences (``micro_batch`` from ``micro_batch_sizes``); on a mixed cluster under the
  ``replicas`` grouping the split is uneven, decided by speed (``hocket.search.run``).
* ``schedule`` is ``1f1b`` or, when ``pp > 1``, ``interleaved`` with ``virtual`` in ``virtual_stages``
  (layers divisible by ``pp * virtual``, micro-batches a multiple of ``pp``: Megatron-LM's rules).
* ``sharding`` is ``replicated``, ``optimizer`` (ZeRO-1), ``gradients`` (ZeRO-2: optimizer states and
  gradients sharded, weights gathered once per step and kept through the backward) or ``full`` (ZeRO-3 /
  FSDP); with ``dp * cp == 1`` only ``replicated`` (``hocket.search.memory``).
* ``recompute`` is ``none``, ``selective`` or ``full``.
* ``ep`` (MoE models only; dense models run ``ep = 1``): every divisor of ``dp`` that divides the routed experts,
  up to ``max_ep`` (``ep_degrees`` restricts them); the EP group is ``ep`` ranks of one data-parallel group
  (``hocket.models.step``); under the ``replicas`` grouping only ``ep = 1`` (its replicas differ by device).
* ``grouping``: ``uniform`` on a cluster of one device type. On a mixed cluster, ``stages`` (ranks laid
  out tp, cp, dp, pp over the cluster's node order, so pipeline stages land on device-type blocks and
  take layers by speed; ``hocket.search.run`` also tries every other order of up to four node groups,
  ``Candidate.order``) and ``replicas`` (each device type's block forms its own data-parallel replicas
  of the same tp x cp x pp shape, the batch split by their speed: Metis's data balancing; needs every
  block's size to be a multiple of ``tp * cp * pp``). Under ``stages`` a TP group that straddles a block
  boundary (a node holding two device types) runs even shards, priced at its slowest device.
* ``mixed_tp`` (mixed clusters, dense models with standard attention, ``tp > 1``): every tensor-parallel group
  spans device types, its weights split unevenly by device speed (``hocket.plan.shards``, priced at the slowest
  rank: ``hocket.search.run``). The groups are formed inside each node (inside the whole cluster when
  ``tp_across_nodes=True``): a domain of ``N`` devices holding ``c_t`` devices of type ``t`` forms ``N / tp``
  groups of ``c_t * tp / N`` devices of each type (the ``j``-th group takes the ``j``-th run of each type's
  ranks), so every group has the same mix (``Candidate.tp_mix``) and every stage the same speed. Offered only
  where it can pay: every domain splits into groups of one mix of at least two device types whose compute-only
  bound (``hocket.plan.shards.compute_bound``) exceeds 1; otherwise pruned with the reason (:func:`mixed_groups`).
  Groups are laid out tp, cp, dp, pp over that rank order, as under ``stages``.

"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hocket.search.memory import RECOMPUTE, SHARDING

SCHEDULES = ("1f1b", "interleaved")
GROUPINGS = ("uniform", "stages", "replicas", "mixed_tp")


@dataclass(frozen=True, kw_only=True)
class ParallelSpace:
    """Knobs of the parallel space (module docstring)."""

    tp_across_nodes: bool = False
    micro_batch_sizes: tuple[int, ...] = (1, 2, 4)
    virtual_stages: tuple[int, ...] = (2, 4)
    schedules: tuple[str, ...] = SCHEDULES
    shardings: tuple[str, ...] = SHARDING
    recomputes: tuple[str, ...] = RECOMPUTE
    cp_degrees: tuple[int, ...] = (1, 2, 4, 8, 16)
    cp_from_seq: int = 16384
    """cp > 1 is tried only for sequences at least this long."""
    min_cp_tokens: int = 2048
    max_tp: int = 64
    max_pp: int = 128
    max_ep: int = 64
    """the largest EP degree tried by default (DeepSeek-V3 trained with 64-way EP over 8 nodes)."""
    ep_degrees: tuple[int, ...] | None = None
    """MoE models: the EP degrees tried (None: every divisor of dp dividing the experts, up to ``max_ep``)."""

    def __post_init__(self) -> None:
        for name, allowed in (("schedules", SCHEDULES), ("shardings", SHARDING), ("recomputes", RECOMPUTE)):
            bad = [v for v in getattr(self, name) if v not in allowed]
            if bad or not getattr(self, name):
                raise ValueError(f"ParallelSpace.{name}={getattr(self, name)!r}: give a non-empty subset of "
                                 f"{allowed}")
        for name in ("micro_batch_sizes", "virtual_stages", "cp_degrees") + (
                ("ep_degrees",) if self.ep_degrees is not None else ()):
            values = getattr(self, name)
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise ValueError(f"ParallelSpace.{name}={values!r} must be a non-empty tuple of ints >= 1")


@dataclass(frozen=True, kw_only=True)
class Block:
    """A run of consecutive ranks of one device model (nodes in cluster order)."""

    device: str
    first: int
    size: int


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One parallel configuration (degrees, batch, schedule, memory policy, grouping)."""

    tp: int
    cp: int
    pp: int
    dp: int
    micro_batch: int
    """sequences per micro-batch."""
    micro_batches: int
    """per replica (``uniform``/``stages``); under ``replicas`` the most any replica runs (see ``split``)."""
    schedule: str = "1f1b"
    virtual: int = 1
    sharding: str = "replicated"
    recompute: str = "none"
    grouping: str = "uniform"
    split: tuple[tuple[int, int], ...] = ()
    """``replicas`` grouping: (replicas, micro-batches each) per device block, in block order."""
    order: tuple[str, ...] = ()
    """``stages`` grouping on a mixed cluster: the device models of its node groups in the order the stages
    take them (``()``: the cluster file's order)."""
    ep: int = 1
    """expert-parallel degree (MoE models; divides ``dp``)."""
    tp_mix: tuple[tuple[str, int], ...] = ()
    """``mixed_tp`` grouping: (device model, devices) of every tensor-parallel group, in the group's rank order."""

    def label(self) -> str:
        sched = "1F1B" if self.schedule == "1f1b" else f"i1F1B/v{self.virtual}"
        split = ""
        if self.split:
            split = " split " + "+".join(f"{r}x{m}" for r, m in self.split)
        order = f" [{'>'.join(m.split()[0] for m in self.order)}]" if self.order else ""
        ep = f" ep{self.ep}" if self.ep != 1 else ""
        mix = f"[{'+'.join(f'{n}x{m.split()[0]}' for m, n in self.tp_mix)}]" if self.tp_mix else ""
        return (f"tp{self.tp} cp{self.cp} pp{self.pp} dp{self.dp}{ep} mbs{self.micro_batch} m{self.micro_batches} "
                f"{sched} {self.sharding} rc:{self.recompute} {self.grouping}{mix}{order}{split}")

    def to_dict(self) -> dict:
        return {k: (list(map(list, v)) if k in ("split", "tp_mix") else list(v) if k == "order" else v) for k, v in
                ((k, getattr(self, k)) for k in self.__dataclass_fields__)}


@dataclass(kw_only=True)
class Space:
    """The enumerated candidates and the pruned points, counted by reason (with one example each)."""

    candidates: list[Candidate] = field(default_factory=list)
    pruned: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def prune(self, reason: str, what: str, count: int = 1) -> None:
        self.pruned[reason] += count
        self.examples.setdefault(reason, what)

    @property
    def pruned_total(self) -> int:
        return sum(self.pruned.values())


def device_blocks(cluster) -> list[Block]:
    """The cluster's ranks as runs of one device model, in node order."""
    blocks: list[Block] = []
    rank = 0
    for group in cluster.groups:
        per_node = [island.device.model for island in group.node.islands for _ in range(island.count)]
        for _ in range(group.count):
            for model in per_node:
                if blocks and blocks[-1].device == model and blocks[-1].first + blocks[-1].size == rank:
                    last = blocks[-1]
                    blocks[-1] = Block(device=model, first=last.first, size=last.size + 1)
                else:
                    blocks.append(Block(device=model, first=rank, size=1))
                rank += 1
    return blocks


@dataclass(frozen=True, kw_only=True)
class MixedGroups:
    """The ``mixed_tp`` rank order: its consecutive runs of ``tp`` ranks are the tensor-parallel groups, every
    one holding ``mix`` (device model, devices) in that order."""

    tp: int
    order: tuple[int, ...]
    mix: tuple[tuple[str, int], ...]

    def group(self, index: int) -> tuple[int, ...]:
        """The ranks of TP group ``index`` (groups laid out tp, cp, dp, pp over ``order``)."""
        return self.order[index * self.tp:(index + 1) * self.tp]

    @property
    def label(self) -> str:
        return "mixed_tp[" + "+".join(f"{n}x{m}" for m, n in self.mix) + "]"


def mixed_groups(cluster, tp: int, *, across_nodes: bool = False, dtype: str = "bfloat16") -> MixedGroups | str:
    """The ``mixed_tp`` groups of ``tp`` ranks (module docstring), or why the cluster has none: groups form inside
    each node (the whole cluster when ``across_nodes``); every domain must split into groups of one mix of at
    least two device types whose compute-only bound exceeds 1."""
    from hocket.cost.compute import achievable_tflops
    from hocket.plan.shards import compute_bound

    if tp < 2:
        return "mixed_tp needs tp > 1 (a group of one rank mixes nothing)"
    if across_nodes:
        domains = [(list(range(cluster.world_size)), "the cluster")]
    else:
        for g_i, group in enumerate(cluster.groups):  # nodes of one group are alike: check each group once
            if len({island.device.model for island in group.node.islands}) < 2:
                return (f"mixed_tp: node group {g_i} ({group.node.name}) holds one device type (tp stays within a "
                        f"node; ParallelSpace(tp_across_nodes=True) lets groups span nodes)")
        domains, rank = [], 0
        for n in range(cluster.num_nodes):
            size = cluster.ranks_per_node(n)
            domains.append((list(range(rank, rank + size)), f"node {n}"))
            rank += size
    order: list[int] = []
    mix = None
    for ranks, where in domains:
        by_type: dict[str, list[int]] = {}
        for r in ranks:
            by_type.setdefault(cluster.device(r).model, []).append(r)
        counts = {m: len(v) for m, v in by_type.items()}
        if len(by_type) < 2:
            return f"mixed_tp: {where} holds one device type"
        size = len(ranks)
        if size % tp or any(c * tp % size for c in counts.values()):
            return f"mixed_tp: tp={tp} does not split {where}'s devices {counts} into groups of one mix"
        here = tuple((m, c * tp // size) for m, c in counts.items())
        if mix is None:
            mix = here
        elif here != mix:
            return f"mixed_tp: {where} forms groups {here}, another domain {mix} (every group needs one mix)"
        for j in range(size // tp):
            for m, per in here:
                order.extend(by_type[m][j * per:(j + 1) * per])
    rates = [achievable_tflops(cluster.device(r), dtype) for r in order[:tp]]
    if compute_bound(rates) <= 1.0 + 1e-9:
        return "mixed_tp: the group's device types are equally fast (uneven shards cannot gain)"
    return MixedGroups(tp=tp, order=tuple(order), mix=mix)


def mixed_tp_model_reason(model) -> str | None:
    """Why ``model``'s TP weights are not sized unevenly under ``mixed_tp`` (None: they are)."""
    if model.is_moe:
        return "mixed_tp: MoE layers are not sized unevenly (dense models only)"
    if model.is_mla:
        return "mixed_tp: MLA attention is not sized unevenly (its down-projections are replicated over tp)"
    return None


def _powers_of_two(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def tp_reason(model, tp: int) -> str | None:
    """Why ``tp`` cannot split the model evenly, or None (``ModelSpec.tp_split_sizes``)."""
    for what, size in model.tp_split_sizes():
        if size % tp:
            return f"tp={tp} does not divide {what}={size}"
    return None


def ep_degrees(model, dp: int, space: ParallelSpace, out: Space, where: str) -> list[int]:
    """The EP degrees of ``dp`` data-parallel ranks (module docstring); pruned ones counted with their reason."""
    if not model.is_moe:
        return [1]
    wanted = space.ep_degrees or tuple(d for d in range(1, min(dp, space.max_ep) + 1) if dp % d == 0)
    keep = []
    for ep in wanted:
        if dp % ep:
            out.prune("ep does not divide dp", f"{where} ep{ep}")
        elif model.num_experts % ep:
            out.prune(f"ep does not divide num_experts={model.num_experts}", f"{where} ep{ep}")
        else:
            keep.append(ep)
    return keep


def enumerate_space(model, cluster, *, seq: int, global_batch: int, space: ParallelSpace | None = None) -> Space:
    """Every candidate of the space (module docstring) and the pruned points with their reasons."""
    space = space or ParallelSpace()
    out = Space()
    world = cluster.world_size
    layers = model.num_hidden_layers
    blocks = device_blocks(cluster)
    mixed = len({b.device for b in blocks}) > 1
    groupings = ("stages", "replicas", "mixed_tp") if mixed else ("uniform",)
    model_reason = mixed_tp_model_reason(model) if mixed else None
    node_size = min(cluster.ranks_per_node(n) for n in range(cluster.num_nodes))
    for tp in _powers_of_two(min(space.max_tp, world)):
        reason = tp_reason(model, tp)
        if reason is None and tp > node_size and not space.tp_across_nodes:
            reason = f"tp={tp} exceeds the {node_size} devices of a node (tp stays within a node)"
        if reason:
            out.prune(reason, f"tp{tp}")
            continue
        mix = None
        if mixed:
            mix = model_reason or mixed_groups(cluster, tp, across_nodes=space.tp_across_nodes)
        for cp in space.cp_degrees:
            if cp > 1 and seq < space.cp_from_seq:
                out.prune(f"cp>1 only for seq >= {space.cp_from_seq}", f"tp{tp} cp{cp}")
                continue
            if cp > 1 and (seq % cp or seq // cp < space.min_cp_tokens):
                out.prune(f"cp must divide seq={seq} leaving >= {space.min_cp_tokens} tokens per rank",
                          f"tp{tp} cp{cp}")
                continue
            if world % (tp * cp):
                out.prune(f"tp*cp does not divide the {world} devices", f"tp{tp} cp{cp}")
                continue
            rest = world // (tp * cp)
            for pp in range(1, min(rest, space.max_pp) + 1):
                if rest % pp:
                    continue
                if pp > layers:
                    out.prune(f"pp > num_hidden_layers={layers} (a stage needs a layer)", f"tp{tp} cp{cp} pp{pp}")
                    continue
                dp = rest // pp
                for ep in ep_degrees(model, dp, space, out, f"tp{tp} cp{cp} pp{pp} dp{dp}"):
                    for grouping in groupings:
                        _expand(out, space, model, blocks, tp=tp, cp=cp, pp=pp, dp=dp, grouping=grouping,
                                global_batch=global_batch, seq=seq, ep=ep, mix=mix)
    return out


def _expand(out: Space, space: ParallelSpace, model, blocks: list[Block], *, tp: int, cp: int, pp: int, dp: int,
            grouping: str, global_batch: int, seq: int, ep: int = 1, mix: MixedGroups | str | None = None) -> None:
    layers = model.num_hidden_layers
    where = f"tp{tp} cp{cp} pp{pp} dp{dp}" + (f" ep{ep}" if ep != 1 else "") + f" {grouping}"
    tp_mix: tuple[tuple[str, int], ...] = ()
    if grouping == "mixed_tp":
        if not isinstance(mix, MixedGroups):
            out.prune(mix or "mixed_tp: not a mixed cluster", where)
            return
        tp_mix = mix.mix
    if grouping == "replicas" and ep > 1:
        out.prune("ep > 1 under the replicas grouping (EP groups would span device blocks)", where)
        return
    if grouping == "replicas":
        shape = tp * cp * pp
        if any(b.size % shape for b in blocks):
            out.prune("a device block is not a multiple of tp*cp*pp (replicas grouping)", where)
            return
    shardings = space.shardings if dp * cp > 1 else ("replicated",)
    schedules = [("1f1b", 1)]
    if pp > 1 and "interleaved" in space.schedules:
        schedules += [("interleaved", v) for v in space.virtual_stages]
    if "1f1b" not in space.schedules:
        schedules = schedules[1:]
    per_point = len(shardings) * len(space.recomputes)
    for mbs in space.micro_batch_sizes:
        if mbs * seq // cp % tp:
            out.prune("micro-batch tokens per cp rank not divisible by tp (sequence parallelism)", f"{where} mbs{mbs}",
                      len(schedules) * per_point)
            continue
        if global_batch % (dp * mbs):
            if grouping != "replicas" or global_batch % mbs or global_batch // mbs < dp:
                out.prune("global batch not divisible by dp * micro_batch", f"{where} mbs{mbs}",
                          len(schedules) * per_point)
                continue
        total_mb = global_batch // mbs
        micro = total_mb // dp if grouping != "replicas" else max(1, total_mb // dp)
        for sched, v in schedules:
            if sched == "interleaved":
                if layers % (pp * v):
                    out.prune("interleaved: layers not divisible by pp * virtual", f"{where} v{v}", per_point)
                    continue
                if grouping != "replicas" and micro % pp:
                    out.prune("interleaved: micro-batches not a multiple of pp", f"{where} mbs{mbs} v{v}",
                              per_point)
                    continue
            for sharding in shardings:
                for recompute in space.recomputes:
                    out.candidates.append(Candidate(tp=tp, cp=cp, pp=pp, dp=dp, micro_batch=mbs,
                                                    micro_batches=micro, schedule=sched, virtual=v,
                                                    sharding=sharding, recompute=recompute, grouping=grouping,
                                                    ep=ep, tp_mix=tp_mix))

"""``mixed_tp``: tensor-parallel groups over device types with uneven shards, as the parallel search prices them.

:class:`MixedTpCosts` is the part of the search's per-cluster memo (``hocket.search.run._Costs``) that serves
``mixed_tp`` candidates: the groups' label and slowest device, the uneven split of each block
(``hocket.plan.shards.recommend_block_shards`` in the units of :func:`hocket.plan.shards.block_units`) and the cost
table of one group, each site at its slowest rank (the module docstring of ``hocket.search.run`` has the rules).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hocket.core.site import Site
from hocket.models.graph import ComputeOp
from hocket.search.space import Candidate, MixedGroups, mixed_groups
from hocket.search.table import Table


class MixedTpCosts:
    """The ``mixed_tp`` methods of the search's cost memo (it provides ``cluster``, ``model``, ``seq``, ``dtype``,
    ``profile``, ``tp_across_nodes``, ``mixes``, ``devices``, ``shard_memo``, ``pricer`` and ``plan``)."""

    def mixed(self, cand: Candidate) -> str:
        """The stage label of a ``mixed_tp`` candidate's groups (registered on first use)."""
        groups = mixed_groups(self.cluster, cand.tp, across_nodes=self.tp_across_nodes, dtype=self.dtype)
        if not isinstance(groups, MixedGroups):
            raise ValueError(f"{cand.label()}: {groups}")
        if cand.tp_mix and cand.tp_mix != groups.mix:
            raise ValueError(f"Candidate.tp_mix={[list(x) for x in cand.tp_mix]} but tp={cand.tp} groups on "
                             f"{self.cluster.name} hold {[list(x) for x in groups.mix]}; give that mix or leave it ()")
        label = groups.label
        if label not in self.mixes:
            self.mixes[label] = groups
            self.devices[label] = min((self.cluster.device(r) for r in groups.group(0)),
                                      key=lambda d: speed(d, self.dtype))
        return label

    def _small_graph(self, tp: int, cp: int, mbs: int, recompute: str):
        from hocket.models.step import model_step_sites

        small = replace(self.model, num_hidden_layers=2)
        return model_step_sites(small, tp=tp, pp=2, dp=1, cp=cp, seq=self.seq, batch=mbs, micro_batches=1,
                                dtype=self.dtype, stages=[1, 1], recompute=recompute)

    def mixed_shards(self, label: str, cp: int, mbs: int) -> Shards:
        """The uneven split of the first group of ``label`` per block (:func:`hocket.plan.shards.block_units`), sized by
        ``hocket.plan.shards.recommend_block_shards`` over the block's forward sites and input gradients (every
        group of one mix gets the same split)."""
        key = (label, cp, mbs)
        hit = self.shard_memo.get(key)
        if hit is not None:
            return hit
        from hocket.plan.shards import block_units, recommend_block_shards

        groups = self.mixes[label]
        ranks = groups.group(0)
        graph = self._small_graph(groups.tp, cp, mbs, "none")
        sites: dict[str, Site] = {}
        for stage in graph.stages:
            for node in stage.nodes:
                if isinstance(node.op, Site) and node.op.name not in sites:
                    sites[node.op.name] = replace(node.op, ranks=ranks, count=1)
        recs, where, shares = {}, {}, {}
        for block, units in block_units(self.model).items():
            names = [n for n in units if n in sites]
            multiple = [units[n] for n in names] if block != "head" else None
            block_sites = tuple(sites[n] for n in names)
            rec = recs[block] = recommend_block_shards(block_sites, self.cluster, self.profile, multiple=multiple,
                                                       plans=self._block_plans(block_sites))
            shares[block] = tuple(u * groups.tp / sum(rec.units) for u in rec.units)
            for j, n in enumerate(names):
                where[n] = (block, j)
        hit = self.shard_memo[key] = Shards(ranks=ranks, recs=recs, where=where, shares=shares,
                                             devices=tuple(self.cluster.device(r) for r in ranks))
        return hit

    def _block_plans(self, sites) -> tuple:
        """The plans a block is sized under: the plan the search chose for each of its even sites (``SITE_SPACE``,
        shared with every other table) that prices every site kind of the block, and sequential."""
        from hocket.core.plan import Plan
        from hocket.strategies.registry import REGISTRY

        kinds = {site.kind for site in sites}
        chosen = [self.plan(site).chosen for site in sites]
        plans = [p for p in chosen if kinds <= set(REGISTRY.spec(p.strategy).priced)]
        return tuple(dict.fromkeys(plans + [Plan()]))

    def _mixed_table(self, label: str, cp: int, mbs: int, recompute: str) -> Table:
        """The cost table of one ``mixed_tp`` group (module docstring)."""
        groups = self.mixes[label]
        shards = self.mixed_shards(label, cp, mbs)
        graph = self._small_graph(groups.tp, cp, mbs, recompute)
        cp_ranks = tuple(groups.group(c)[0] for c in range(cp))
        slowest = self.devices[label]
        kinds = list(dict.fromkeys(shards.devices))
        sums = {k: 0.0 for k in ("layer_f", "layer_b", "embed_f", "embed_b", "head_f", "head_b", "layer_exposed",
                                 "edge_exposed")}
        act_bytes = 0
        for stage in graph.stages:
            for node in stage.nodes:
                op = node.op
                exposed = 0.0
                if isinstance(op, Site):
                    block, j = shards.where[op.name]
                    times = shards.recs[block].ranks[j]
                    ms = max(t.total_ms for t in times)
                    exposed = max(0.0, ms - max(t.compute_ms for t in times))
                elif isinstance(op, ComputeOp):
                    block = _FOLLOWS.get(op.name)
                    if block is None:  # even over the group (sequence-parallel rows): its slowest device
                        ms = max(self.pricer.compute(op, d).ms for d in kinds)
                    else:
                        ms = max(self.pricer.compute(scaled(op, f), d).ms if f > 0 else 0.0
                                 for f, d in zip(shards.shares[block], shards.devices))
                elif op.axis == "pp":
                    act_bytes = op.nbytes
                    continue
                else:
                    ranks = shards.ranks if op.axis == "tp" else cp_ranks
                    ms = self.pricer.comm(op, ranks, slowest).ms if len(ranks) > 1 else 0.0
                    exposed = ms
                phase = "f" if node.phase == "forward" else "b"
                if node.layer is not None:
                    if node.layer == 1:  # layer 0 stands for every layer
                        continue
                    sums[f"layer_{phase}"] += ms
                    sums["layer_exposed"] += exposed
                else:
                    where = "embed" if stage.index == 0 else "head"
                    sums[f"{where}_{phase}"] += ms
                    sums["edge_exposed"] += exposed
        return Table(act_bytes=act_bytes, dense_f=sums["layer_f"], dense_b=sums["layer_b"],
                     dense_exposed=sums["layer_exposed"], **sums)


MIXED_BLOCKS = ("attn", "mlp", "head")
_FOLLOWS = {"attn.core": "attn", "attn.core.grad": "attn", "attn.qkv.grad_weight": "attn",
            "attn.out.grad_weight": "attn", "mlp.act": "mlp", "mlp.act.grad": "mlp", "mlp.up.grad_weight": "mlp",
            "mlp.down.grad_weight": "mlp", "lm_head.grad_weight": "head", "head.cross_entropy": "head",
            "head.cross_entropy.grad": "head"}
"""compute whose work follows a block's split (its heads, FFN columns or vocabulary columns); the rest of a layer
(norms, residuals, the embedding) works on even sequence-parallel rows."""
_SPLIT_N = ("attn.qkv.grad_weight", "mlp.up.grad_weight", "lm_head.grad_weight")
"""weight gradients of column-split weights: their GEMM's n follows the split (the others' m: the row split)."""


def scaled(op: ComputeOp, share: float) -> ComputeOp:
    """``op`` on a rank holding ``share`` times the even share of its block."""
    if share == 1.0:
        return op
    dims = {}
    if op.kind == "gemm" and op.m and op.n:
        dim = "n" if op.name in _SPLIT_N else "m"
        dims[dim] = max(1, round(getattr(op, dim) * share))
    return replace(op, flops=op.flops * share, nbytes=op.nbytes * share, **dims)


@dataclass(kw_only=True)
class Shards:
    """One ``mixed_tp`` group's uneven split: the recommendation per block, where each site sits in it, and each
    group rank's share of each block (1 = even; a group's shares add up to tp)."""

    ranks: tuple[int, ...]
    recs: dict
    where: dict[str, tuple[str, int]]
    shares: dict[str, tuple[float, ...]]
    devices: tuple

    def rank_shares(self, index: int) -> tuple[float, float, float]:
        """(attention, MLP, LM head) shares of group rank ``index`` (``hocket.search.memory``)."""
        return tuple(self.shares[b][index] for b in MIXED_BLOCKS)

    def by_device(self) -> dict[str, tuple[int, tuple[float, float, float]]]:
        """Per device model, in group order: the group rank of that model holding the most MLP columns, and the
        largest shares any rank of that model holds (what its memory and gradient sync are priced at)."""
        out: dict[str, tuple[int, tuple[float, float, float]]] = {}
        for i, d in enumerate(self.devices):
            sh = self.rank_shares(i)
            if d.model not in out:
                out[d.model] = (i, sh)
                continue
            index, most = out[d.model]
            out[d.model] = (i if sh[1] > most[1] else index, tuple(max(a, b) for a, b in zip(sh, most)))
        return out

    def to_dict(self) -> dict:
        return {b: {"ranks": list(self.ranks), "devices": [d.model for d in self.devices],
                    "sites": [x.name for x in rec.sites], "sizes": [list(rec.sizes(j)) for j in range(len(rec.sites))],
                    "gain": rec.gain} for b, rec in self.recs.items()}


def share_text(shares: tuple[float, float, float]) -> str:
    return ", ".join(f"{b} {x:.2f}x" for b, x in zip(MIXED_BLOCKS, shares)) + " of the even share"


def speed(device, dtype: str) -> float:
    from hocket.cost.compute import achievable_tflops

    return achievable_tflops(device, dtype)

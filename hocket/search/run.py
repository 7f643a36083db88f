"""``search_parallel``: price every candidate of the parallel space analytically, re-rank the best few with
the event simulator, and report the ranking, the winner's launch settings and a plan JSON.

**Cost tables.** For each (device model, tp, cp, micro-batch, recompute, ep) the step graph of a two-layer,
two-stage copy of the model (``hocket.models.step.model_step_sites``, ``dp = ep``) is priced once: its layer
nodes give one layer's forward and backward ms (an MoE model with dense layers: layer 0 dense, layer 1 MoE; each
stage's time counts its dense and MoE layers), stage 0's other nodes the embedding, stage 1's the LM head and
loss. An expert-parallel ``MoeSite`` costs its chosen plan's predicted ms (``hocket.plan.moe.search_moe``, once per
``MoeSite.key``, its EP group placed on the device model's first ranks); its exposed part is that minus the
chosen plan's compute stages (``hocket.strategies.moe.predict_moe``).
A ``Site`` costs its chosen overlap plan's predicted ms (``hocket.plan.search.search_sites`` with
``SITE_SPACE``; each distinct ``Site.key`` is searched once for the whole search, TP groups placed on
the device model's first ranks); a ``ComputeOp`` or TP/CP ``CommOp`` is priced by ``hocket.sim.pricing``
as the simulator prices it. Exposed communication is a site's chosen ms minus its GEMMs alone, plus every
non-overlapped collective.

**Analytic step** (no simulator), with ``F_s``/``B_s`` a stage's forward/backward ms of one micro-batch
(``L_s`` layers, embedding on stage 0, head on the last), ``slot = max_s (F_s + B_s)``:

    step = m * slot + (pp - 1) / v * slot + 2 (pp - 1) * send + dp_sync + optimizer

``(pp - 1) / v`` is the 1F1B bubble (``v`` virtual stages under interleaving); ``send`` the slowest
stage-boundary activation transfer; ``dp_sync`` the worst stage's exposed gradient sync: the all-reduce of
fp32 gradients (replicated) or their reduce-scatter overlapped with the last micro-batch's backward
``B_s``, and the all-gather of the updated bf16 weights with the next step's first forward ``F_s``
(Megatron-LM's ``--overlap-grad-reduce`` / ``--overlap-param-gather``): ``max(0, rs - B_s) + max(0, ag -
F_s)``; under ``full`` sharding every micro-batch also gathers the stage's weights twice and reduce-scatters
its gradients, and the part of that which exceeds ``F_s + B_s`` is added to the slot. Under ``gradients``
sharding (``hocket.search.memory``) the weights are gathered once per step (the ``ag`` above, with the first
forward) and kept through the last backward, and every micro-batch reduce-scatters its fp32 gradients (``rs``,
4 bytes per stage parameter) into the sharded accumulator: the part of each ``rs`` beyond ``F_s + B_s`` is added
to the slot (as under ``full``), and the last micro-batch's ``rs``, which only its own backward hides, is the
``max(0, rs - B_s)`` above with ``B_s`` including that slot share. So a step carries ``1`` all-gather and ``m``
reduce-scatters per stage under ``gradients``, ``1`` and ``1`` under ``optimizer``, ``2 m`` and ``m`` under
``full``. ``optimizer``: 30 bytes per local optimizer parameter at the
device's memory bandwidth (fp32 master, m, v read and written, fp32 gradient read, bf16 weight written).
Under ``replicas`` grouping each device block runs ``m_b`` micro-batches per replica, chosen greedily
(one micro-batch per replica of a block at a time, to the block that then finishes first) so that
``sum_b replicas_b * m_b = global_batch / micro_batch``; the step is the slowest block's plus the sync.

**Re-rank.** The best ``rerank`` feasible candidates are simulated (``hocket.sim.simulate_step`` of the
full step graph with the same site plans, interleaved candidates on ``pp * v`` virtual stages); the part of
the gradient sync the overlap above hides is taken off (the simulator runs it after the last backward; under
``full`` sharding, which has no step-end sync, all of it), and the optimizer step and the ``gradients`` /
``full`` sharding per-micro-batch exposure are added. Under ``replicas``
grouping every block is simulated on its own sub-cluster and the cross-block sync added analytically.

**Mixed tensor-parallel groups** (``mixed_tp``, ``hocket.search.space.mixed_groups``). The first group's
blocks that share one split (the attention's ``attn.qkv``/``attn.out`` and their input gradients in whole GQA
groups, the MLP's ``mlp.up``/``mlp.down`` and theirs in 64 FFN columns, the LM head and its input gradient:
:func:`hocket.plan.shards.block_units`) are sized by ``hocket.plan.shards.recommend_block_shards`` once per (group mix, cp,
micro-batch), under the plans the search chose for the block's even sites (``SITE_SPACE``) and sequential; every
group of the mix takes that split. In its cost table a TP site costs its slowest rank's time
at those sizes (each rank priced on its own device over the group's links, ``hocket.plan.shards.RankPricer``),
its exposed part that minus the slowest rank's compute; compute that follows a block's split (the attention core
by heads, the MLP activation, the weight gradients, the loss over the vocabulary) its slowest rank at that
rank's share; the rest (sequence-parallel norms and residuals, the embedding) and the TP/CP collectives the
group's slowest device. Memory is checked per device model of the group at the largest shares its ranks hold
(``hocket.search.memory``), the gradient sync and optimizer step priced for each device model's rank over its
own DP group and the worst taken. The simulator runs even TP shards only, so ``mixed_tp`` candidates keep their
analytic figure in the re-rank (the notes say so).

**Device orders.** On a mixed cluster of up to ``MAX_ORDERED_GROUPS`` node groups every ``stages``-grouping
candidate is also priced with the node groups in each other order (``Candidate.order``), sharing the cost
tables and site plans (they depend on a device's own node only).

**MFU** uses the model FLOPs per token of PaLM (Chowdhery et al. 2022, appendix B):
``6 N + 12 L q S`` with ``N`` the parameters less the input embedding, ``L`` layers, ``q`` the query width
(heads x head size) and ``S`` the sequence; MFU = tokens/s x FLOPs per token / the devices' dense bf16 peak.
For an MoE model ``N`` counts the parameters a token passes through (``ModelSpec.active_params``: top-k routed
experts, shared experts, router); for MLA ``q`` is ``heads x (query/key + value head widths) / 2``.

**Expert parallelism** (MoE models): a candidate's ``ep`` prices its MoE layers' all-to-all sites; expert
weights sync their gradients over the ranks holding the same experts, approximated by every ``ep``-th rank of
the stage's data-parallel group (the tensor-parallel peers that hold them too are left out of that group).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from hocket.core.moe import MoeSite
from hocket.core.site import Site
from hocket.models.graph import CommOp, ComputeOp
from hocket.plan.space import SpaceConfig
from hocket.search.memory import EVEN, GIB, Memory, stage_memory, stage_param_split, stage_params
from hocket.search.mixed_tp import MixedTpCosts, Shards, share_text, speed
from hocket.search.space import Candidate, MixedGroups, ParallelSpace, Space, device_blocks, enumerate_space
from hocket.search.table import Table

SITE_SPACE = SpaceConfig(comm_sms_options=(None,), split_patterns=(), max_chunks=16)
"""The per-site plan space the parallel search uses: default SM budget only, even pieces, up to 16 (about
3x faster than the full space; on Llama-3-70B's sites on h100x8 it picks the same plans)."""
OPTIMIZER_BYTES_PER_PARAM = 30
DEFAULT_TOKENS_PER_BATCH = 1 << 22
"""default global batch: 4M tokens (Llama 2's), rounded down to whole sequences."""


class SearchError(ValueError):
    """The search found nothing it can run; the message says why."""


def flops_per_token(model, seq: int) -> float:
    """PaLM's model FLOPs per token: ``6 N + 12 L q S`` (module docstring)."""
    n = model.active_params() - model.vocab_size * model.hidden_size
    width = model.num_attention_heads * (model.head_size + model.v_head_size) / 2
    return 6.0 * n + 12.0 * model.num_hidden_layers * width * seq


@dataclass(kw_only=True)
class Priced:
    candidate: Candidate
    stages: tuple[int, ...]
    step_ms: float
    bubble_ms: float
    exposed_ms: float
    dp_ms: float
    dp_exposed_ms: float
    memory: list[Memory]
    tokens_per_s: float
    mfu: float
    simulated_ms: float | None = None
    shards: dict | None = None
    """``mixed_tp``: per block (``attn``, ``mlp``, ``head``) the first TP group's sizes and devices."""

    @property
    def best_ms(self) -> float:
        return self.simulated_ms if self.simulated_ms is not None else self.step_ms


@dataclass(kw_only=True)
class SearchOutcome:
    """The ranking (best first), the pruned points and the counters the report prints."""

    model: object
    cluster: object
    seq: int
    global_batch: int
    ranked: list[Priced]
    space: Space
    memory_pruned: dict = field(default_factory=dict)
    memory_examples: dict = field(default_factory=dict)
    distinct_sites: int = 0
    evaluated: int = 0
    """candidates evaluated: the space's, plus its ``stages``-grouping ones once per other device-block order."""
    clusters: dict = field(default_factory=dict)
    """device-block order (``Candidate.order``) -> the cluster with its nodes in that order."""
    tables: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def winner(self) -> Priced:
        return self.ranked[0]


class _Costs(MixedTpCosts):
    """Per-cluster memo of site plans, tables and collectives shared by every candidate."""

    def __init__(self, model, cluster, *, seq: int, dtype: str, profile, site_space: SpaceConfig) -> None:
        from hocket.core.plan import Plan
        from hocket.sim.pricing import Pricer

        self.model, self.cluster, self.seq, self.dtype, self.profile = model, cluster, seq, dtype, profile
        self.site_space = site_space
        self.pricer = Pricer(cluster, profile=profile, choose_plan=lambda site: Plan())
        self.results: dict[str, object] = {}
        self.by_signature: dict[tuple, object] = {}
        self.tables: dict[tuple, Table] = {}
        self.blocks = device_blocks(cluster)
        self.first_rank = {}
        for b in self.blocks:
            self.first_rank.setdefault(b.device, b)
        self.devices = {b.device: cluster.device(b.first) for b in self.blocks}
        self.comm_memo: dict[tuple, float] = {}
        self.moe_compute: dict[str, float] = {}
        self.tp_across_nodes = False  # mixed_tp groups span nodes (ParallelSpace.tp_across_nodes)
        self.mixes: dict[str, MixedGroups] = {}
        self.shard_memo: dict[tuple, Shards] = {}

    def plan(self, site):
        """The site's search result: searched once per ``Site.key``, and once per group signature (equal
        shapes on structurally equal groups, ``hocket.plan.search.group_signature``); an MoeSite once per
        ``MoeSite.key`` (``hocket.plan.moe.search_moe``)."""
        from hocket.plan.search import group_signature, search_sites

        if isinstance(site, MoeSite):
            hit = self.results.get(site.key)
            if hit is None:
                from hocket.plan.moe import search_moe

                hit = self.results[site.key] = search_moe(site, self.cluster, profile=self.profile)
                self.by_signature[("moe", site.key)] = hit
            return hit
        hit = self.results.get(site.key)
        if hit is None:
            signature = group_signature(site, self.cluster)
            found = self.by_signature.get(signature)
            if found is None:
                found = self.by_signature[signature] = search_sites(
                    [site], self.cluster, profile=self.profile, space_config=self.site_space)[site.key]
            hit = self.results[site.key] = found
        return hit

    def comm_ms(self, op: str, nbytes: float, ranks: tuple[int, ...], axis: str = "dp") -> float:
        if len(ranks) < 2 or nbytes <= 0:
            return 0.0
        key = (op, int(nbytes), ranks)
        hit = self.comm_memo.get(key)
        if hit is None:
            comm = CommOp(name=f"search.{op}", op=op, nbytes=int(nbytes), axis=axis, ranks=ranks, dtype=self.dtype)
            hit = self.comm_memo[key] = self.pricer.comm(comm, ranks, self.cluster.device(ranks[0])).ms
        return hit

    def moe_exposed_ms(self, site: MoeSite) -> float:
        """The chosen plan's time of ``site`` beyond its compute stages (its exposed all-to-all)."""
        hit = self.moe_compute.get(site.key)
        if hit is None:
            from hocket.strategies.moe import predict_moe

            result = self.plan(site)
            pred = predict_moe(site, result.chosen, self.cluster, self.profile)
            hit = self.moe_compute[site.key] = max(0.0, result.chosen_ms - pred.compute_ms)
        return hit

    def table(self, device: str, tp: int, cp: int, mbs: int, recompute: str, ep: int = 1) -> Table:
        key = (device, tp, cp, mbs, recompute, ep)
        hit = self.tables.get(key)
        if hit is not None:
            return hit
        if device in self.mixes:
            table = self.tables[key] = self._mixed_table(device, cp, mbs, recompute)
            return table
        from hocket.models.step import model_step_sites

        model = self.model
        dense_first = model.is_moe and model.dense_layers > 0  # layer 0 dense, layer 1 MoE
        small = replace(model, num_hidden_layers=2, first_k_dense_replace=1 if dense_first else 0)
        graph = model_step_sites(small, tp=tp, pp=2, dp=ep, cp=cp, seq=self.seq, batch=mbs, micro_batches=1,
                                 dtype=self.dtype, stages=[1, 1], recompute=recompute, ep=ep)
        block = self.first_rank[device]
        r0 = block.first
        tp_ranks = tuple(range(r0, r0 + tp))
        cp_ranks = tuple(r0 + tp * c for c in range(cp)) if block.size >= tp * cp else tuple(
            tp * c for c in range(cp))
        dev = self.devices[device]
        ep_ranks = tuple(r0 + tp * cp * d for d in range(ep)) if block.size >= tp * cp * ep else ()
        sums = {k: 0.0 for k in ("layer_f", "layer_b", "embed_f", "embed_b", "head_f", "head_b", "layer_exposed",
                                 "edge_exposed", "dense_f", "dense_b", "dense_exposed")}
        act_bytes = 0
        for stage in graph.stages:
            for node in stage.nodes:
                op = node.op
                exposed = 0.0
                if isinstance(op, MoeSite):
                    site = replace(op, ranks=ep_ranks or op.ranks, count=1)
                    ms = self.plan(site).chosen_ms
                    exposed = self.moe_exposed_ms(site)
                elif isinstance(op, Site):
                    site = replace(op, ranks=tp_ranks if tp > 1 else (r0,), count=1)
                    ms = self.plan(site).chosen_ms if tp > 1 else self._gemm_ms(site, dev)
                    if tp > 1:
                        exposed = max(0.0, ms - self._gemm_ms(site, dev))
                elif isinstance(op, ComputeOp):
                    ms = self.pricer.compute(op, dev).ms
                elif op.axis == "pp":
                    act_bytes = op.nbytes
                    continue
                else:
                    ranks = tp_ranks if op.axis == "tp" else cp_ranks
                    ms = self.pricer.comm(op, ranks, dev).ms if len(ranks) > 1 else 0.0
                    exposed = ms
                phase = "f" if node.phase == "forward" else "b"
                if node.layer is not None:  # layer 0 (dense when dense_first), layer 1 (MoE when dense_first)
                    if node.layer == 1 and not dense_first:
                        continue
                    which = "dense" if dense_first and node.layer == 0 else "layer"
                    sums[f"{which}_{phase}"] += ms
                    sums[f"{which}_exposed"] += exposed
                elif node.layer is None:
                    where = "embed" if stage.index == 0 else "head"
                    sums[f"{where}_{phase}"] += ms
                    sums["edge_exposed"] += exposed
        if not dense_first:  # one kind of layer: layer 0's nodes stand for every layer
            for part in ("f", "b", "exposed"):
                sums[f"dense_{part}"] = sums[f"layer_{part}"]
        table = self.tables[key] = Table(act_bytes=act_bytes, **sums)
        return table

    def _gemm_ms(self, site: Site, device) -> float:
        op = ComputeOp(name="gemm", kind="gemm", flops=2.0 * site.m * site.k * site.n * site.num_b,
                       nbytes=0.0, dtype=site.dtype, m=site.m, k=site.k, n=site.n * site.num_b)
        return self.pricer.compute(op, device).ms


class _Layout:
    """Where a candidate's stages and replicas sit (ranks), and which device model gates each stage."""

    def __init__(self, cand: Candidate, costs: _Costs, blocks) -> None:
        self.cand = cand
        tp, cp, pp, dp = cand.tp, cand.cp, cand.pp, cand.dp
        self.shards: Shards | None = None
        self.positions: list | None = None
        self.fsdp_shares = EVEN
        self.units = []  # (device per stage, dp group ranks per stage, stage boundary pairs, replicas, block)
        if cand.grouping == "replicas":
            shape = tp * cp * pp
            for b in blocks:
                reps = b.size // shape
                stages_dev = [b.device] * pp
                pairs = [(b.first + s * tp * cp, b.first + (s + 1) * tp * cp) for s in range(pp - 1)]
                self.units.append((stages_dev, pairs, reps, b))
            self.dp_groups = []
            for s in range(pp):
                ranks = sorted(b.first + rep * shape + s * tp * cp + tp * c for b in blocks
                               for rep in range(b.size // shape) for c in range(cp))
                self.dp_groups.append(tuple(ranks))
        elif cand.grouping == "mixed_tp":  # the groups' rank order (hocket.search.space.mixed_groups)
            label = costs.mixed(cand)
            order = costs.mixes[label].order
            width = tp * cp * dp
            pairs = [(order[s * width], order[(s + 1) * width]) for s in range(pp - 1)]
            self.units.append(([label] * pp, pairs, dp, None))
            self.shards = costs.mixed_shards(label, cp, cand.micro_batch)
            self.positions = []  # (device model, its largest shares, the DP group of its rank per stage)
            for model, (index, shares) in self.shards.by_device().items():
                groups = [tuple(order[s * width + tp * j + index] for j in range(cp * dp)) for s in range(pp)]
                self.positions.append((model, shares, groups))
            _, self.fsdp_shares, self.dp_groups = max(self.positions, key=lambda p: (sum(p[1]), p[0]))
        else:
            width = tp * cp * dp
            stages_dev = []
            for s in range(pp):
                ranks = range(s * width, (s + 1) * width)
                models = {b.device for b in blocks if b.first < ranks.stop and b.first + b.size > ranks.start}
                stages_dev.append(min(sorted(models), key=lambda m: speed(costs.devices[m], costs.dtype)))
            pairs = [(s * width, (s + 1) * width) for s in range(pp - 1)]
            self.units.append((stages_dev, pairs, dp, None))
            self.dp_groups = [tuple(s * width + tp * j for j in range(cp * dp)) for s in range(pp)]

    def stage_devices(self) -> list[str]:
        """The device model gating each stage (under ``replicas``: the first block's; every block holds whole
        replicas of one device model, so all stages of a block are alike and the split is even up to the head)."""
        return self.units[0][0]


def _split_layers(model, cand: Candidate, costs: _Costs, devices: list[str]) -> list[int]:
    """Layers per stage: even under interleaving (Megatron-LM's rule), else balanced by FLOPs over each stage's
    slowest device's achievable peak with the LM head's FLOPs on the last stage, as ``model_step_sites``'s
    ``stages="auto"`` does (``hocket.models.partition.balance_layers``); no cost table is needed, so memory
    is checked before anything is priced."""
    from hocket.models.partition import balance_layers

    layers, pp = model.num_hidden_layers, cand.pp
    if cand.virtual > 1 or pp == 1:
        return [layers // pp] * pp
    tokens = cand.micro_batch * costs.seq / cand.cp
    layer_flops = 6.0 * tokens * model.active_layer_params() / cand.tp
    extras = [0.0] * pp
    extras[-1] = 6.0 * tokens * model.hidden_size * model.padded_vocab(cand.tp) / cand.tp
    return balance_layers(layers, [speed(costs.devices[d], costs.dtype) for d in devices], extras, layer_flops)


def _first_layers(stages) -> list[int]:
    """The first layer of each stage of a split."""
    out, first = [], 0
    for layers in stages:
        out.append(first)
        first += layers
    return out


class _Estimator:
    def __init__(self, model, costs: _Costs, *, seq: int, global_batch: int) -> None:
        self.model, self.costs, self.seq, self.global_batch = model, costs, seq, global_batch
        self.fpt = flops_per_token(model, seq)
        self.peak = sum(costs.cluster.device(r).peak(costs.dtype) or 0.0 for b in costs.blocks
                        for r in (b.first,) for _ in range(b.size))

    def unit_times(self, cand: Candidate, devices: list[str], stages: list[int], pairs, dp_groups,
                   micro: int, shares: tuple[float, float, float] = EVEN) -> tuple[float, float, float, list[float],
                                                                                  float]:
        """(step w/o dp and optimizer, bubble, exposed, per-stage slot, slot) of one replica unit; ``shares``: the
        uneven shares of the rank whose per-micro-batch DP collectives ``gradients`` / ``full`` sharding prices
        (``mixed_tp``)."""
        costs, pp = self.costs, cand.pp
        slots, exposed, self.last_fb = [], [], []
        firsts = _first_layers(stages)
        for s, (dev, layers) in enumerate(zip(devices, stages)):
            t = costs.table(dev, cand.tp, cand.cp, cand.micro_batch, cand.recompute, cand.ep)
            moe = self.model.moe_layers_in(firsts[s], layers)
            dense = layers - moe
            f = moe * t.layer_f + dense * t.dense_f + (t.embed_f if s == 0 else 0.0) + (
                t.head_f if s == pp - 1 else 0.0)
            b = moe * t.layer_b + dense * t.dense_b + (t.embed_b if s == 0 else 0.0) + (
                t.head_b if s == pp - 1 else 0.0)
            ex = moe * t.layer_exposed + dense * t.dense_exposed + (t.edge_exposed if s in (0, pp - 1) else 0.0)
            if cand.sharding in ("gradients", "full"):  # per micro-batch (module docstring)
                params = self._params(cand, s, layers, firsts[s], shares)
                fsdp = costs.comm_ms("reduce_scatter", 4 * params, dp_groups[s])
                if cand.sharding == "full":
                    fsdp += 2 * costs.comm_ms("all_gather", 2 * params, dp_groups[s])
                extra = max(0.0, fsdp - (f + b))
                b += extra
                ex += extra
            slots.append(f + b)
            exposed.append(ex)
            self.last_fb.append((f, b))
        slot = max(slots)
        t_act = costs.table(devices[0], cand.tp, cand.cp, cand.micro_batch, cand.recompute, cand.ep).act_bytes
        send = max((costs.comm_ms("send_recv", t_act, pair, axis="pp") for pair in pairs), default=0.0)
        bubble = (pp - 1) / cand.virtual * slot
        fill = 2 * (pp - 1) * send
        busiest = slots.index(slot)
        return micro * slot + bubble + fill, bubble + fill, micro * exposed[busiest] + fill, slots, slot

    def _params(self, cand: Candidate, s: int, layers: int, first_layer: int | None = None,
                shares: tuple[float, float, float] = EVEN) -> float:
        return stage_params(self.model, tp=cand.tp, layers=layers, first=s == 0, last=s == cand.pp - 1,
                            pp=cand.pp, first_layer=first_layer, ep=cand.ep, shares=shares)

    def _split(self, cand: Candidate, s: int, layers: int, first_layer: int,
               shares: tuple[float, float, float] = EVEN) -> tuple[float, float]:
        return stage_param_split(self.model, tp=cand.tp, layers=layers, first=s == 0, last=s == cand.pp - 1,
                                 pp=cand.pp, first_layer=first_layer, ep=cand.ep, shares=shares)

    def sync_ms(self, cand: Candidate, stages: list[int], dp_groups, devices: list[str],
                fb: list[tuple[float, float]], positions: list | None = None) -> tuple[float, float, float]:
        """(gradient sync ms, its exposed part, optimizer ms), each the worst stage's (module docstring);
        ``positions`` (``mixed_tp``): per device model of the group, its largest shares and its DP groups, each
        priced and the worst taken."""
        sync = exposed = opt = 0.0
        d = cand.dp * cand.cp
        d_e = max(1, cand.tp * cand.cp * cand.dp // cand.ep)
        firsts = _first_layers(stages)
        where = positions or [(None, EVEN, dp_groups)]
        for s, layers in enumerate(stages):
            for model, shares, groups in where:
                ms, hidden, op_ms = self._stage_sync(cand, s, layers, firsts[s], shares, groups[s],
                                                     model or devices[s], fb[s], d, d_e)
                sync, exposed, opt = max(sync, ms), max(exposed, hidden), max(opt, op_ms)
        return sync, exposed, opt

    def _stage_sync(self, cand: Candidate, s: int, layers: int, first_layer: int, shares, group, device: str,
                    fb: tuple[float, float], d: int, d_e: int) -> tuple[float, float, float]:
        """(sync ms, exposed ms, optimizer ms) of stage ``s`` for a rank with ``shares`` on ``device``."""
        costs = self.costs
        params, experts = self._split(cand, s, layers, first_layer, shares)
        expert_group = group[::cand.ep] if experts else ()  # ranks holding the same experts (module docstring)
        f, b = fb
        if cand.sharding == "replicated":
            ms = costs.comm_ms("all_reduce", 4 * params, group) + costs.comm_ms("all_reduce", 4 * experts,
                                                                                 expert_group)
            hidden = max(0.0, ms - b)
        elif cand.sharding in ("optimizer", "gradients"):  # gradients: the last micro-batch's rs (docstring)
            rs = costs.comm_ms("reduce_scatter", 4 * params, group) + costs.comm_ms(
                "reduce_scatter", 4 * experts, expert_group)
            ag = costs.comm_ms("all_gather", 2 * params, group) + costs.comm_ms("all_gather", 2 * experts,
                                                                                 expert_group)
            ms, hidden = rs + ag, max(0.0, rs - b) + max(0.0, ag - f)
        else:
            ms = hidden = 0.0
        local = params / d + experts / d_e if cand.sharding != "replicated" else params + experts
        gbps = costs.devices[device].memory_gbps or 1000.0
        return ms, hidden, OPTIMIZER_BYTES_PER_PARAM * local / (gbps * 1e6)

    def price(self, cand: Candidate, layout: _Layout, stages: list[int], *,
              check_memory: bool = True) -> Priced | tuple[str, str, Memory]:
        """The analytic estimate, or (reason, example, memory) when a stage does not fit."""
        costs = self.costs
        devices = layout.stage_devices()
        if cand.grouping == "replicas":
            cand = self._balance(cand, layout, stages)
            if cand is None:
                return ("global batch cannot be split into whole micro-batches over the device blocks", "", None)
        memory = []
        firsts = _first_layers(stages)
        for unit_i, (devs, _, _, _) in enumerate(layout.units):
            micro = cand.split[unit_i][1] if cand.split else cand.micro_batches
            for s, (dev, layers) in enumerate(zip(devs, stages)):
                # a mixed TP group: each device model at the largest shares its ranks hold (hocket.search.memory)
                kinds = [(m, shares) for m, shares, _ in layout.positions] if layout.positions else [(dev, EVEN)]
                for kind, shares in kinds:
                    spec = costs.devices[kind]
                    mem = stage_memory(self.model, tp=cand.tp, cp=cand.cp, dp=cand.dp, pp=cand.pp, stage=s,
                                       layers=layers, seq=self.seq, micro_batch=cand.micro_batch,
                                       micro_batches=micro, sharding=cand.sharding, recompute=cand.recompute,
                                       virtual=cand.virtual, device_bytes=(spec.memory_gib or 0.0) * GIB,
                                       device=spec.model, ep=cand.ep, first_layer=firsts[s], shares=shares)
                    if not mem.fits and check_memory:
                        where = " in a mixed TP group" if layout.positions else ""
                        held = f" (its uneven shards: {share_text(shares)})" if layout.positions else ""
                        return (f"out of memory on {spec.model}{where} (binding: {mem.binding()})",
                                f"{cand.label()}: stage {s} needs {mem.describe()}{held}", mem)
                    memory.append(mem)
        step = bubble = exposed = 0.0
        fb = []
        for unit_i, (devs, pairs, _, _) in enumerate(layout.units):
            micro = cand.split[unit_i][1] if cand.split else cand.micro_batches
            t, b, e, _, _ = self.unit_times(cand, devs, stages, pairs, layout.dp_groups, micro, layout.fsdp_shares)
            if t > step:
                step, bubble, exposed, fb = t, b, e, self.last_fb
        sync, sync_exposed, opt = self.sync_ms(cand, stages, layout.dp_groups, devices, fb, layout.positions)
        step += sync_exposed + opt
        exposed += sync_exposed
        tokens_s = self.global_batch * self.seq / (step / 1e3)
        mfu = tokens_s * self.fpt / (self.peak * 1e12) if self.peak else 0.0
        return Priced(candidate=cand, stages=tuple(stages), step_ms=step, bubble_ms=bubble, exposed_ms=exposed,
                      dp_ms=sync, dp_exposed_ms=sync_exposed, memory=memory, tokens_per_s=tokens_s, mfu=mfu,
                      shards=layout.shards.to_dict() if layout.shards is not None else None)

    def _balance(self, cand: Candidate, layout: _Layout, stages: list[int]) -> Candidate | None:
        """Metis-style data balancing over the device blocks (module docstring)."""
        total = self.global_batch // cand.micro_batch
        units = []
        for devs, pairs, reps, _ in layout.units:
            _, _, _, _, slot = self.unit_times(cand, devs, stages, pairs, layout.dp_groups, 1)
            bubble = (cand.pp - 1) / cand.virtual * slot
            units.append([reps, 1, slot, bubble])
        left = total - sum(u[0] for u in units)
        if left < 0:
            return None
        while left > 0:
            best = None
            for i, (reps, m, slot, bubble) in enumerate(units):
                if reps <= left:
                    finish = (m + 1) * slot + bubble
                    if best is None or finish < best[0]:
                        best = (finish, i)
            if best is None:
                return None
            units[best[1]][1] += 1
            left -= units[best[1]][0]
        if cand.schedule == "interleaved" and any(m % cand.pp for _, m, _, _ in units):
            return None
        split = tuple((reps, m) for reps, m, _, _ in units)
        return replace(cand, split=split, micro_batches=max(m for _, m in split))


def search_parallel(model, cluster, *, seq: int, global_batch: int | None = None, top: int = 5,
                    rerank: int = 3, dtype: str = "bfloat16", space: ParallelSpace | None = None,
                    profile=None, site_space: SpaceConfig = SITE_SPACE) -> SearchOutcome:
    """Search the parallel space (``hocket.search.space``) for ``model`` on ``cluster`` at ``seq`` tokens per
    sequence and ``global_batch`` sequences per step (default: 4M tokens). Raises ``SearchError`` when the
    space is empty (with why) or no candidate fits in memory (with the closest candidate and its limit)."""
    from hocket.core.site import canonical_dtype
    from hocket.hardware import load_cluster
    from hocket.models.catalog import load_model

    started = time.perf_counter()
    model = load_model(model)
    cluster = load_cluster(cluster)
    dtype = canonical_dtype(dtype)
    for name, value in (("seq", seq), ("top", top)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int")
    if isinstance(rerank, bool) or not isinstance(rerank, int) or rerank < 0:
        raise ValueError(f"rerank={rerank!r} must be an int >= 0")
    if global_batch is None:
        global_batch = max(1, DEFAULT_TOKENS_PER_BATCH // seq)
    if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
        raise ValueError(f"global_batch={global_batch!r} must be a positive int (sequences per step)")
    sp = enumerate_space(model, cluster, seq=seq, global_batch=global_batch, space=space)
    if not sp.candidates:
        reasons = "; ".join(f"{r} ({n}x, e.g. {sp.examples[r]})" for r, n in sp.pruned.most_common())
        raise SearchError(f"the parallel space of {model.name} on {cluster.name} ({cluster.world_size} devices, "
                          f"seq {seq}, global batch {global_batch}) is empty: {reasons or 'no degrees'}")
    costs = _Costs(model, cluster, seq=seq, dtype=dtype, profile=profile, site_space=site_space)
    costs.tp_across_nodes = (space or ParallelSpace()).tp_across_nodes
    est = _Estimator(model, costs, seq=seq, global_batch=global_batch)
    by_order = {(): (costs, est)}
    for order, permuted in _block_orders(cluster):
        other = _Costs(model, permuted, seq=seq, dtype=dtype, profile=profile, site_space=site_space)
        other.tables, other.by_signature = costs.tables, costs.by_signature  # device-local: shared
        by_order[order] = (other, _Estimator(model, other, seq=seq, global_batch=global_batch))
    work = list(sp.candidates)
    work += [replace(c, order=order) for order in list(by_order)[1:] for c in sp.candidates if c.grouping == "stages"]
    priced: list[Priced] = []
    mem_pruned: dict[str, int] = {}
    mem_examples: dict[str, str] = {}
    closest: tuple[float, str, Memory] | None = None
    for cand in work:
        c_costs, c_est = by_order[cand.order]
        layout = _Layout(cand, c_costs, c_costs.blocks)
        stages = _split_layers(model, cand, c_costs, layout.stage_devices())
        out = c_est.price(cand, layout, stages)
        if isinstance(out, Priced):
            priced.append(out)
            continue
        reason, example, mem = out
        mem_pruned[reason] = mem_pruned.get(reason, 0) + 1
        mem_examples.setdefault(reason, example)
        if mem is not None and (closest is None or mem.total / mem.limit < closest[0]):
            closest = (mem.total / mem.limit, example, mem)
    if not priced:
        where = f"{model.name} on {cluster.name} ({cluster.world_size} devices, seq {seq}, global batch " \
                f"{global_batch})"
        if closest is not None:
            raise SearchError(f"{where} does not fit in device memory at any configuration: the closest, "
                              f"{closest[1]}, is {closest[0]:.2f}x the limit; use more or larger devices, or a "
                              f"shorter sequence")
        raise SearchError(f"{where}: no candidate could be priced: " + "; ".join(mem_pruned))
    priced.sort(key=lambda p: (p.step_ms, p.candidate.label()))
    for p in priced[:rerank]:
        if p.candidate.grouping == "mixed_tp":  # the simulator runs even TP shards only: analytic figure kept
            continue
        c_costs, c_est = by_order[p.candidate.order]
        p.simulated_ms = _simulate(p, model, c_costs.cluster, c_costs, c_est, seq=seq)
    head = sorted(priced[:rerank], key=lambda p: (p.best_ms, p.candidate.label()))
    ranked = head + priced[rerank:]
    return SearchOutcome(model=model, cluster=cluster, seq=seq, global_batch=global_batch, ranked=ranked[:max(top,
                         1)] if top else ranked, space=sp, memory_pruned=mem_pruned, memory_examples=mem_examples,
                         distinct_sites=len(costs.by_signature), tables=len(costs.tables),
                         seconds=time.perf_counter() - started, evaluated=len(work),
                         clusters={order: c.cluster for order, (c, _) in by_order.items()},
                         notes=[f"{len(priced)} candidates priced analytically, {min(rerank, len(priced))} "
                                f"re-ranked by the event simulator", _ep_note(model, sp)]
                         + _mixed_note(sp, priced, rerank))


def _ep_note(model, sp: Space) -> str:
    if not model.is_moe:
        return "expert parallelism: not searched (a dense model; ep = 1)"
    degrees = sorted({c.ep for c in sp.candidates})
    return f"expert parallelism searched: ep in {degrees} ({model.num_experts} experts, top-{model.num_experts_per_tok})"


def _mixed_note(sp: Space, priced: list[Priced], rerank: int) -> list[str]:
    """What the report says of the ``mixed_tp`` grouping: offered or not (the space's reason), and that its
    candidates keep their analytic figure in the re-rank."""
    offered = sum(c.grouping == "mixed_tp" for c in sp.candidates)
    if offered:
        kept = sum(p.candidate.grouping == "mixed_tp" for p in priced[:rerank])
        return [f"mixed_tp: {offered} candidates with tensor-parallel groups over device types (uneven shards by "
                f"device speed, hocket.plan.shards)" + (f"; {kept} among the best {rerank} keep their analytic "
                                                        f"figure (the simulator runs even TP shards only)"
                                                        if kept else "")]
    reasons = [r for r in sp.pruned if r.startswith("mixed_tp")]
    return [f"mixed_tp not offered: {reasons[0]}"] if reasons else []


def _simulated_steps(build, cluster, costs: _Costs, micro: int, pp: int) -> float:
    """The simulated step of ``micro`` micro-batches. Beyond ``2 * pp`` micro-batches 1F1B is in its steady
    state, where every further micro-batch adds the same slot: the step is simulated at ``m1 = pp`` and
    ``m2 = 2 * pp`` micro-batches and extended linearly, ``sim(m2) + (micro - m2) * (sim(m2) - sim(m1)) /
    (m2 - m1)`` (exact when ``micro <= 2 * pp``: simulated as is)."""
    from hocket.sim.step import simulate_step

    def run(mb: int) -> float:
        return simulate_step(build(mb), cluster, plan=lambda s: costs.plan(s).chosen).step_ms

    m1, m2 = max(1, pp), max(2, 2 * pp)
    if micro <= m2:
        return run(micro)
    s1, s2 = run(m1), run(m2)
    return s2 + (micro - m2) * (s2 - s1) / (m2 - m1)


def price_candidate(model, cluster, candidate: Candidate, *, seq: int, global_batch: int,
                    stages: list[int] | None = None, simulate: bool = True, dtype: str = "bfloat16",
                    profile=None, site_space: SpaceConfig = SITE_SPACE) -> Priced:
    """Price one given configuration (e.g. a published run's) as the search prices its candidates, memory
    reported but not enforced (``Priced.memory``; ``Memory.fits`` says whether it fits the model of
    ``hocket.search.memory``). ``stages``: layers per stage (default: the search's split)."""
    from hocket.core.site import canonical_dtype
    from hocket.hardware import load_cluster
    from hocket.models.catalog import load_model

    model, cluster, dtype = load_model(model), load_cluster(cluster), canonical_dtype(dtype)
    if candidate.tp * candidate.cp * candidate.pp * candidate.dp != cluster.world_size:
        raise ValueError(f"{candidate.label()} needs {candidate.tp * candidate.cp * candidate.pp * candidate.dp} "
                         f"devices but {cluster.name} has {cluster.world_size}")
    costs = _Costs(model, cluster, seq=seq, dtype=dtype, profile=profile, site_space=site_space)
    est = _Estimator(model, costs, seq=seq, global_batch=global_batch)
    layout = _Layout(candidate, costs, costs.blocks)
    split = list(stages) if stages is not None else _split_layers(model, candidate, costs, layout.stage_devices())
    out = est.price(candidate, layout, split, check_memory=False)
    if not isinstance(out, Priced):
        raise SearchError(f"{candidate.label()}: {out[0]}")
    if simulate and candidate.grouping != "mixed_tp":  # the simulator runs even TP shards only
        out.simulated_ms = _simulate(out, model, cluster, costs, est, seq=seq)
    return out


MAX_ORDERED_GROUPS = 4
"""mixed clusters of up to this many node groups try every order of their device blocks (4! = 24)."""


def _block_orders(cluster) -> list[tuple[tuple[str, ...], object]]:
    """Every other order of a mixed cluster's node groups (by device model), as reordered clusters: under the
    ``stages`` grouping the order decides which device type runs the first stages (embedding, most
    activations in flight) and which the last (LM head)."""
    import itertools

    groups = cluster.groups
    models = [tuple(i.device.model for i in g.node.islands) for g in groups]
    if len(set(models)) < 2 or len(groups) > MAX_ORDERED_GROUPS:
        return []
    seen = {tuple(models)}
    out = []
    for perm in itertools.permutations(range(len(groups))):
        order = tuple(models[i] for i in perm)
        if order in seen:
            continue
        seen.add(order)
        label = tuple("+".join(m) for m in order)
        out.append((label, replace(cluster, groups=tuple(groups[i] for i in perm),
                                   name=f"{cluster.name}[{' > '.join(label)}]")))
    return out


def _dp_sync(sharding: str) -> str:
    return "all_reduce" if sharding == "replicated" else "reduce_scatter"


def _simulate(p: Priced, model, cluster, costs: _Costs, est: _Estimator, *, seq: int) -> float:
    """The event simulator's step for ``p`` plus the corrections of the module docstring."""
    from hocket.models.step import model_step_sites

    cand = p.candidate
    layout = _Layout(cand, costs, costs.blocks)
    virtual_stages = list(p.stages)
    if cand.virtual > 1:  # each pipeline rank's layers cut evenly into its virtual stages
        virtual_stages = [p.stages[j % cand.pp] // cand.virtual for j in range(cand.pp * cand.virtual)]
        short = sum(p.stages) - sum(virtual_stages)
        for j in range(short):
            virtual_stages[j % len(virtual_stages)] += 1
    if cand.grouping == "replicas":
        worst = 0.0
        shape = cand.tp * cand.cp * cand.pp
        for (reps, micro), (_, _, _, block) in zip(cand.split, layout.units):
            sub = cluster.subcluster(range(block.first, block.first + reps * shape), name=f"{cluster.name}:{block.device}")
            sub_costs = _Costs(model, sub, seq=seq, dtype=costs.dtype, profile=costs.profile,
                               site_space=costs.site_space)
            worst = max(worst, _simulated_steps(
                lambda mb, sub=sub, reps=reps: model_step_sites(
                    model, tp=cand.tp, pp=cand.pp, dp=reps, cp=cand.cp, seq=seq, batch=cand.micro_batch,
                    micro_batches=mb, cluster=sub, dtype=costs.dtype, stages=virtual_stages,
                    dp_sync=_dp_sync(cand.sharding), recompute=cand.recompute, virtual=cand.virtual, ep=cand.ep), sub,
                sub_costs, micro, cand.pp))
        base = worst + p.dp_exposed_ms
    else:
        base = _simulated_steps(lambda mb: model_step_sites(
            model, tp=cand.tp, pp=cand.pp, dp=cand.dp, cp=cand.cp, seq=seq, batch=cand.micro_batch,
            micro_batches=mb, cluster=cluster, dtype=costs.dtype, stages=virtual_stages,
            dp_sync=_dp_sync(cand.sharding), recompute=cand.recompute, virtual=cand.virtual, ep=cand.ep), cluster,
            costs,
            cand.micro_batches, cand.pp)
    devices = layout.stage_devices()
    units = layout.units[0]
    micro = cand.split[0][1] if cand.split else cand.micro_batches
    _, _, _, slots, slot = est.unit_times(cand, units[0], list(p.stages), units[1], layout.dp_groups, micro)
    sync, sync_exposed, opt = est.sync_ms(cand, list(p.stages), layout.dp_groups, devices, est.last_fb)
    hidden = 0.0 if cand.grouping == "replicas" else sync - sync_exposed
    if cand.sharding == "full" and cand.grouping != "replicas":
        # the simulated graph ends the step with a reduce-scatter and an all-gather of the stage (dp_sync); full
        # sharding runs its DP collectives per micro-batch instead (``fsdp`` below): that step-end pair is taken off
        hidden, _, _ = est.sync_ms(replace(cand, sharding="optimizer"), list(p.stages), layout.dp_groups, devices,
                                   est.last_fb)
    fsdp = 0.0
    if cand.sharding in ("gradients", "full"):
        plain = replace(cand, sharding="optimizer")
        _, _, _, plain_slots, _ = est.unit_times(plain, units[0], list(p.stages), units[1], layout.dp_groups, micro)
        fsdp = micro * max(a - b for a, b in zip(slots, plain_slots))
    return base - hidden + fsdp + opt

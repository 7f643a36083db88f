"""``model_step_sites``: the Sites and other work of one training step (Megatron-style TP+SP, PP, DP).

Per layer and micro-batch of ``T = batch * seq`` tokens, with tensor parallelism ``tp``
and sequence parallelism (activations between blocks are sharded over the sequence):

forward   norm -> QKV (ag_mm: m=T, k=h, n=(q+2kv)/tp) -> attention core -> attention out
          (mm_rs: m=T, k=q/tp, n=h) -> residual+norm -> MLP gate+up (ag_mm: m=T, k=h,
          n=ffn/tp, num_b=2 for SwiGLU) -> activation -> MLP down (mm_rs: m=T, k=ffn/tp, n=h)
          -> residual
backward  in reverse: each Site's input-gradient Site (``Site.backward_sites``: an ag_mm's
          is an mm_rs with k and n swapped, and the reverse) followed by its
          weight-gradient GEMM (``[k, T] @ [T, n]``, computing while the next
          input-gradient's communication runs), attention backward (2.5x forward FLOPs:
          recomputation plus the dQ, dK, dV products), norm backwards.

Mixture-of-Experts layers (``model.is_moe_layer``) replace the MLP with the expert-parallel block on each
rank's sequence shard of ``T/tp`` tokens (Megatron-Core's expert-tensor-parallel size 1: routed and shared
experts run whole, unsplit by tp): ``moe.router`` (a GEMM ``[T/tp, h] @ [h, E]``), then with ``ep > 1`` the
two sites of :class:`hocket.core.moe.MoeSite` over the EP group (``ep`` ranks of equal tp, cp and stage
coordinates and consecutive dp coordinates, ``E/ep`` experts each; routing uniform, or with ``moe_zipf = s > 0``
Zipf-skewed, expert ``e``'s share proportional to ``1 / (e + 1) ** s`` on every rank,
``hocket.core.moe.zipf_counts``): ``moe.experts.up``
(``a2a_mm``: dispatch + gate/up grouped GEMM, the shared experts beside it, ``shared_ffn``), ``moe.act``,
``moe.experts.down`` (``mm_a2a``: down grouped GEMM + combine); in backward the same two sites with
``direction="backward"`` in reverse order (each prices its data- and weight-gradient GEMMs and its
all-to-all; the shared experts ride with the first, ``moe.experts.down.grad``). With ``ep == 1`` every expert
is local: the grouped GEMMs are plain GEMMs over ``T/tp * top_k`` rows (the shared experts one more), priced
with their gradients (twice the FLOPs) in backward. Expert weights (``E/ep`` experts) synchronise their
gradients over the ``tp * cp * dp / ep`` ranks holding the same experts (``dp.expert_grad_*``); the router and
shared experts go with the other weights over the dp group (their tensor-parallel all-reduce is left out).

Multi-head latent attention (``model.is_mla``, approximate): ``attn.qkv`` is the query and key-value
down-projections over the gathered sequence (``n = q_lora_rank + kv_lora_rank + qk_rope_head_dim``, weights
replicated over tp; without ``q_lora_rank`` the query projection ``n = q_size / tp`` instead), followed by
``attn.qkv_up`` (the up-projections, a GEMM split over tp by heads); ``attn.out`` has ``k = heads *
v_head_dim / tp``.

The first stage also embeds (vocab-parallel lookup, then a reduce-scatter into the
sequence-parallel layout); the last stage runs the final norm, the LM head (ag_mm with
``n = padded_vocab / tp``) and the vocab-parallel cross entropy (two small all-reduces).
Stages send activations (``T/tp * h`` per rank) forward and gradients backward. After the
last micro-batch each stage reduces its gradients over DP (reduce-scatter of fp32 grads
and all-gather of the updated bf16 weights with a distributed optimizer, or one
all-reduce). Ranks are laid out tp fastest, then dp, then pp:
``rank = t + tp * (d + dp * s)``.

Context parallelism (``cp > 1``) splits every sequence over ``cp`` ranks placed next to
the TP group (``rank = t + tp * (c + cp * (d + dp * s))``): each rank holds ``batch * seq
/ cp`` tokens, so every Site's m is divided by ``cp``; attention needs the keys and values
of the whole sequence, so each layer all-gathers its K and V shards over the CP group
before the attention core (``attn.cp_kv_all_gather``: ``2 * batch * seq * kv_size / tp``
elements) and reduce-scatters their gradients after the attention backward
(``attn.cp_kv_reduce_scatter``), the all-gather form Llama 3 used (its GQA K/V are small);
the attention core computes the rank's queries against all keys (FLOPs / cp). The DP
gradient sync runs over the ``dp * cp`` ranks that hold the same weights.

``recompute``: ``none`` keeps every activation; ``selective`` re-runs the attention core and
the MLP activation at the start of each layer's backward (Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", selective recomputation);
``full`` re-runs the whole layer forward there (sites included; the stage keeps only the
layer inputs).
"""

from __future__ import annotations

import math

from hocket.core.moe import MoeSite, zipf_counts
from hocket.core.site import DTYPE_BYTES, Site, canonical_dtype
from hocket.models.catalog import load_model
from hocket.models.graph import CommOp, ComputeOp, PipelineStage, StepGraph, StepNode
from hocket.models.partition import balance_layers, check_stage_layers
from hocket.models.spec import ModelSpec

ATTENTION_BACKWARD_FACTOR = 2.5
DP_SYNC = ("reduce_scatter", "all_reduce")
RECOMPUTE = ("none", "selective", "full")
SELECTIVE_RECOMPUTE = ("attn.core", "mlp.act", "moe.act")
"""the forward nodes selective recomputation re-runs before a layer's backward."""


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int")
    return value


def check_degrees(model: ModelSpec, tp: int, pp: int, dp: int, ep: int = 1) -> None:
    """Raise naming the model quantity a parallel degree does not divide (``ep``: :func:`check_ep`)."""
    for name, value in (("tp", tp), ("pp", pp), ("dp", dp), ("ep", ep)):
        _positive(name, value)
    for what, size in model.tp_split_sizes():
        if size % tp:
            divisors = [d for d in range(1, min(size, 64) + 1) if size % d == 0 and d <= 64]
            raise ValueError(f"tp={tp} does not divide {what}={size} of {model.name!r}; tensor parallelism "
                             f"splits it evenly: use tp in {divisors[-6:]}")
    if pp > model.num_hidden_layers:
        raise ValueError(f"pp={pp} exceeds num_hidden_layers={model.num_hidden_layers} of {model.name!r}; "
                         f"every stage needs at least one layer")
    check_ep(model, dp, ep)


def check_ep(model: ModelSpec, dp: int, ep: int) -> None:
    """Refuse an expert-parallel degree the model or the data-parallel degree cannot take: ``ep > 1`` on a dense
    model, ``ep`` not dividing ``dp`` (the EP group is a part of the DP group) or the routed experts."""
    if ep == 1:
        return
    if not model.is_moe:
        raise ValueError(f"ep={ep} but {model.name!r} is a dense model (no experts): expert parallelism needs an "
                         f"MoE model (e.g. mixtral-8x7b, qwen3-30b-a3b, deepseek-v3); leave ep at 1")
    if dp % ep:
        fits = [d for d in range(1, dp + 1) if dp % d == 0 and model.num_experts % d == 0]
        raise ValueError(f"ep={ep} does not divide dp={dp}: the expert-parallel group is part of the data-parallel "
                         f"group (world = tp x cp x pp x dp); use ep in {fits} or a dp that ep divides")
    if model.num_experts % ep:
        fits = [d for d in range(1, dp + 1) if dp % d == 0 and model.num_experts % d == 0]
        raise ValueError(f"ep={ep} does not divide num_experts={model.num_experts} of {model.name!r}: each rank "
                         f"holds num_experts / ep experts; use ep in {fits}")


def check_tokens(tp: int, seq: int, batch: int, cp: int = 1) -> None:
    """Refuse a step whose tokens (``batch * seq``) the sequence-parallel layout cannot split over ``tp`` ranks:
    the operators reject such shapes (the gathered and scattered rows must divide by the group size)."""
    tokens = batch * seq
    if tp > 1 and (tokens % tp or tokens // cp % tp):
        fit = seq + (-seq) % (tp * cp // math.gcd(tp * cp, batch))
        raise ValueError(f"--seq {seq} with --batch {batch} gives {tokens} tokens, not divisible by --tp {tp}"
                         + (f" on each of cp={cp} context-parallel ranks" if cp > 1 else "")
                         + f": sequence parallelism splits the tokens evenly over the tensor-parallel ranks (the "
                         f"operators reject it); use --seq {fit} (pad the sequence) or a --tp dividing {tokens}")


def _stage_speed(cluster, ranks: range, dtype: str) -> float:
    """The slowest device's achievable peak among ``ranks`` (one probe per node; dense peak times
    its published matmul efficiency relative to H100's, ``hocket.cost.compute.achievable_tflops``)."""
    from hocket.cost.compute import achievable_tflops

    best = None
    step = max(1, cluster.ranks_per_node(cluster.node_of(ranks[0])))
    probes = list(ranks[::step]) + [ranks[-1]]
    for r in probes:
        speed = achievable_tflops(cluster.device(r), dtype)
        best = speed if best is None else min(best, speed)
    return best


class _Stage:
    """Collects one stage's nodes with named dependencies."""

    def __init__(self) -> None:
        self.nodes: list[StepNode] = []

    def add(self, name: str, op, *, deps=(), phase: str, layer: int | None = None) -> int:
        self.nodes.append(StepNode(name=name, op=op, depends_on=tuple(d for d in deps if d is not None),
                                   phase=phase, layer=layer))
        return len(self.nodes) - 1


def model_step_sites(model: str | ModelSpec, *, tp: int, pp: int = 1, dp: int = 1, seq: int, batch: int = 1,
                     micro_batches: int | None = None, cluster=None, dtype: str = "bfloat16",
                     stages: list[int] | str | None = None, dp_sync: str = "reduce_scatter",
                     grad_dtype: str = "float32", causal: bool = True, cp: int = 1,
                     recompute: str = "none", virtual: int = 1, ep: int = 1,
                     moe_zipf: float = 0.0) -> StepGraph:
    """The StepGraph of one training step (see the module docstring).

    ``batch``: sequences per micro-batch; ``micro_batches``: per step and DP replica
    (default ``pp``); ``stages``: layers per pipeline stage (a list), ``"auto"`` (balanced by
    device speed when ``cluster`` is given, counting the embedding and LM head), or None
    (= auto). ``cluster``: when given, ``tp * cp * pp * dp`` must equal its world size.
    ``cp``: context-parallel degree (must divide ``seq``); ``recompute``: one of ``RECOMPUTE``.
    ``virtual``: virtual stages per pipeline rank (interleaved 1F1B): the graph then holds ``pp * virtual``
    stages, virtual stage ``j`` on the ranks of pipeline stage ``j % pp`` (``stages`` lists ``pp * virtual``
    layer counts). ``ep``: expert-parallel degree of an MoE model (divides ``dp`` and the routed experts;
    :func:`check_ep`); ``moe_zipf``: the Zipf exponent of its routing (0: uniform). ``batch * seq / cp`` must
    divide by ``tp`` (:func:`check_tokens`).
    """
    model = load_model(model)
    check_degrees(model, tp, pp, dp, ep)
    _positive("seq", seq)
    _positive("batch", batch)
    micro = pp if micro_batches is None else _positive("micro_batches", micro_batches)
    _positive("cp", cp)
    _positive("virtual", virtual)
    if virtual > 1 and pp == 1:
        raise ValueError(f"virtual={virtual} needs pp > 1: interleaving splits each pipeline rank's layers")
    if pp * virtual > model.num_hidden_layers:
        raise ValueError(f"pp * virtual = {pp * virtual} exceeds num_hidden_layers={model.num_hidden_layers}")
    nstages = pp * virtual
    if seq % cp:
        raise ValueError(f"cp={cp} does not divide seq={seq}; context parallelism splits each sequence evenly")
    check_tokens(tp, seq, batch, cp)
    if isinstance(moe_zipf, bool) or not isinstance(moe_zipf, (int, float)) or not 0 <= moe_zipf < float("inf"):
        raise ValueError(f"moe_zipf={moe_zipf!r} must be a finite number >= 0 (the routing's Zipf exponent; 0: "
                         f"uniform)")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute={recompute!r} must be one of {RECOMPUTE}")
    dtype = canonical_dtype(dtype)
    grad_dtype = canonical_dtype(grad_dtype)
    if dp_sync not in DP_SYNC:
        raise ValueError(f"dp_sync={dp_sync!r} must be one of {DP_SYNC}")
    world = tp * cp * pp * dp
    if cluster is not None and world != cluster.world_size:
        degrees = f"tp*pp*dp = {tp}*{pp}*{dp}" if cp == 1 else f"tp*cp*pp*dp = {tp}*{cp}*{pp}*{dp}"
        raise ValueError(f"{degrees} = {world} but cluster {cluster.name!r} has "
                         f"{cluster.world_size} devices; choose degrees whose product is {cluster.world_size}")
    item = DTYPE_BYTES[dtype]
    h, layers = model.hidden_size, model.num_hidden_layers
    tokens = batch * seq // cp
    rdp = dp * cp  # ranks holding the same weights (the gradient-sync group)
    vocab = model.padded_vocab(tp)
    layer_flops = 6.0 * tokens * model.active_layer_params() / tp
    head_flops = 6.0 * tokens * h * vocab / tp
    if stages is None or stages == "auto":
        if cluster is not None:
            speeds = [_stage_speed(cluster, range(s % pp * tp * rdp, (s % pp + 1) * tp * rdp), dtype)
                      for s in range(nstages)]
        else:
            speeds = [1.0] * nstages
        extras = [0.0] * nstages
        extras[-1] += head_flops
        per_stage = balance_layers(layers, speeds, extras, layer_flops)
    elif isinstance(stages, str):
        raise ValueError(f"stages={stages!r} must be a list of layer counts, 'auto' or None")
    else:
        per_stage = check_stage_layers(stages, layers, nstages)

    def group(s: int) -> tuple[int, ...]:
        s %= pp  # virtual stage s runs on pipeline stage s % pp
        return tuple(range(s * tp * rdp, s * tp * rdp + tp))

    out_stages = []
    first = 0
    for s, count in enumerate(per_stage):
        ranks = group(s)
        dp_ranks = tuple(s % pp * tp * rdp + tp * d for d in range(rdp))
        cp_ranks = tuple(ranks[0] + tp * c for c in range(cp))
        ep_ranks = tuple(ranks[0] + tp * cp * d for d in range(ep))
        # ranks holding the same experts as ranks[0]: every tp and cp coordinate, dp coordinates 0, ep, 2 ep, ...
        edp_ranks = tuple(sorted(ranks[0] + t + tp * (c + cp * d) for t in range(tp) for c in range(cp)
                                 for d in range(0, dp, ep)))
        builder = _Stage()
        common = dict(dtype=dtype, world=tp, ranks=ranks if world > tp or ranks[0] else (), count=micro)

        def site(kind: str, name: str, m: int, k: int, n: int, num_b: int = 1) -> Site:
            return Site(kind=kind, m=m, k=k, n=n, num_b=num_b, name=name, **common)

        def comm(name: str, op: str, nbytes: int, axis: str, group_ranks) -> CommOp:
            return CommOp(name=name, op=op, nbytes=int(nbytes), axis=axis, ranks=tuple(group_ranks), dtype=dtype)

        def elementwise(name: str, nbytes: float, flops: float = 0.0) -> ComputeOp:
            return ComputeOp(name=name, kind="elementwise", flops=flops, nbytes=nbytes, dtype=dtype)

        def gemm(name: str, m: int, k: int, n: int) -> ComputeOp:
            return ComputeOp(name=name, kind="gemm", flops=2.0 * m * k * n, nbytes=(m * k + k * n + m * n) * item,
                             dtype=dtype, m=m, k=k, n=n)

        shard_act = tokens // tp * h * item
        last = None
        if s > 0:
            last = builder.add("pp.recv_activation", comm("pp.recv_activation", "send_recv", shard_act, "pp",
                                                          (group(s - 1)[0], ranks[0])), phase="forward")
        if s == 0:
            last = builder.add("embed.lookup", elementwise("embed.lookup", 2 * tokens * h * item), phase="forward")
            last = builder.add("embed.reduce_scatter", comm("embed.reduce_scatter", "reduce_scatter",
                                                            tokens * h * item, "tp", ranks),
                               deps=(last,), phase="forward")
        layer_sites = _layer_sites(model, tp, tokens, site)
        heads = model.num_attention_heads // tp
        attention_flops = 2.0 * tokens * seq * heads * (model.head_size + model.v_head_size)
        attention_flops *= 0.5 if causal else 1.0
        attention_bytes = tokens * (2 * model.q_size + 2 * model.kv_size) // tp * item
        norm_bytes = 2 * tokens // tp * h * item + h * item
        cp_kv_bytes = 2 * batch * seq * (model.kv_size // tp) * item
        qkv_up = _mla_up_gemm(model, tp, tokens, dtype)
        attention_ops = [("norm1", elementwise("norm1", norm_bytes)), ("attn.qkv", layer_sites["attn.qkv"])]
        if qkv_up is not None:
            attention_ops.append(("attn.qkv_up", qkv_up))
        if cp > 1:
            attention_ops.append(("attn.cp_kv_all_gather", comm("attn.cp_kv_all_gather", "all_gather", cp_kv_bytes,
                                                                "cp", cp_ranks)))
        attention_ops += [("attn.core", ComputeOp(name="attn.core", kind="attention", flops=attention_flops,
                                                  nbytes=attention_bytes, dtype=dtype)),
                          ("attn.out", layer_sites["attn.out"]),
                          ("norm2", elementwise("residual+norm2", 2 * norm_bytes))]
        residual = ("residual", elementwise("residual", 3 * tokens // tp * h * item))
        dense_ops = attention_ops + [
            ("mlp.up", layer_sites["mlp.up"]),
            ("mlp.act", elementwise("mlp.act", tokens * (model.intermediate_size // tp) * item
                                    * (model.mlp_up_matrices + 1))),
            ("mlp.down", layer_sites["mlp.down"]), residual] if model.dense_layers else []
        moe = _MoeOps(model, tp=tp, tokens=tokens, ep=ep, dtype=dtype, micro=micro, ranks=ep_ranks,
                      gemm=gemm, elementwise=elementwise, zipf=float(moe_zipf)) if model.is_moe else None
        moe_ops = attention_ops + moe.forward + [residual] if moe is not None else []

        def recompute_ops_of(forward_ops):
            if recompute == "full":
                return forward_ops
            if recompute == "selective":
                return [(n, o) for n, o in forward_ops if n in SELECTIVE_RECOMPUTE or n == "attn.cp_kv_all_gather"]
            return []

        for layer in range(first, first + count):
            L = f"L{layer}"
            for name, node_op in (moe_ops if model.is_moe_layer(layer) else dense_ops):
                last = builder.add(f"{L}.{name}", node_op, deps=(last,), phase="forward", layer=layer)
        if s == nstages - 1:
            last = builder.add("head.norm", elementwise("head.norm", norm_bytes), deps=(last,), phase="forward")
            head = site("ag_mm", "lm_head", tokens, h, vocab // tp)
            last = builder.add("head.lm_head", head, deps=(last,), phase="forward")
            logits = tokens * (vocab // tp) * 4
            last = builder.add("head.loss", elementwise("head.cross_entropy", 3 * logits), deps=(last,),
                               phase="forward")
            last = builder.add("head.loss_allreduce", comm("head.loss_allreduce", "all_reduce", 2 * tokens * 4,
                                                           "tp", ranks), deps=(last,), phase="forward")
            # backward of the head
            last = builder.add("head.loss.grad", elementwise("head.cross_entropy.grad", 2 * logits), deps=(last,),
                               phase="backward")
            last = _backward_linear(builder, head, "head.lm_head", last, layer=None, gemm=gemm, tokens=tokens)
        else:
            last = builder.add("pp.send_activation", comm("pp.send_activation", "send_recv", shard_act, "pp",
                                                          (ranks[0], group(s + 1)[0])), deps=(last,),
                               phase="forward")
            last = builder.add("pp.recv_grad", comm("pp.recv_grad", "send_recv", shard_act, "pp",
                                                    (group(s + 1)[0], ranks[0])), deps=(last,), phase="backward")
        for layer in reversed(range(first, first + count)):
            L = f"L{layer}"
            moe_layer = model.is_moe_layer(layer)
            for name, node_op in recompute_ops_of(moe_ops if moe_layer else dense_ops):
                last = builder.add(f"{L}.recompute.{name}", node_op, deps=(last,), phase="backward", layer=layer)
            if moe_layer:
                for name, node_op in moe.backward:
                    last = builder.add(f"{L}.{name}", node_op, deps=(last,), phase="backward", layer=layer)
            else:
                last = _backward_linear(builder, layer_sites["mlp.down"], f"{L}.mlp.down", last, layer=layer,
                                        gemm=gemm, tokens=tokens)
                last = builder.add(f"{L}.mlp.act.grad", elementwise("mlp.act.grad", 1.5 * tokens * (
                    model.intermediate_size // tp) * item * (model.mlp_up_matrices + 1)), deps=(last,),
                    phase="backward", layer=layer)
                last = _backward_linear(builder, layer_sites["mlp.up"], f"{L}.mlp.up", last, layer=layer,
                                        gemm=gemm, tokens=tokens)
            last = builder.add(f"{L}.norm2.grad", elementwise("norm2.grad", 3 * norm_bytes), deps=(last,),
                               phase="backward", layer=layer)
            last = _backward_linear(builder, layer_sites["attn.out"], f"{L}.attn.out", last, layer=layer, gemm=gemm,
                                    tokens=tokens)
            last = builder.add(f"{L}.attn.core.grad", ComputeOp(
                name="attn.core.grad", kind="attention", flops=ATTENTION_BACKWARD_FACTOR * attention_flops,
                nbytes=2 * attention_bytes, dtype=dtype), deps=(last,), phase="backward", layer=layer)
            if cp > 1:
                last = builder.add(f"{L}.attn.cp_kv_reduce_scatter", comm(
                    "attn.cp_kv_reduce_scatter", "reduce_scatter", cp_kv_bytes, "cp", cp_ranks), deps=(last,),
                    phase="backward", layer=layer)
            if qkv_up is not None:
                last = builder.add(f"{L}.attn.qkv_up.grad", ComputeOp(
                    name="attn.qkv_up.grad", kind="gemm", flops=2 * qkv_up.flops, nbytes=2 * qkv_up.nbytes,
                    dtype=dtype), deps=(last,), phase="backward", layer=layer)
            last = _backward_linear(builder, layer_sites["attn.qkv"], f"{L}.attn.qkv", last, layer=layer, gemm=gemm,
                                    tokens=tokens)
            last = builder.add(f"{L}.norm1.grad", elementwise("norm1.grad", 3 * norm_bytes), deps=(last,),
                               phase="backward", layer=layer)
        if s == 0:
            last = builder.add("embed.all_gather_grad", comm("embed.all_gather_grad", "all_gather", tokens * h * item,
                                                             "tp", ranks), deps=(last,), phase="backward")
            builder.add("embed.grad", elementwise("embed.grad", 2 * tokens * h * item), deps=(last,),
                        phase="backward")
        else:
            builder.add("pp.send_grad", comm("pp.send_grad", "send_recv", shard_act, "pp",
                                             (ranks[0], group(s - 1)[0])), deps=(last,), phase="backward")
        moe_count = model.moe_layers_in(first, count)
        dense_count = count - moe_count
        params = (dense_count * model.dense_layer_params() + moe_count * model.moe_shared_params()) // tp
        expert_params = moe_count * (model.num_experts // ep) * model.expert_params()
        if s == 0:
            params += vocab * h // tp
        if s == nstages - 1 and not (model.tie_word_embeddings and nstages == 1):
            params += vocab * h // tp + h
        step = _Stage()
        if rdp > 1:
            grad_bytes = params * DTYPE_BYTES[grad_dtype]
            if dp_sync == "reduce_scatter":
                g = step.add("dp.grad_reduce_scatter", comm("dp.grad_reduce_scatter", "reduce_scatter", grad_bytes,
                                                            "dp", dp_ranks), phase="step")
                step.add("dp.param_all_gather", comm("dp.param_all_gather", "all_gather", params * item, "dp",
                                                     dp_ranks), deps=(g,), phase="step")
            else:
                step.add("dp.grad_all_reduce", comm("dp.grad_all_reduce", "all_reduce", grad_bytes, "dp", dp_ranks),
                         phase="step")
        if expert_params and len(edp_ranks) > 1:
            grad_bytes = expert_params * DTYPE_BYTES[grad_dtype]
            if dp_sync == "reduce_scatter":
                g = step.add("dp.expert_grad_reduce_scatter", comm(
                    "dp.expert_grad_reduce_scatter", "reduce_scatter", grad_bytes, "dp", edp_ranks), phase="step")
                step.add("dp.expert_param_all_gather", comm("dp.expert_param_all_gather", "all_gather",
                                                            expert_params * item, "dp", edp_ranks), deps=(g,),
                         phase="step")
            else:
                step.add("dp.expert_grad_all_reduce", comm("dp.expert_grad_all_reduce", "all_reduce", grad_bytes,
                                                           "dp", edp_ranks), phase="step")
        out_stages.append(PipelineStage(index=s, first_layer=first, layers=count, ranks=ranks, dp_ranks=dp_ranks,
                                        nodes=tuple(builder.nodes), step_nodes=tuple(step.nodes),
                                        params=params + expert_params,
                                        has_embedding=s == 0, has_head=s == nstages - 1))
        first += count
    notes = []
    if model.vocab_size != vocab:
        notes.append(f"vocabulary padded from {model.vocab_size} to {vocab} (multiple of 128*tp)")
    if model.is_moe and ep == 1:
        notes.append(f"ep=1: all {model.num_experts} experts of {model.name} are local to every rank; their GEMMs "
                     f"are priced as plain GEMMs (no all-to-all sites)")
    return StepGraph(model=model, tp=tp, pp=pp, dp=dp, seq=seq, batch=batch, micro_batches=micro, dtype=dtype,
                     stages=tuple(out_stages), notes=tuple(notes), cp=cp, recompute=recompute, virtual=virtual,
                     schedule="1f1b" if virtual == 1 else "interleaved", ep=ep)


def _layer_sites(model: ModelSpec, tp: int, tokens: int, site) -> dict[str, Site]:
    h = model.hidden_size
    if model.is_mla:  # the down-projections (weights replicated over tp) read the gathered sequence
        down = (model.q_lora_rank or 0) + model.kv_lora_rank + model.qk_rope_head_dim
        qkv = site("ag_mm", "attn.qkv", tokens, h, down + (0 if model.q_lora_rank else model.q_size // tp))
    else:
        qkv = site("ag_mm", "attn.qkv", tokens, h, (model.q_size + 2 * model.kv_size) // tp)
    out = {"attn.qkv": qkv, "attn.out": site("mm_rs", "attn.out", tokens, model.attn_out_size // tp, h)}
    if model.dense_layers:
        out["mlp.up"] = site("ag_mm", "mlp.up", tokens, h, model.intermediate_size // tp, model.mlp_up_matrices)
        out["mlp.down"] = site("mm_rs", "mlp.down", tokens, model.intermediate_size // tp, h)
    return out


def _mla_up_gemm(model: ModelSpec, tp: int, tokens: int, dtype: str) -> ComputeOp | None:
    """MLA's up-projections (query from ``q_lora_rank``, keys and values from ``kv_lora_rank``), split over tp by
    heads, as one GEMM op of their summed FLOPs and traffic; None for other attention."""
    if not model.is_mla:
        return None
    heads = model.num_attention_heads // tp
    kv_n = heads * (model.qk_nope_head_dim + model.v_head_dim)
    q_k, q_n = model.q_lora_rank or 0, heads * model.head_size
    flops = 2.0 * tokens * (model.kv_lora_rank * kv_n + q_k * q_n)
    elements = tokens * (model.kv_lora_rank + q_k) + model.kv_lora_rank * kv_n + q_k * q_n + tokens * (kv_n + q_n)
    return ComputeOp(name="attn.qkv_up", kind="gemm", flops=flops, nbytes=elements * DTYPE_BYTES[dtype], dtype=dtype)


class _MoeOps:
    """The nodes of one MoE layer's expert block on one rank (module docstring): ``forward`` and ``backward``
    lists of (name, op)."""

    def __init__(self, model: ModelSpec, *, tp: int, tokens: int, ep: int, dtype: str, micro: int,
                 ranks: tuple[int, ...], gemm, elementwise, zipf: float = 0.0) -> None:
        h, ffn, k = model.hidden_size, model.expert_ffn, model.num_experts_per_tok
        shard = tokens // tp
        rows = shard * k
        item = DTYPE_BYTES[dtype]
        u = model.mlp_up_matrices
        router = gemm("moe.router", shard, h, model.num_experts)
        act = elementwise("moe.act", rows * ffn * item * (u + 1) + shard * model.shared_ffn * item * (u + 1))
        act_grad = elementwise("moe.act.grad", 1.5 * act.nbytes)
        router_grad = ComputeOp(name="moe.router.grad", kind="gemm", flops=2 * router.flops, nbytes=2 * router.nbytes,
                                dtype=dtype)
        if ep > 1:
            counts = zipf_counts(shard, k, model.num_experts, ep, s=zipf) if zipf > 0 else ()
            common = dict(tokens=shard, hidden=h, ffn=ffn, experts=model.num_experts, topk=k, world=ep, dtype=dtype,
                          ranks=ranks, count=micro, counts=counts)
            up = MoeSite(kind="a2a_mm", shared_ffn=model.shared_ffn, name="moe.experts.up", **common)
            down = MoeSite(kind="mm_a2a", name="moe.experts.down", **common)
            down_grad = MoeSite(kind="mm_a2a", direction="backward", shared_ffn=model.shared_ffn,
                                name="moe.experts.down.grad", **common)
            up_grad = MoeSite(kind="a2a_mm", direction="backward", name="moe.experts.up.grad", **common)
            self.forward = [("moe.router", router), ("moe.experts.up", up), ("moe.act", act),
                            ("moe.experts.down", down)]
            self.backward = [("moe.experts.down.grad", down_grad), ("moe.act.grad", act_grad),
                             ("moe.experts.up.grad", up_grad), ("moe.router.grad", router_grad)]
            return
        up = gemm("moe.experts.up", rows, h, u * ffn)
        down = gemm("moe.experts.down", rows, ffn, h)
        self.forward = [("moe.router", router), ("moe.experts.up", up)]
        if model.shared_ffn:
            shared = gemm("moe.shared", shard, h, (u + 1) * model.shared_ffn)
            self.forward.append(("moe.shared", shared))
        self.forward += [("moe.act", act), ("moe.experts.down", down)]

        def grad(op: ComputeOp) -> ComputeOp:  # input and weight gradients: twice the forward GEMM
            return ComputeOp(name=f"{op.name}.grad", kind="gemm", flops=2 * op.flops, nbytes=2 * op.nbytes,
                             dtype=dtype)

        self.backward = [("moe.experts.down.grad", grad(down)), ("moe.act.grad", act_grad),
                         ("moe.experts.up.grad", grad(up))]
        if model.shared_ffn:
            self.backward.append(("moe.shared.grad", grad(shared)))
        self.backward.append(("moe.router.grad", router_grad))


def input_grad_site(site: Site) -> Site:
    """``Site.backward_sites()[0]``: for a multi-B ag_mm its k already covers every B
    (the input gradient of gate+up is one matmul over their concatenated outputs)."""
    return site.backward_sites()[0]


def _backward_linear(builder: _Stage, site: Site, name: str, last, *, layer, gemm, tokens: int) -> int:
    """Input-gradient Site, then the weight-gradient GEMM (it needs the gathered operand)."""
    grad = input_grad_site(site)
    grad_id = builder.add(f"{name}.grad_input", grad, deps=(last,), phase="backward", layer=layer)
    # weight gradient dW[k, n] = A^T[k, T] @ dC[T, n] for every B (A gathered or saved by the forward)
    builder.add(f"{name}.grad_weight", gemm(f"{site.name}.grad_weight", site.k, tokens, site.n * site.num_b),
                deps=(grad_id,), phase="backward", layer=layer)
    return grad_id

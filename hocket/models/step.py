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

from hocket.core.site import DTYPE_BYTES, Site, canonical_dtype
from hocket.models.catalog import load_model
from hocket.models.graph import CommOp, ComputeOp, PipelineStage, StepGraph, StepNode
from hocket.models.partition import balance_layers, check_stage_layers
from hocket.models.spec import ModelSpec

ATTENTION_BACKWARD_FACTOR = 2.5
DP_SYNC = ("reduce_scatter", "all_reduce")
RECOMPUTE = ("none", "selective", "full")
SELECTIVE_RECOMPUTE = ("attn.core", "mlp.act")
"""the forward nodes selective recomputation re-runs before a layer's backward."""


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int")
    return value


def check_degrees(model: ModelSpec, tp: int, pp: int, dp: int) -> None:
    """Raise naming the model quantity a parallel degree does not divide."""
    for name, value in (("tp", tp), ("pp", pp), ("dp", dp)):
        _positive(name, value)
    for what, size in (("num_attention_heads", model.num_attention_heads),
                       ("num_key_value_heads", model.num_key_value_heads),
                       ("hidden_size", model.hidden_size), ("intermediate_size", model.intermediate_size)):
        if size % tp:
            divisors = [d for d in range(1, min(size, 64) + 1) if size % d == 0 and d <= 64]
            raise ValueError(f"tp={tp} does not divide {what}={size} of {model.name!r}; tensor parallelism "
                             f"splits it evenly: use tp in {divisors[-6:]}")
    if pp > model.num_hidden_layers:
        raise ValueError(f"pp={pp} exceeds num_hidden_layers={model.num_hidden_layers} of {model.name!r}; "
                         f"every stage needs at least one layer")


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
                     recompute: str = "none", virtual: int = 1) -> StepGraph:
    """The StepGraph of one training step (see the module docstring).

    ``batch``: sequences per micro-batch; ``micro_batches``: per step and DP replica
    (default ``pp``); ``stages``: layers per pipeline stage (a list), ``"auto"`` (balanced by
    device speed when ``cluster`` is given, counting the embedding and LM head), or None
    (= auto). ``cluster``: when given, ``tp * cp * pp * dp`` must equal its world size.
    ``cp``: context-parallel degree (must divide ``seq``); ``recompute``: one of ``RECOMPUTE``.
    ``virtual``: virtual stages per pipeline rank (interleaved 1F1B): the graph then holds ``pp * virtual``
    stages, virtual stage ``j`` on the ranks of pipeline stage ``j % pp`` (``stages`` lists ``pp * virtual``
    layer counts).
    """
    model = load_model(model)
    check_degrees(model, tp, pp, dp)
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
    layer_flops = 6.0 * tokens * model.layer_params() / tp
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

        shard_act = tokens // tp * h * item if tokens >= tp else h * item
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
        attention_flops = 4.0 * tokens * seq * model.head_size * (model.num_attention_heads // tp)
        attention_flops *= 0.5 if causal else 1.0
        attention_bytes = tokens * (2 * model.q_size + 2 * model.kv_size) // tp * item
        norm_bytes = 2 * tokens // tp * h * item + h * item
        cp_kv_bytes = 2 * batch * seq * (model.kv_size // tp) * item
        forward_ops = [("norm1", elementwise("norm1", norm_bytes)),
                       ("attn.qkv", layer_sites["attn.qkv"])]
        if cp > 1:
            forward_ops.append(("attn.cp_kv_all_gather", comm("attn.cp_kv_all_gather", "all_gather", cp_kv_bytes,
                                                              "cp", cp_ranks)))
        forward_ops += [("attn.core", ComputeOp(name="attn.core", kind="attention", flops=attention_flops,
                                                nbytes=attention_bytes, dtype=dtype)),
                        ("attn.out", layer_sites["attn.out"]),
                        ("norm2", elementwise("residual+norm2", 2 * norm_bytes)),
                        ("mlp.up", layer_sites["mlp.up"]),
                        ("mlp.act", elementwise("mlp.act", tokens * (model.intermediate_size // tp) * item
                                                * (model.mlp_up_matrices + 1))),
                        ("mlp.down", layer_sites["mlp.down"]),
                        ("residual", elementwise("residual", 3 * tokens // tp * h * item))]
        if recompute == "full":
            recompute_ops = forward_ops
        elif recompute == "selective":
            recompute_ops = [(n, o) for n, o in forward_ops if n in SELECTIVE_RECOMPUTE or n == "attn.cp_kv_all_gather"]
        else:
            recompute_ops = []
        for layer in range(first, first + count):
            L = f"L{layer}"
            for name, node_op in forward_ops:
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
            for name, node_op in recompute_ops:
                last = builder.add(f"{L}.recompute.{name}", node_op, deps=(last,), phase="backward", layer=layer)
            last = _backward_linear(builder, layer_sites["mlp.down"], f"{L}.mlp.down", last, layer=layer, gemm=gemm,
                                    tokens=tokens)
            last = builder.add(f"{L}.mlp.act.grad", elementwise("mlp.act.grad", 1.5 * tokens * (
                model.intermediate_size // tp) * item * (model.mlp_up_matrices + 1)), deps=(last,),
                phase="backward", layer=layer)
            last = _backward_linear(builder, layer_sites["mlp.up"], f"{L}.mlp.up", last, layer=layer, gemm=gemm,
                                    tokens=tokens)
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
        params = count * model.layer_params() // tp
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
        out_stages.append(PipelineStage(index=s, first_layer=first, layers=count, ranks=ranks, dp_ranks=dp_ranks,
                                        nodes=tuple(builder.nodes), step_nodes=tuple(step.nodes), params=params,
                                        has_embedding=s == 0, has_head=s == nstages - 1))
        first += count
    notes = []
    if model.vocab_size != vocab:
        notes.append(f"vocabulary padded from {model.vocab_size} to {vocab} (multiple of 128*tp)")
    if tokens % tp:
        notes.append(f"batch*seq={tokens} is not a multiple of tp={tp}: sequence shards are uneven")
    return StepGraph(model=model, tp=tp, pp=pp, dp=dp, seq=seq, batch=batch, micro_batches=micro, dtype=dtype,
                     stages=tuple(out_stages), notes=tuple(notes), cp=cp, recompute=recompute, virtual=virtual,
                     schedule="1f1b" if virtual == 1 else "interleaved")


def _layer_sites(model: ModelSpec, tp: int, tokens: int, site) -> dict[str, Site]:
    h = model.hidden_size
    return {
        "attn.qkv": site("ag_mm", "attn.qkv", tokens, h, (model.q_size + 2 * model.kv_size) // tp),
        "attn.out": site("mm_rs", "attn.out", tokens, model.q_size // tp, h),
        "mlp.up": site("ag_mm", "mlp.up", tokens, h, model.intermediate_size // tp, model.mlp_up_matrices),
        "mlp.down": site("mm_rs", "mlp.down", tokens, model.intermediate_size // tp, h),
    }


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

"""Device memory of one rank of a parallel training configuration, per pipeline stage.

All figures are bytes on one rank. ``P`` is the parameters the rank's stage holds after tensor
parallelism (``hocket.search.memory.stage_params``), ``d = dp * cp`` the ranks that hold the same
weights (the sharding group), ``T = micro_batch * seq / cp`` the tokens of one micro-batch on the rank.

Model states (bf16 weights, fp32 gradient accumulation, Adam with fp32 master weights; the table of
Megatron-LM's distributed-optimizer documentation: 18 bytes per parameter, 6 + 12/d sharded):

    replicated        2P + 4P + 12P             = 18 P
    optimizer         2P + 4P + 12P / d         (ZeRO-1 / Megatron --use-distributed-optimizer)
    gradients         2P + (4P + 12P) / d       (ZeRO-2; FSDP with reshard_after_forward=False: the bf16
                                                  weights gathered once per step and kept whole through
                                                  the last backward, the fp32 gradient accumulator and the
                                                  fp32 master weights + Adam moments sharded)
    full              (2P + 4P + 12P) / d       + the two layers of gathered bf16 weights in flight
                                                  (FSDP / ZeRO-3 prefetch: 2 * 2 * layer_params / tp)

Under ``gradients`` each micro-batch's gradients are reduce-scattered into the sharded fp32 accumulator
during its backward (``hocket.search.run``), staged through the gradient bucket below, as under
``optimizer``; no unsharded gradient outlives a micro-batch.

Activations kept for the backward, per layer and token, tensor- and sequence-parallel so every tensor
is divided by ``tp`` (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", Table 2, with a flash-attention core: no ``s^2`` score or dropout-mask terms):

    none       item * (4h + 2q + 2kv + (u + 1) * f) / tp      (norm inputs 2h, GEMM inputs 2h, Q/K/V
                                                               q + 2kv, attention output q, MLP up
                                                               outputs u*f and activation output f)
    selective  item * (4h + q + 2kv + u * f) / tp             (attention output and MLP activation
                                                               recomputed)
    full       item * h / tp                                  (the layer input only), plus one layer's
                                                               ``none`` activations while it is recomputed

with ``h`` hidden, ``q``/``kv`` the query/key-value widths, ``f`` the FFN width, ``u`` its up matrices
(2 for SwiGLU) and ``item`` the activation dtype's bytes. A stage keeps the activations of the
micro-batches in flight under its schedule: ``min(pp - s, m)`` under 1F1B; under interleaved 1F1B
device stage ``s`` keeps ``min(2 (pp - s - 1) + (v - 1) pp + 1, m v)`` virtual-stage micro-batches of
``L_s / v`` layers each (its warm-up forwards plus one, ``hocket.sim.schedule_1f1b``). The last stage also keeps
the final norm's input and the LM head's input of its one micro-batch in flight (``2 * item * T * h / tp``: the
paper's output-layer ``4sbh/t``). The models have no dropout, so the paper's dropout masks (``2sbh`` per layer, the
embedding's ``sbhp/t`` on the first stage) are left out; the embedding's output is layer 0's input, counted there.

MoE layers (``hocket.models.step``): a rank holds ``E / ep`` routed experts whole (``P_e``), sharded under
``optimizer`` / ``gradients`` / ``full`` over the ``d_e = tp * cp * dp / ep`` ranks holding the same experts (the
terms the table above shards at each level), and the rest of the layer (attention, router, shared experts) as
``P`` above (the router and shared experts divided by ``tp`` too: an approximation, they run whole on each
rank's token shard). Their activations replace the MLP terms by
``k * (2h + (u + 1) * f_e) / tp + (u + 1) * f_s / tp`` per token (``k`` experts per token of width ``f_e``: the
dispatched input, the expert output before the combine, the up outputs and activation; shared experts ``f_s``
wide), ``k * (2h + u * f_e) / tp + u * f_s / tp`` under ``selective``; the all-to-all buffers of one layer
(send and receive, ``2 * item * k * T * h / tp``) are a communication buffer.

Uneven tensor-parallel shards (the ``mixed_tp`` grouping, ``hocket.search.space``): a rank holding the share
``a`` of the attention block's heads, ``m`` of the MLP's FFN columns and ``e`` of the LM head's vocabulary columns
(each relative to the even share, so 1 is even and the shares of a group add up to ``tp``) holds
``(a * A + m * M + norms) / tp`` parameters per layer (``A`` attention, ``M`` MLP weights), the LM head's
``e * V h / tp`` (the input embedding stays even: its lookup is not sized), and keeps per token and layer
``item * (4h + a (2q + 2kv) + m (u + 1) f) / tp`` (``none``), ``item * (4h + a (q + 2kv) + m u f) / tp``
(``selective``): the sequence-parallel norm and GEMM inputs stay even, the head- and FFN-wide tensors follow the
shares; its logits buffer is ``e`` times the even one.

Transient and communication buffers: the last stage's fp32 logits and their gradient
(``2 * 4 * T * V / tp``); the double-buffered TP all-gather of a GEMM input (``2 * item * T * h``,
the gathered sequence); with ``cp > 1`` the gathered K and V of one layer (``2 * item * cp * T * kv /
tp``); with ``d > 1`` a gradient bucket of ``max(40e6, 1e6 * d)`` fp32 values (Megatron-LM's DDP
default bucket). A fixed ``RESERVED_BYTES`` per device stands for the CUDA context, NCCL's own buffers
and allocator fragmentation (an assumption, not a measurement). The overlap plans' extra workspace
(``hocket.strategies`` memory estimates, at most a quarter of the device by the space's budget) is not
added: the plans were searched inside that budget already.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
RESERVED_BYTES = 3 * GIB
"""CUDA context, NCCL buffers and fragmentation per device (assumed)."""
SHARDING = ("replicated", "optimizer", "gradients", "full")
"""data-parallel sharding levels, least sharded first (module docstring)."""
RECOMPUTE = ("none", "selective", "full")
WEIGHT_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 4, 12
"""bf16 weights; fp32 gradients; fp32 master weights + Adam m and v."""


@dataclass(frozen=True, kw_only=True)
class Memory:
    """One rank's memory (bytes) by component, and the device limit it is checked against."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    buffers: float
    limit: float
    """usable bytes: the device's memory minus RESERVED_BYTES."""
    device: str = ""

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.buffers

    @property
    def fits(self) -> bool:
        return self.total <= self.limit

    def binding(self) -> str:
        """The largest component (what to shrink first)."""
        parts = {"weights": self.weights, "grads": self.grads, "optimizer": self.optimizer,
                 "activations": self.activations, "buffers": self.buffers}
        return max(parts, key=lambda k: parts[k])

    def describe(self) -> str:
        parts = ", ".join(f"{k} {getattr(self, k) / GIB:.1f}" for k in
                          ("weights", "grads", "optimizer", "activations", "buffers"))
        return f"{self.total / GIB:.1f} GiB ({parts}) of {self.limit / GIB:.1f} GiB usable on {self.device}"

    def to_dict(self) -> dict:
        return {"total_gib": self.total / GIB, "limit_gib": self.limit / GIB, "device": self.device,
                **{f"{k}_gib": getattr(self, k) / GIB for k in ("weights", "grads", "optimizer", "activations",
                                                                  "buffers")}}


def stage_moe_layers(model, *, layers: int, first_layer: int | None) -> int:
    """MoE layers among a stage's ``layers`` starting at ``first_layer`` (None: the model's share of them)."""
    if not model.is_moe:
        return 0
    if first_layer is None:
        return round(layers * model.moe_layers / model.num_hidden_layers)
    return model.moe_layers_in(first_layer, layers)


EVEN = (1.0, 1.0, 1.0)
"""Even shares (attention, MLP, LM head) of a tensor-parallel rank (module docstring)."""


def stage_param_split(model, *, tp: int, layers: int, first: bool, last: bool, pp: int,
                      first_layer: int | None = None, ep: int = 1,
                      shares: tuple[float, float, float] = EVEN) -> tuple[float, float]:
    """(parameters sharded like a dense model's, routed-expert parameters) one rank of a stage holds: its dense
    layers and the non-expert parts of its MoE layers / tp, the vocab-parallel embedding on the first stage, the
    LM head and final norm on the last (one matrix when tied and pp == 1); ``E / ep`` experts per MoE layer.
    ``shares``: the rank's uneven (attention, MLP, LM head) shares of a dense model (module docstring)."""
    vocab = model.padded_vocab(tp)
    moe = stage_moe_layers(model, layers=layers, first_layer=first_layer)
    attn, mlp, head = shares
    if model.is_moe:
        params = ((layers - moe) * model.dense_layer_params() + moe * model.moe_shared_params()) / tp
    elif shares == EVEN:
        params = layers * model.layer_params() / tp
    else:
        per_layer = model.layer_params()
        attention = model.attention_params()
        ffn = model.hidden_size * model.intermediate_size * model.mlp_up_matrices + \
            model.intermediate_size * model.hidden_size
        params = layers * (attn * attention + mlp * ffn + (per_layer - attention - ffn)) / tp
    experts = moe * (model.num_experts // ep) * model.expert_params() if moe else 0.0
    if first:
        params += vocab * model.hidden_size / tp * (head if model.tie_word_embeddings and pp == 1 and last else 1.0)
    if last:
        params += model.hidden_size
        if not (model.tie_word_embeddings and pp == 1):
            params += head * vocab * model.hidden_size / tp
    return params, float(experts)


def stage_params(model, *, tp: int, layers: int, first: bool, last: bool, pp: int, first_layer: int | None = None,
                 ep: int = 1, shares: tuple[float, float, float] = EVEN) -> float:
    """Parameters one rank of a stage holds (:func:`stage_param_split`, both parts)."""
    dense, experts = stage_param_split(model, tp=tp, layers=layers, first=first, last=last, pp=pp,
                                       first_layer=first_layer, ep=ep, shares=shares)
    return dense + experts


def activation_bytes_per_token(model, *, tp: int, recompute: str, item: int = 2, moe: bool = False,
                               shares: tuple[float, float, float] = EVEN) -> float:
    """Bytes one layer keeps per token under ``recompute`` (module docstring; ``moe``: an MoE layer's;
    ``shares``: a rank's uneven attention and MLP shares)."""
    h, q, kv = model.hidden_size, model.q_size, model.kv_size
    f, u = model.intermediate_size, model.mlp_up_matrices
    attn, mlp = shares[0], shares[1]
    if moe:
        k, fe, fs = model.num_experts_per_tok, model.expert_ffn, model.shared_ffn
        mlp_none, mlp_selective = k * (2 * h + (u + 1) * fe) + (u + 1) * fs, k * (2 * h + u * fe) + u * fs
    else:
        mlp_none, mlp_selective = mlp * (u + 1) * f, mlp * u * f
    if recompute == "none":
        return item * (4 * h + attn * (2 * q + 2 * kv) + mlp_none) / tp
    if recompute == "selective":
        return item * (4 * h + attn * (q + 2 * kv) + mlp_selective) / tp
    if recompute == "full":
        return item * h / tp
    raise ValueError(f"recompute={recompute!r} must be one of {RECOMPUTE}")


def in_flight(*, pp: int, stage: int, micro_batches: int, virtual: int = 1) -> float:
    """Layer-fractions of micro-batches a stage keeps: in units of ``L_s`` layers times micro-batches."""
    if virtual == 1:
        return float(min(pp - stage, micro_batches))
    chunks = min(2 * (pp - stage - 1) + (virtual - 1) * pp + 1, micro_batches * virtual)
    return chunks / virtual


def stage_memory(model, *, tp: int, cp: int, dp: int, pp: int, stage: int, layers: int, seq: int,
                 micro_batch: int, micro_batches: int, sharding: str, recompute: str, virtual: int = 1,
                 device_bytes: float, device: str = "", item: int = 2, ep: int = 1,
                 first_layer: int | None = None, shares: tuple[float, float, float] = EVEN) -> Memory:
    """One rank's memory on pipeline stage ``stage`` (module docstring for every term); ``first_layer``: the
    stage's first layer (MoE models; None: the stage holds its share of the MoE layers); ``shares``: the rank's
    uneven (attention, MLP, LM head) shares under ``mixed_tp`` (dense models)."""
    if sharding not in SHARDING:
        raise ValueError(f"sharding={sharding!r} must be one of {SHARDING}")
    shares = tuple(float(x) for x in shares)
    if len(shares) != 3 or any(not x >= 0 for x in shares) or (shares != EVEN and model.is_moe):
        raise ValueError(f"shares={shares!r} must be three shares >= 0 (attention, MLP, LM head; 1 = even), and "
                         f"even for an MoE model")
    first, last = stage == 0, stage == pp - 1
    params, experts = stage_param_split(model, tp=tp, layers=layers, first=first, last=last, pp=pp,
                                        first_layer=first_layer, ep=ep, shares=shares)
    d = dp * cp
    d_e = max(1, tp * cp * dp // ep)
    weights = WEIGHT_BYTES * (params + experts)
    grads = GRAD_BYTES * (params + experts)
    optimizer = OPTIMIZER_BYTES * (params + experts)
    buffers = 0.0
    if sharding != "replicated":
        optimizer = OPTIMIZER_BYTES * (params / d + experts / d_e)
    if sharding in ("gradients", "full"):
        grads = GRAD_BYTES * (params / d + experts / d_e)
    if sharding == "full":
        weights = WEIGHT_BYTES * (params / d + experts / d_e)
        if model.is_moe:
            gathered = model.moe_shared_params() / tp + model.num_experts // ep * model.expert_params()
        else:
            gathered = stage_params(model, tp=tp, layers=1, first=False, last=False, pp=pp, shares=shares)
        buffers += 2 * WEIGHT_BYTES * gathered
    tokens = micro_batch * seq / cp
    moe = stage_moe_layers(model, layers=layers, first_layer=first_layer)
    kept = tokens * in_flight(pp=pp, stage=stage, micro_batches=micro_batches, virtual=virtual)
    activations = kept * ((layers - moe) * activation_bytes_per_token(model, tp=tp, recompute=recompute, item=item,
                                                                      shares=shares)
                          + moe * activation_bytes_per_token(model, tp=tp, recompute=recompute, item=item, moe=True))
    if recompute == "full":
        activations += activation_bytes_per_token(model, tp=tp, recompute="none", item=item, moe=moe > 0,
                                                  shares=shares) * tokens
    if moe:
        buffers += 2 * item * model.num_experts_per_tok * tokens * model.hidden_size / tp
    if last:
        activations += 2 * item * tokens * model.hidden_size / tp
        buffers += 2 * 4 * tokens * model.padded_vocab(tp) / tp * shares[2]
    if tp > 1:
        buffers += 2 * item * tokens * model.hidden_size
    if cp > 1:
        buffers += 2 * item * cp * tokens * model.kv_size / tp
    if d > 1:
        buffers += 4 * max(40e6, 1e6 * d)
    return Memory(weights=weights, grads=grads, optimizer=optimizer, activations=activations, buffers=buffers,
                  limit=device_bytes - RESERVED_BYTES, device=device)

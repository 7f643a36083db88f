"""ModelSpec: the shape facts of a decoder-only transformer that its Sites depend on.

Mixture-of-Experts models (``num_experts > 0``): every layer from ``first_k_dense_replace`` on replaces its MLP
with ``num_experts`` routed experts (each a gated MLP ``moe_intermediate_size`` wide, or ``intermediate_size``
when that is not given, as in Mixtral), of which the router picks ``num_experts_per_tok`` per token, plus
``n_shared_experts`` shared experts of the same width that every token passes through (DeepSeek's; their widths
add up to one MLP ``n_shared_experts * moe_intermediate_size`` wide), and a router (``hidden x num_experts``).
The first ``first_k_dense_replace`` layers keep a dense MLP ``intermediate_size`` wide.

Multi-head latent attention (MLA, DeepSeek-V2/V3; ``kv_lora_rank`` given): queries come from a down-projection to
``q_lora_rank`` (none: directly from ``hidden``) and an up-projection to ``heads x (qk_nope_head_dim +
qk_rope_head_dim)``; keys and values from one down-projection to ``kv_lora_rank + qk_rope_head_dim`` and an
up-projection to ``heads x (qk_nope_head_dim + v_head_dim)``; the output projection is ``heads x v_head_dim ->
hidden``. ``q_size`` is then the query width ``heads x (nope + rope)``, ``kv_size`` the mean of the key and value
widths, ``v_size`` the value width.
"""

from __future__ import annotations

from dataclasses import dataclass

MLP_KINDS = ("gated", "plain")
"""gated: SwiGLU-style gate and up projections (two B matrices); plain: one up projection."""
NORM_KINDS = ("rmsnorm", "layernorm")
FIELD_UNITS = {
    "hidden_size": "features", "intermediate_size": "features (FFN width)",
    "num_attention_heads": "heads", "num_key_value_heads": "KV heads", "num_hidden_layers": "layers",
    "vocab_size": "tokens", "head_dim": "features per head",
}
OPTIONAL_UNITS = {
    "num_experts": "routed experts per MoE layer", "num_experts_per_tok": "experts per token (top-k)",
    "moe_intermediate_size": "features (one expert's FFN width)", "n_shared_experts": "shared experts",
    "first_k_dense_replace": "leading dense layers", "q_lora_rank": "features (MLA query latent)",
    "kv_lora_rank": "features (MLA key-value latent)", "qk_nope_head_dim": "features per head (MLA, no RoPE)",
    "qk_rope_head_dim": "features per head (MLA, RoPE)", "v_head_dim": "features per head (MLA values)",
}
"""Fields that may be 0 / None (dense models, grouped-query attention)."""
MLA_HEAD_FIELDS = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Sizes use Hugging Face config names, so a ``config.json`` maps one to one (MoE and MLA: module docstring)."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    num_hidden_layers: int
    vocab_size: int
    head_dim: int | None = None
    """None: hidden_size / num_attention_heads."""
    mlp: str = "gated"
    norm: str = "rmsnorm"
    tie_word_embeddings: bool = False
    num_experts: int = 0
    """routed experts per MoE layer (0: a dense model). config.json: ``num_local_experts`` (Mixtral),
    ``num_experts`` (Qwen-MoE), ``n_routed_experts`` (DeepSeek)."""
    num_experts_per_tok: int = 0
    moe_intermediate_size: int | None = None
    """one expert's FFN width; None: ``intermediate_size`` (Mixtral's convention)."""
    n_shared_experts: int = 0
    first_k_dense_replace: int = 0
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    source: str = ""
    """where the figures came from (preset file or config path)."""

    def __post_init__(self) -> None:
        where = f"model {self.name!r}" + (f" ({self.source})" if self.source else "")
        for attr, unit in FIELD_UNITS.items():
            value = getattr(self, attr)
            if attr == "head_dim" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{where}: {attr}={value!r} must be a positive int ({unit})")
        for attr, unit in OPTIONAL_UNITS.items():
            value = getattr(self, attr)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{where}: {attr}={value!r} must be an int >= 0 ({unit}) or absent")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"{where}: num_key_value_heads={self.num_key_value_heads} must divide "
                             f"num_attention_heads={self.num_attention_heads} (grouped-query attention)")
        if self.head_dim is None and not self.is_mla and self.hidden_size % self.num_attention_heads:
            raise ValueError(f"{where}: hidden_size={self.hidden_size} is not a multiple of num_attention_heads="
                             f"{self.num_attention_heads}; give head_dim explicitly")
        if self.mlp not in MLP_KINDS:
            raise ValueError(f"{where}: mlp={self.mlp!r} must be one of {MLP_KINDS}")
        if self.norm not in NORM_KINDS:
            raise ValueError(f"{where}: norm={self.norm!r} must be one of {NORM_KINDS}")
        if self.num_experts:
            if not 1 <= self.num_experts_per_tok <= self.num_experts:
                raise ValueError(f"{where}: num_experts_per_tok={self.num_experts_per_tok} must be in 1.."
                                 f"{self.num_experts} (a token picks that many distinct experts of num_experts="
                                 f"{self.num_experts})")
            if self.first_k_dense_replace >= self.num_hidden_layers:
                raise ValueError(f"{where}: first_k_dense_replace={self.first_k_dense_replace} leaves no MoE layer "
                                 f"of num_hidden_layers={self.num_hidden_layers}; make it smaller")
            if self.moe_intermediate_size == 0:
                raise ValueError(f"{where}: moe_intermediate_size=0; give the expert FFN width or leave it out")
        else:
            extra = [a for a in ("num_experts_per_tok", "n_shared_experts", "first_k_dense_replace")
                     if getattr(self, a)] + (["moe_intermediate_size"] if self.moe_intermediate_size else [])
            if extra:
                raise ValueError(f"{where}: {extra} describe MoE layers but num_experts=0; give num_experts "
                                 f"(routed experts per layer) or drop them")
        mla = [getattr(self, a) for a in MLA_HEAD_FIELDS]
        if self.kv_lora_rank is not None:
            if self.kv_lora_rank < 1 or any(v is None or v < 1 for v in mla):
                raise ValueError(f"{where}: multi-head latent attention (kv_lora_rank={self.kv_lora_rank}) needs "
                                 f"kv_lora_rank >= 1 and positive {MLA_HEAD_FIELDS}, got {mla}")
        elif self.q_lora_rank is not None or any(v is not None for v in mla):
            raise ValueError(f"{where}: q_lora_rank and {MLA_HEAD_FIELDS} belong to multi-head latent attention; "
                             f"give kv_lora_rank too, or drop them")

    # -- derived sizes ----------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def head_size(self) -> int:
        """Query/key width per head (MLA: ``qk_nope_head_dim + qk_rope_head_dim``)."""
        if self.is_mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def v_head_size(self) -> int:
        return self.v_head_dim if self.is_mla else self.head_size

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_size

    @property
    def v_size(self) -> int:
        """Width of the values (and of the attention output) over all heads."""
        return (self.num_attention_heads if self.is_mla else self.num_key_value_heads) * self.v_head_size

    @property
    def kv_size(self) -> int:
        """Key (= value) width over the KV heads; MLA: the mean of the key and value widths."""
        if self.is_mla:
            return self.num_attention_heads * (self.head_size + self.v_head_size) // 2
        return self.num_key_value_heads * self.head_size

    @property
    def attn_out_size(self) -> int:
        """Input width of the attention output projection (heads x value width)."""
        return self.num_attention_heads * self.v_head_size

    @property
    def mlp_up_matrices(self) -> int:
        return 2 if self.mlp == "gated" else 1

    @property
    def expert_ffn(self) -> int:
        """One routed expert's FFN width."""
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def shared_ffn(self) -> int:
        """The shared experts' FFN width together (0: none)."""
        return self.n_shared_experts * self.expert_ffn if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        """Layers with a dense MLP (all of them for a dense model)."""
        return self.first_k_dense_replace if self.is_moe else self.num_hidden_layers

    @property
    def moe_layers(self) -> int:
        return self.num_hidden_layers - self.dense_layers

    def is_moe_layer(self, layer: int) -> bool:
        return self.is_moe and layer >= self.first_k_dense_replace

    def moe_layers_in(self, first: int, count: int) -> int:
        """MoE layers among layers ``first .. first + count - 1``."""
        if not self.is_moe:
            return 0
        return max(0, first + count - max(first, self.first_k_dense_replace))

    def tp_split_sizes(self) -> tuple[tuple[str, int], ...]:
        """(field, size) pairs tensor parallelism splits evenly: heads, KV heads, hidden, and the dense FFN width
        when a dense MLP exists (routed and shared experts run whole on each rank's token shard)."""
        out = [("num_attention_heads", self.num_attention_heads), ("num_key_value_heads", self.num_key_value_heads),
               ("hidden_size", self.hidden_size)]
        if self.dense_layers:
            out.append(("intermediate_size", self.intermediate_size))
        return tuple(out)

    def attention_params(self) -> int:
        h, heads = self.hidden_size, self.num_attention_heads
        if not self.is_mla:
            return h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        q = (h * self.q_lora_rank + self.q_lora_rank * self.q_size + self.q_lora_rank) if self.q_lora_rank \
            else h * self.q_size
        kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank \
            + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv + self.attn_out_size * h

    def expert_params(self) -> int:
        """One routed expert's weights."""
        return self.hidden_size * self.expert_ffn * (self.mlp_up_matrices + 1)

    def _norms(self) -> int:
        return 2 * self.hidden_size * (2 if self.norm == "layernorm" else 1)

    def dense_layer_params(self) -> int:
        """Weights of one layer with a dense MLP (attention, MLP, two norms)."""
        mlp = self.hidden_size * self.intermediate_size * (self.mlp_up_matrices + 1)
        return self.attention_params() + mlp + self._norms()

    def moe_shared_params(self) -> int:
        """The parts of one MoE layer outside the routed experts: attention, router, shared experts, norms."""
        shared = self.hidden_size * self.shared_ffn * (self.mlp_up_matrices + 1)
        return self.attention_params() + self.hidden_size * self.num_experts + shared + self._norms()

    def moe_layer_params(self) -> int:
        """Weights of one MoE layer (every routed expert included)."""
        return self.moe_shared_params() + self.num_experts * self.expert_params()

    def layer_params(self) -> int:
        """Weights of one transformer layer: of a dense model's layer; for an MoE model the mean over its layers
        (every routed expert counted)."""
        if not self.is_moe:
            return self.dense_layer_params()
        total = self.dense_layers * self.dense_layer_params() + self.moe_layers * self.moe_layer_params()
        return total // self.num_hidden_layers

    def active_layer_params(self) -> float:
        """Weights one token passes through per layer, the mean over layers (MoE: ``num_experts_per_tok``
        routed experts, the shared experts and the router; dense: ``layer_params``)."""
        if not self.is_moe:
            return float(self.dense_layer_params())
        moe = self.moe_shared_params() + self.num_experts_per_tok * self.expert_params()
        return (self.dense_layers * self.dense_layer_params() + self.moe_layers * moe) / self.num_hidden_layers

    def padded_vocab(self, tp: int) -> int:
        """Vocabulary padded to a multiple of 128 * tp (Megatron's vocab-parallel embedding)."""
        unit = 128 * tp
        return -(-self.vocab_size // unit) * unit

    def _edges(self) -> int:
        embed = self.vocab_size * self.hidden_size
        return embed * (1 if self.tie_word_embeddings else 2) + self.hidden_size

    def total_params(self) -> int:
        if not self.is_moe:
            return self.num_hidden_layers * self.dense_layer_params() + self._edges()
        return self.dense_layers * self.dense_layer_params() + self.moe_layers * self.moe_layer_params() \
            + self._edges()

    def active_params(self) -> float:
        """Weights one token passes through (every dense one; MoE layers: top-k routed experts)."""
        return self.num_hidden_layers * self.active_layer_params() + self._edges()

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

"""ModelSpec: the shape facts of a decoder-only transformer that its Sites depend on."""

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


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Sizes use Hugging Face config names, so a ``config.json`` maps one to one."""

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
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"{where}: num_key_value_heads={self.num_key_value_heads} must divide "
                             f"num_attention_heads={self.num_attention_heads} (grouped-query attention)")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(f"{where}: hidden_size={self.hidden_size} is not a multiple of num_attention_heads="
                             f"{self.num_attention_heads}; give head_dim explicitly")
        if self.mlp not in MLP_KINDS:
            raise ValueError(f"{where}: mlp={self.mlp!r} must be one of {MLP_KINDS}")
        if self.norm not in NORM_KINDS:
            raise ValueError(f"{where}: norm={self.norm!r} must be one of {NORM_KINDS}")

    # -- derived sizes ----------------------------------------------------------------
    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_size

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_size

    @property
    def mlp_up_matrices(self) -> int:
        return 2 if self.mlp == "gated" else 1

    def layer_params(self) -> int:
        """Weights of one transformer layer (attention, MLP, two norms)."""
        h = self.hidden_size
        attention = h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        mlp = h * self.intermediate_size * (self.mlp_up_matrices + 1)
        norms = 2 * h * (2 if self.norm == "layernorm" else 1)
        return attention + mlp + norms

    def padded_vocab(self, tp: int) -> int:
        """Vocabulary padded to a multiple of 128 * tp (Megatron's vocab-parallel embedding)."""
        unit = 128 * tp
        return -(-self.vocab_size // unit) * unit

    def total_params(self) -> int:
        embed = self.vocab_size * self.hidden_size
        return self.num_hidden_layers * self.layer_params() + embed * (1 if self.tie_word_embeddings else 2) \
            + self.hidden_size

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

"""Model presets (YAML under presets/) and Hugging Face ``config.json`` files."""

from __future__ import annotations

from pathlib import Path

from hocket.core.files import ConfigFileError, load_json_file, load_yaml_file
from hocket.models.spec import FIELD_UNITS, ModelSpec

_PRESETS = Path(__file__).with_name("presets")
HF_REQUIRED = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "vocab_size")
EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
"""config.json spellings of the routed-expert count (Mixtral, Qwen-MoE, DeepSeek), read into ``num_experts``."""
PLAIN_MLP_ACTIVATIONS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "relu", "quick_gelu")
"""``hidden_act`` values of configs whose MLP has one up projection (GPT-2/NeoX style);
SiLU/SwiGLU families (Llama, Mistral, Qwen) have gate and up projections."""


def list_models() -> list[str]:
    return sorted(p.stem for p in _PRESETS.glob("*.yaml"))


def _from_mapping(data: dict, *, where: str, name: str) -> ModelSpec:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: the top level must be a mapping of model fields, got {type(data).__name__}")
    for key in HF_REQUIRED:
        if key not in data:
            raise ValueError(f"{where}: field {key!r} is missing ({FIELD_UNITS[key]})")
    known = set(ModelSpec.__dataclass_fields__)
    fields = {k: v for k, v in data.items() if k in known}
    fields.setdefault("num_key_value_heads", data["num_attention_heads"])
    fields.setdefault("name", name)
    fields["source"] = where
    return ModelSpec(**fields)


def load_preset_model(name: str) -> ModelSpec:
    path = _PRESETS / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"model {name!r} is unknown; presets: {', '.join(list_models())} "
                         f"(or give the path of a Hugging Face config.json)")
    data = load_yaml_file(path, what="model preset")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the top level must be a mapping of model fields, got {type(data).__name__}")
    unknown = set(data) - set(ModelSpec.__dataclass_fields__)
    if unknown:
        raise ValueError(f"{path}: unknown fields {sorted(unknown)}; known: {sorted(ModelSpec.__dataclass_fields__)}")
    return _from_mapping(data, where=str(path), name=name)


def load_hf_config(path: str | Path) -> ModelSpec:
    """A Hugging Face style ``config.json`` (a file, or a directory holding one)."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise ValueError(f"model config {str(path)!r} does not exist; give a config.json or a preset "
                         f"({', '.join(list_models())})")
    try:
        data = load_json_file(path, what="model config.json")
    except ConfigFileError as exc:
        raise ValueError(f"model config {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"model config {str(path)}: the top level must be a JSON object")
    act = str(data.get("hidden_act", data.get("hidden_activation", "silu")))
    fields = {k: v for k, v in data.items() if k not in EXPERT_COUNT_KEYS}
    _moe_fields(data, fields, where=str(path))
    fields["mlp"] = "plain" if act in PLAIN_MLP_ACTIVATIONS else "gated"
    fields["norm"] = "layernorm" if "layer_norm_eps" in data and "rms_norm_eps" not in data else "rmsnorm"
    fields["tie_word_embeddings"] = bool(data.get("tie_word_embeddings", False))
    name = str(data.get("_name_or_path") or data.get("model_type") or path.parent.name or "hf-model")
    return _from_mapping(fields, where=str(path), name=name)


def _moe_fields(data: dict, fields: dict, *, where: str) -> None:
    """Read a config.json's MoE layout into ModelSpec's fields (``EXPERT_COUNT_KEYS``; Qwen2-MoE's
    ``shared_expert_intermediate_size``), refusing layouts the spec cannot hold (MoE every n-th layer)."""
    experts = [data[k] for k in EXPERT_COUNT_KEYS if data.get(k)]
    if not experts:
        for key in ("num_experts_per_tok", "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace"):
            fields.pop(key, None)
        return
    fields["num_experts"] = experts[0]
    step = data.get("decoder_sparse_step", 1)
    freq = data.get("moe_layer_freq", 1)
    if step not in (None, 1) or freq not in (None, 1) or data.get("mlp_only_layers"):
        raise ValueError(f"model config {where}: MoE layers that are not every layer from first_k_dense_replace "
                         f"on (decoder_sparse_step={step}, moe_layer_freq={freq}, mlp_only_layers="
                         f"{data.get('mlp_only_layers')}) are not supported; hocket.models holds a run of dense "
                         f"layers followed by MoE layers")
    shared = data.get("shared_expert_intermediate_size")
    if shared:
        width = data.get("moe_intermediate_size") or data["intermediate_size"]
        if shared % width:
            raise ValueError(f"model config {where}: shared_expert_intermediate_size={shared} is not a multiple "
                             f"of the expert width {width}; the spec holds shared experts as n_shared_experts "
                             f"experts of that width")
        fields["n_shared_experts"] = shared // width


def load_model(name_or_path: str | Path | ModelSpec) -> ModelSpec:
    """A preset name (``llama3-70b``), a ``config.json`` path, or a ModelSpec (returned as is)."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    if not isinstance(name_or_path, (str, Path)):
        raise TypeError(f"model={name_or_path!r} must be a preset name, a config.json path or a ModelSpec")
    text = str(name_or_path)
    if text in list_models():
        return load_preset_model(text)
    if text.endswith(".json") or Path(text).expanduser().is_dir() or "/" in text:
        return load_hf_config(text)
    return load_preset_model(text)

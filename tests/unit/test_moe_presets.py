"""The MoE model presets: their figures are the config.json values their YAML cites, their parameter counts are
the published ones, and a Hugging Face config.json with its own spellings loads to the same spec."""

from __future__ import annotations

import json

import pytest

from hocket.models import ModelSpec, list_models, load_hf_config, load_model

# config.json values (the keys as the model's config spells them), as each preset's YAML names its source
CONFIGS = {
    "mixtral-8x7b": {  # mistralai/Mixtral-8x7B-v0.1
        "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_hidden_layers": 32, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    },
    "qwen3-30b-a3b": {  # Qwen/Qwen3-30B-A3B
        "hidden_size": 2048, "intermediate_size": 6144, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "num_hidden_layers": 48, "vocab_size": 151936, "num_experts": 128,
        "num_experts_per_tok": 8, "moe_intermediate_size": 768, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "norm_topk_prob": True,
    },
    "deepseek-v3": {  # deepseek-ai/DeepSeek-V3
        "hidden_size": 7168, "intermediate_size": 18432, "num_attention_heads": 128, "num_key_value_heads": 128,
        "num_hidden_layers": 61, "vocab_size": 129280, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "moe_intermediate_size": 2048, "first_k_dense_replace": 3, "moe_layer_freq": 1,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    },
}
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
# published totals (billions of parameters: all, active per token): the model cards / papers
PUBLISHED = {"mixtral-8x7b": (46.7, 12.9), "qwen3-30b-a3b": (30.5, 3.3), "deepseek-v3": (671.0, 37.0)}


def _expected(config: dict) -> dict:
    out = {k: v for k, v in config.items() if k in ModelSpec.__dataclass_fields__}
    out["num_experts"] = next(config[k] for k in EXPERT_KEYS if k in config)
    return out


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_preset_figures_are_the_cited_config_values(name):
    assert name in list_models()
    spec = load_model(name)
    for field, value in _expected(CONFIGS[name]).items():
        assert getattr(spec, field) == value, field
    assert spec.is_moe and spec.mlp == "gated" and spec.norm == "rmsnorm"
    assert name in spec.source  # the preset file it came from


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_parameter_counts_match_the_published_totals(name):
    spec = load_model(name)
    total, active = PUBLISHED[name]
    assert spec.total_params() / 1e9 == pytest.approx(total, rel=0.01)
    assert spec.active_params() / 1e9 == pytest.approx(active, rel=0.03)
    assert spec.active_params() < spec.total_params()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_hf_config_spellings_load_to_the_preset(tmp_path, name):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIGS[name], "model_type": name}))
    from_hf, preset = load_hf_config(path), load_model(name)
    for field in ModelSpec.__dataclass_fields__:
        if field not in ("name", "source"):
            assert getattr(from_hf, field) == getattr(preset, field), field


def test_layer_structure():
    ds = load_model("deepseek-v3")
    assert (ds.dense_layers, ds.moe_layers) == (3, 58)
    assert [ds.is_moe_layer(i) for i in (0, 2, 3, 60)] == [False, False, True, True]
    assert ds.moe_layers_in(0, 5) == 2 and ds.moe_layers_in(10, 4) == 4 and ds.moe_layers_in(0, 3) == 0
    assert ds.expert_ffn == 2048 and ds.shared_ffn == 2048
    assert ds.is_mla and ds.head_size == 192 and ds.v_head_size == 128 and ds.q_size == 128 * 192
    assert ds.attn_out_size == 128 * 128
    # MLA weights: q down/up (with its norm), kv down (with the rope part) and up (with its norm), output
    attention = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168
    assert ds.attention_params() == attention
    mixtral = load_model("mixtral-8x7b")
    assert mixtral.expert_ffn == 14336 and mixtral.shared_ffn == 0 and mixtral.dense_layers == 0
    assert ("intermediate_size", 14336) not in mixtral.tp_split_sizes()  # experts are not split by tp
    qwen = load_model("qwen3-30b-a3b")
    assert qwen.q_size == 4096 and qwen.kv_size == 512 and qwen.moe_layers == 48
    dense = load_model("llama3-70b")
    assert not dense.is_moe and dense.active_params() == dense.total_params()


@pytest.mark.parametrize("fields, match", [
    ({"num_experts": 8, "num_experts_per_tok": 9}, "num_experts_per_tok=9"),
    ({"num_experts": 8, "num_experts_per_tok": 0}, "num_experts_per_tok=0"),
    ({"num_experts_per_tok": 2}, "num_experts=0"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 4}, "first_k_dense_replace=4"),
    ({"kv_lora_rank": 64}, "MLA|latent"),
    ({"qk_rope_head_dim": 16}, "kv_lora_rank"),
    ({"num_experts": -1}, "num_experts=-1"),
])
def test_bad_moe_and_mla_fields_name_the_field(fields, match):
    base = dict(name="toy", hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=4,
                num_hidden_layers=4, vocab_size=100)
    with pytest.raises(ValueError, match=match):
        ModelSpec(**base, **fields)


def test_hf_layouts_the_spec_cannot_hold_are_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIGS["qwen3-30b-a3b"], "decoder_sparse_step": 2}))
    with pytest.raises(ValueError, match="decoder_sparse_step=2"):
        load_hf_config(path)
    path.write_text(json.dumps({**CONFIGS["qwen3-30b-a3b"], "shared_expert_intermediate_size": 1000}))
    with pytest.raises(ValueError, match="shared_expert_intermediate_size=1000"):
        load_hf_config(path)
    path.write_text(json.dumps({**CONFIGS["qwen3-30b-a3b"], "shared_expert_intermediate_size": 1536}))
    assert load_hf_config(path).n_shared_experts == 2

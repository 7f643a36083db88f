"""The blocks of a model's step that share one split (hocket.cli._shards), as `hocket plan --shards` sizes them."""

from __future__ import annotations

import pytest

from hocket.cli._shards import model_blocks, model_shards, shards_text, site_shards
from hocket.core.site import Site
from hocket.hardware import load_preset
from hocket.models.catalog import load_model
from hocket.plan.shards import shard_dim


def test_each_block_shares_one_number_of_units():
    spec = load_model("llama3-8b")
    blocks = model_blocks("llama3-8b", tp=8, seq=2048)
    assert set(blocks) == {"mlp", "attn"}
    for name, (sites, multiples) in blocks.items():
        units = {getattr(s, shard_dim(s)) * s.world // unit for s, unit in zip(sites, multiples)}
        assert len(units) == 1, name
        assert {s.direction for s in sites} == {"forward", "backward"}
    attn_units = {getattr(s, shard_dim(s)) * s.world // u for s, u in zip(*blocks["attn"])}
    assert attn_units == {spec.num_key_value_heads}  # whole GQA groups


def test_model_and_site_sections_name_the_devices():
    cluster = load_preset("mixed-nvidia-amd")
    section = model_shards("llama3-8b", cluster, tp=8, seq=2048)
    assert [b["block"] for b in section["blocks"]] == ["mlp", "attn"]
    text = shards_text(section)
    assert "L20" in text and "Instinct MI210" in text and "host_staged" in text
    one = site_shards(Site(kind="mm_rs", m=2048, k=1792, n=4096, world=8), cluster)
    assert sum(one["sizes"][0]) == 1792 * 8 and shards_text(one) == "\n".join(one["lines"])
    with pytest.raises(ValueError, match="does not fit"):
        model_shards("llama3-8b", cluster, tp=8, seq=2048, first_rank=4)

"""hocket.search.space: hand-countable candidates and the pruning reasons on small presets."""

from __future__ import annotations

import pytest

from hocket.hardware import load_preset
from hocket.models.spec import ModelSpec
from hocket.search import ParallelSpace, SearchError, enumerate_space, search_parallel

TINY = ModelSpec(name="tiny", hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                 num_hidden_layers=4, vocab_size=1000)
PLAIN = ParallelSpace(micro_batch_sizes=(1,), schedules=("1f1b",), shardings=("replicated",), recomputes=("none",),
                      cp_degrees=(1,))


def _degrees(space):
    return sorted((c.tp, c.pp, c.dp) for c in space.candidates)


def test_degrees_on_one_node_are_hand_countable():
    space = enumerate_space(TINY, load_preset("h100x8"), seq=1024, global_batch=8, space=PLAIN)
    # tp in {1, 2} (KV heads = 2), pp in {1, 2, 4} (pp 8 > 4 layers), dp = 8 / (tp * pp)
    assert _degrees(space) == [(1, 1, 8), (1, 2, 4), (1, 4, 2), (2, 1, 4), (2, 2, 2), (2, 4, 1)]
    assert space.pruned["tp=4 does not divide num_key_value_heads=2"] == 1
    assert space.pruned["tp=8 does not divide num_attention_heads=4"] == 1
    assert space.pruned["pp > num_hidden_layers=4 (a stage needs a layer)"] == 1  # tp1 pp8


def test_sharding_levels_need_more_than_one_replica():
    sp = ParallelSpace(micro_batch_sizes=(1,), schedules=("1f1b",), recomputes=("none",), cp_degrees=(1,))
    space = enumerate_space(TINY, load_preset("h100x8"), seq=1024, global_batch=8, space=sp)
    # five degree triples with dp > 1 take the four sharding levels, tp2 pp4 dp1 only "replicated"
    assert len(space.candidates) == 5 * 4 + 1
    assert {c.sharding for c in space.candidates if c.dp == 1} == {"replicated"}
    assert sum(c.sharding == "gradients" for c in space.candidates) == 5


def test_interleaving_rules_prune_with_reasons():
    sp = ParallelSpace(micro_batch_sizes=(1,), shardings=("replicated",), recomputes=("none",), cp_degrees=(1,),
                       virtual_stages=(2,))
    space = enumerate_space(TINY, load_preset("h100x8"), seq=1024, global_batch=8, space=sp)
    inter = sorted((c.tp, c.pp, c.dp) for c in space.candidates if c.schedule == "interleaved")
    # pp2 v2: 4 layers % 4 == 0 and m = 8 / dp is a multiple of 2; pp4 v2 needs 8 layers
    assert inter == [(1, 2, 4), (2, 2, 2)]
    assert space.pruned["interleaved: layers not divisible by pp * virtual"] == 2


def test_context_parallel_only_for_long_sequences():
    sp = ParallelSpace(micro_batch_sizes=(1,), schedules=("1f1b",), shardings=("replicated",), recomputes=("none",),
                       cp_degrees=(1, 2, 4), cp_from_seq=4096, min_cp_tokens=2048)
    short = enumerate_space(TINY, load_preset("h100x8"), seq=2048, global_batch=8, space=sp)
    assert {c.cp for c in short.candidates} == {1}
    assert short.pruned["cp>1 only for seq >= 4096"] == 4  # cp 2 and 4 for tp 1 and 2
    long = enumerate_space(TINY, load_preset("h100x8"), seq=4096, global_batch=8, space=sp)
    assert {c.cp for c in long.candidates} == {1, 2}  # cp 4 leaves 1024 tokens per rank
    assert long.pruned["cp must divide seq=4096 leaving >= 2048 tokens per rank"] == 2


def test_empty_space_is_an_error_that_says_why():
    sp = ParallelSpace(micro_batch_sizes=(2,), schedules=("1f1b",), shardings=("replicated",), recomputes=("none",),
                       cp_degrees=(1,))
    with pytest.raises(SearchError, match="is empty: global batch not divisible by dp \\* micro_batch"):
        search_parallel(TINY, load_preset("h100x8"), seq=1024, global_batch=3, space=sp)


def test_too_small_cluster_names_the_closest_and_the_limit():
    with pytest.raises(SearchError, match=r"does not fit in device memory at any configuration: the closest, .* "
                                          r"GiB usable on H100 SXM, is [0-9.]+x the limit"):
        search_parallel("llama3-405b", load_preset("h100x8"), seq=8192, global_batch=8,
                        space=ParallelSpace(micro_batch_sizes=(1,), schedules=("1f1b",)))


def test_mixed_cluster_offers_stage_and_replica_groupings():
    space = enumerate_space(TINY, load_preset("mixed-a100-h100"), seq=1024, global_batch=32, space=PLAIN)
    assert {c.grouping for c in space.candidates} == {"stages", "replicas"}
    # replicas need each 16-GPU device block to be a multiple of tp * pp: tp2 pp16 is not offered (pp > 4 layers)
    assert all(16 % (c.tp * c.pp) == 0 for c in space.candidates if c.grouping == "replicas")

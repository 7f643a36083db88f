"""hocket.search.memory against figures computed by hand for a small model."""

from __future__ import annotations

import pytest

from hocket.models.spec import ModelSpec
from hocket.search.memory import GIB, RESERVED_BYTES, in_flight, stage_memory, stage_params

TINY = ModelSpec(name="tiny", hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                 num_hidden_layers=4, vocab_size=1000)
# one layer: attention 256 * (256 + 2 * 128) + 256 * 256 = 196,608; SwiGLU MLP 256 * 512 * 3 = 393,216; norms 512
LAYER = 196_608 + 393_216 + 512
VOCAB = 1024  # 1000 padded to a multiple of 128
P_ALL = 4 * LAYER + VOCAB * 256 + 256 + VOCAB * 256  # layers, embedding, final norm, LM head
PER_TOKEN_NONE = 2 * (4 * 256 + 2 * 256 + 2 * 128 + 3 * 512)  # = 6,656 bytes per token per layer


def test_layer_and_stage_parameters():
    assert TINY.layer_params() == LAYER
    assert stage_params(TINY, tp=1, layers=4, first=True, last=True, pp=1) == P_ALL
    assert stage_params(TINY, tp=2, layers=2, first=True, last=False, pp=2) == 2 * LAYER / 2 + VOCAB * 256 / 2


def test_one_rank_replicated_no_recompute():
    mem = stage_memory(TINY, tp=1, cp=1, dp=1, pp=1, stage=0, layers=4, seq=1024, micro_batch=1, micro_batches=4,
                       sharding="replicated", recompute="none", device_bytes=80 * GIB)
    assert mem.weights == 2 * P_ALL and mem.grads == 4 * P_ALL and mem.optimizer == 12 * P_ALL
    # 4 layers x 1024 tokens x 6,656 B (one micro-batch in flight), plus the last stage's final-norm and LM-head
    # inputs 2 * 2 * 1024 * 256 (the embedding's output is layer 0's input, already counted)
    assert mem.activations == 4 * 1024 * PER_TOKEN_NONE + 2 * 2 * 1024 * 256
    assert mem.buffers == 2 * 4 * 1024 * VOCAB  # fp32 logits and their gradient
    assert mem.limit == 80 * GIB - RESERVED_BYTES and mem.fits


def test_sharding_levels_divide_the_model_states():
    kw = dict(tp=1, cp=1, dp=4, pp=1, stage=0, layers=4, seq=1024, micro_batch=1, micro_batches=4,
              recompute="none", device_bytes=80 * GIB)
    opt = stage_memory(TINY, sharding="optimizer", **kw)
    assert opt.weights == 2 * P_ALL and opt.grads == 4 * P_ALL and opt.optimizer == 12 * P_ALL / 4
    full = stage_memory(TINY, sharding="full", **kw)
    assert full.weights + full.grads + full.optimizer == pytest.approx(18 * P_ALL / 4)
    bucket = 4 * 40e6  # Megatron's DDP bucket: max(40e6, 1e6 * d) fp32 values
    assert full.buffers - opt.buffers == 2 * 2 * LAYER  # two gathered layers of bf16 weights
    assert opt.buffers == 2 * 4 * 1024 * VOCAB + bucket


def test_gradients_level_keeps_the_weights_whole_and_shards_gradients_and_optimizer():
    kw = dict(tp=1, cp=1, dp=4, pp=1, stage=0, layers=4, seq=1024, micro_batch=1, micro_batches=4,
              recompute="none", device_bytes=80 * GIB)
    assert P_ALL == 2_885_888  # 4 * 590,336 + 262,144 (embedding) + 256 (final norm) + 262,144 (LM head)
    zero2 = stage_memory(TINY, sharding="gradients", **kw)
    # bf16 weights whole: 2 * 2,885,888; fp32 gradients / 4: 4 * 721,472; master + Adam / 4: 12 * 721,472
    assert zero2.weights == 5_771_776 and zero2.grads == 2_885_888 and zero2.optimizer == 8_657_664
    opt = stage_memory(TINY, sharding="optimizer", **kw)
    full = stage_memory(TINY, sharding="full", **kw)
    assert zero2.buffers == opt.buffers  # no gathered layers in flight: the weights are whole all step
    assert opt.grads - zero2.grads == 4 * P_ALL * 3 / 4
    assert opt.total > zero2.total > full.total
    # sharded over dp * cp: cp 2 x dp 2 divides the same as dp 4
    cp = stage_memory(TINY, sharding="gradients", **{**kw, "cp": 2, "dp": 2, "seq": 4096})
    assert cp.grads == zero2.grads and cp.optimizer == zero2.optimizer and cp.weights == zero2.weights


def test_recompute_levels_and_tensor_parallel():
    kw = dict(cp=1, dp=1, pp=2, stage=1, layers=2, seq=1024, micro_batch=2, micro_batches=4,
              sharding="replicated", device_bytes=80 * GIB)
    tokens = 2 * 1024
    sel = stage_memory(TINY, tp=2, recompute="selective", **kw)
    # selective drops the attention output (q) and the MLP activation output (f): 2 * (4h + q + 2kv + 2f) / tp
    per_token = 2 * (4 * 256 + 256 + 2 * 128 + 2 * 512) / 2
    head = 2 * 2 * tokens * 256 / 2  # the final norm's and the LM head's inputs, sequence-parallel
    assert sel.activations == per_token * tokens * 2 * 1 + head  # last of 2 stages: min(pp - s, m) = 1 in flight
    full = stage_memory(TINY, tp=2, recompute="full", **kw)
    assert full.activations == 2 * 256 / 2 * tokens * 2 + PER_TOKEN_NONE / 2 * tokens + head
    # last stage: logits 2 * 4 * T * V / tp; TP all-gather double buffer 2 * 2 * T * h
    assert full.buffers == 2 * 4 * tokens * VOCAB / 2 + 2 * 2 * tokens * 256


def test_first_stage_keeps_its_layers_in_flight_and_no_embedding_copy():
    # Korthikanti et al. 2022 with sequence parallelism: every layer tensor / tp; 1F1B keeps pp - s = 2 micro-batches
    # on stage 0 of 2; the embedding's output is layer 0's norm input (no second copy, no dropout mask)
    mem = stage_memory(TINY, tp=2, cp=1, dp=1, pp=2, stage=0, layers=2, seq=1024, micro_batch=1, micro_batches=4,
                       sharding="replicated", recompute="none", device_bytes=80 * GIB)
    assert mem.activations == 2 * 2 * 1024 * PER_TOKEN_NONE / 2


def test_in_flight_micro_batches_follow_the_schedule():
    assert in_flight(pp=4, stage=0, micro_batches=8) == 4 and in_flight(pp=4, stage=3, micro_batches=8) == 1
    assert in_flight(pp=4, stage=0, micro_batches=2) == 2
    # interleaved, v = 2: warm-up 2 * (p - s - 1) + (v - 1) * p = 10 forwards plus one, of L/2 layers each
    assert in_flight(pp=4, stage=0, micro_batches=8, virtual=2) == 11 / 2


def test_too_large_names_the_binding_component():
    mem = stage_memory(TINY, tp=1, cp=1, dp=1, pp=1, stage=0, layers=4, seq=1024, micro_batch=1, micro_batches=1,
                       sharding="replicated", recompute="none", device_bytes=RESERVED_BYTES + 1e6)
    assert not mem.fits and mem.binding() == "optimizer"
    assert "GiB usable" in mem.describe()

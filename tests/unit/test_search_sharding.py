"""The data-parallel sharding levels as the search prices and launches them: the collectives each level runs per
step (count and bytes) on a toy cost table, and the ``gradients`` level's torchtitan / Megatron-LM settings."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hocket.hardware import load_preset
from hocket.models.spec import ModelSpec
from hocket.search import Candidate, ParallelSpace, search_parallel
from hocket.search import run as search_run
from hocket.search.memory import stage_params
from hocket.search.report import launch_settings
from hocket.search.run import Table, _Costs, price_candidate

TINY = ModelSpec(name="tiny", hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                 num_hidden_layers=4, vocab_size=1000)
P_ALL = stage_params(TINY, tp=1, layers=4, first=True, last=True, pp=1)
RS_MS, AG_MS = 20.0, 6.0


def _toy(monkeypatch, calls: list):
    """Forward 1 ms and backward 2 ms per layer and micro-batch; a reduce-scatter costs RS_MS, an all-gather AG_MS,
    every other collective and the optimizer step nothing. ``calls`` records (op, bytes, ranks) of each priced
    collective."""

    def table(self, device, tp, cp, mbs, recompute, ep=1):
        return Table(layer_f=1.0, layer_b=2.0, dense_f=1.0, dense_b=2.0, dense_exposed=0.0, embed_f=0.0,
                     embed_b=0.0, head_f=0.0, head_b=0.0, layer_exposed=0.0, edge_exposed=0.0, act_bytes=0)

    def comm_ms(self, op, nbytes, ranks, axis="dp"):
        if len(ranks) < 2 or nbytes <= 0:
            return 0.0
        calls.append((op, nbytes, tuple(ranks)))
        return {"reduce_scatter": RS_MS, "all_gather": AG_MS}.get(op, 0.0)

    monkeypatch.setattr(_Costs, "table", table)
    monkeypatch.setattr(_Costs, "comm_ms", comm_ms)
    monkeypatch.setattr(search_run, "OPTIMIZER_BYTES_PER_PARAM", 0)


def _price(sharding: str, micro_batches: int = 4):
    cand = Candidate(tp=1, cp=1, pp=1, dp=8, micro_batch=1, micro_batches=micro_batches, sharding=sharding)
    return price_candidate(TINY, load_preset("h100x8"), cand, seq=1024, global_batch=8 * micro_batches,
                           simulate=False)


@pytest.mark.parametrize("micro", [1, 4])
def test_each_level_runs_its_collectives_per_step(monkeypatch, micro):
    calls: list = []
    _toy(monkeypatch, calls)
    f, b = 4 * 1.0, 4 * 2.0  # one micro-batch's forward and backward of the 4 layers
    # the reduce-scatter (20 ms) exceeds F + B (12 ms): each level's step is its DP traffic on the DP link
    # gradients: 1 all-gather per step + 1 reduce-scatter per micro-batch
    assert _price("gradients", micro).step_ms == pytest.approx(AG_MS + micro * RS_MS)
    # full: 2 all-gathers (forward and backward) + 1 reduce-scatter per micro-batch
    assert _price("full", micro).step_ms == pytest.approx(micro * (2 * AG_MS + RS_MS))
    # optimizer: the compute, then 1 reduce-scatter past the last backward and 1 all-gather past the first forward
    assert _price("optimizer", micro).step_ms == pytest.approx(micro * (f + b) + (RS_MS - b) + (AG_MS - f))
    dp_group = tuple(range(8))
    calls.clear()
    _price("gradients", micro)
    # the bytes: fp32 gradients (4 B per parameter) reduce-scattered, bf16 weights (2 B) gathered, over dp 8
    assert set(calls) == {("reduce_scatter", 4 * P_ALL, dp_group), ("all_gather", 2 * P_ALL, dp_group)}


def test_gradients_level_hides_its_reduce_scatters_behind_compute(monkeypatch):
    calls: list = []
    _toy(monkeypatch, calls)
    small = 5.0  # below one micro-batch's backward (8 ms): every reduce-scatter is hidden

    def comm_ms(self, op, nbytes, ranks, axis="dp"):
        return {"reduce_scatter": small, "all_gather": AG_MS}.get(op, 0.0) if nbytes > 0 and len(ranks) > 1 else 0.0

    monkeypatch.setattr(_Costs, "comm_ms", comm_ms)
    p = _price("gradients")
    # 4 micro-batches of F + B = 12 ms, and the part of the one all-gather past the first forward (6 - 4 ms)
    assert p.step_ms == pytest.approx(4 * 12.0 + (AG_MS - 4.0))
    assert p.dp_exposed_ms == pytest.approx(AG_MS - 4.0) and p.dp_ms == pytest.approx(AG_MS + small)


def test_gradients_winner_launch_settings():
    space = ParallelSpace(micro_batch_sizes=(1,), schedules=("1f1b",), shardings=("gradients",),
                          recomputes=("none",), cp_degrees=(1,))
    out = search_parallel(TINY, load_preset("h100x8"), seq=1024, global_batch=8, space=space, rerank=0, top=50)
    pipelined = [p for p in out.ranked if p.candidate.sharding == "gradients" and p.candidate.pp > 1]
    flat = [p for p in out.ranked if p.candidate.sharding == "gradients" and p.candidate.pp == 1]
    assert pipelined and flat
    launch = launch_settings(replace(out, ranked=pipelined))
    c = pipelined[0].candidate
    titan = launch["torchtitan"]
    assert titan["parallelism.fsdp_reshard_after_forward"] == "never"
    assert titan["parallelism.data_parallel_shard_degree"] == c.dp > 1
    assert titan["parallelism.data_parallel_replicate_degree"] == 1
    assert titan["training.local_batch_size"] == c.micro_batch * c.micro_batches
    assert "--data-parallel-sharding-strategy optim_grads" in launch["megatron"]
    assert "--use-torch-fsdp2" not in launch["megatron"]
    notes = " ".join(launch["not_expressible"])
    assert "cannot express the gradients level" in notes
    assert "torch.distributed.pipelining keeps FSDP's gradients unsharded" in notes
    flat_launch = launch_settings(replace(out, ranked=flat))
    assert flat_launch["torchtitan"]["training.local_batch_size"] == flat[0].candidate.micro_batch
    assert flat_launch["torchtitan"]["training.global_batch_size"] == 8
    assert "pipelining" not in " ".join(flat_launch["not_expressible"])


def test_full_sharding_reshards_after_forward_in_torchtitan():
    space = ParallelSpace(micro_batch_sizes=(1,), schedules=("1f1b",), shardings=("full",), recomputes=("none",),
                          cp_degrees=(1,))
    out = search_parallel(TINY, load_preset("h100x8"), seq=1024, global_batch=8, space=space, rerank=0, top=50)
    full = [p for p in out.ranked if p.candidate.sharding == "full"]
    assert launch_settings(replace(out, ranked=full))["torchtitan"]["parallelism.fsdp_reshard_after_forward"] == \
        "always"


@pytest.mark.parametrize("sharding", ["optimizer", "gradients", "full"])
def test_the_rerank_counts_each_levels_collectives_once(monkeypatch, sharding):
    calls: list = []
    _toy(monkeypatch, calls)
    # a stand-in simulator on the same toy: 4 micro-batches of F + B = 12 ms, then the step-end reduce-scatter and
    # all-gather of the simulated graph (dp_sync), exposed
    monkeypatch.setattr(search_run, "_simulated_steps", lambda build, cluster, costs, micro, pp:
                        micro * 12.0 + RS_MS + AG_MS)
    cand = Candidate(tp=1, cp=1, pp=1, dp=8, micro_batch=1, micro_batches=4, sharding=sharding)
    p = price_candidate(TINY, load_preset("h100x8"), cand, seq=1024, global_batch=32)
    # the step-end pair is not counted on top of the per-micro-batch collectives (gradients, full)
    assert p.simulated_ms == pytest.approx(p.step_ms)
    assert p.step_ms == pytest.approx({"optimizer": 62.0, "gradients": 86.0, "full": 128.0}[sharding])

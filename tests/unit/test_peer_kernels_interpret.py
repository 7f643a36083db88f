"""The multi-GPU tile-fused layouts through the real Triton kernels under Triton's interpreter (CPU):
the producer walking a ring-ordered block table, the consumer reading a symmetric-memory flag
view in local-first order, and the peer flag-range wait (pre-set flags, and a missing one).

Like tests/unit/test_kernels_interpret.py, the kernels run in one child process (this file as a
script with TRITON_INTERPRET=1); the interpreter tests tile order and numerics, not signalling.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
import torch
from _interpret import assert_matches_reference, run_interpreted

CONFIG = dict(block_m=32, block_n=32, block_k=16, group_m=2, num_warps=4, num_stages=1)


def _cases(rng: random.Random) -> list[dict]:
    cases = []
    for dtype in ("float32", "bfloat16"):
        world = rng.randint(2, 3)
        cases.append(dict(kind="producer", dtype=dtype, world=world, rank=rng.randrange(world),
                          tiles_per_block=rng.randint(1, 3), n=rng.randint(20, 90), k=rng.randint(10, 50),
                          groups=rng.randint(1, 4), seed=rng.getrandbits(31)))
        cases.append(dict(kind="consumer", dtype=dtype, world=world, rank=rng.randrange(world),
                          rows=rng.randint(5, 70), n=rng.randint(20, 90), k=rng.randint(10, 50),
                          chunks=rng.randint(1, 4), seed=rng.getrandbits(31)))
    cases.append(dict(kind="wait", flags=6, start=1, count=4, missing=3))
    return cases


def _child(cases_path: str, out_path: str) -> None:
    from hocket.kernels import TileConfig, consumer_gemm, producer_gemm, warmup_consumer, warmup_producer
    from hocket.kernels.launch import _INTERPRETED
    from hocket.kernels.peer_flags import peer_error_buffer, wait_flag_range_on_stream
    from hocket.kernels.peer_schedule import block_groups, local_first_arrival, send_order, shard_chunk_offsets
    from hocket.ops.lowering.tile_fused import PeerConsumerWorkspace, PeerProducerWorkspace

    assert _INTERPRETED, "the child must run the kernels under TRITON_INTERPRET=1"
    cfg = TileConfig(**CONFIG)
    results = []
    for case in json.loads(Path(cases_path).read_text()):
        record = dict(case=case)
        if case["kind"] == "wait":
            flags = torch.ones(case["flags"], dtype=torch.int32)
            errors = peer_error_buffer("cpu")
            wait_flag_range_on_stream(flags, case["start"], case["count"], errors, max_spins=10)
            record["ok_error"] = int(errors.item())
            flags[case["missing"]] = 0
            wait_flag_range_on_stream(flags, case["start"], case["count"], errors, max_spins=10)
            record["missing_error"] = int(errors.item())
            results.append(record)
            continue
        dtype = getattr(torch, case["dtype"])
        gen = torch.Generator().manual_seed(case["seed"])
        w, rank = case["world"], case["rank"]
        if case["kind"] == "producer":
            rows = case["tiles_per_block"] * cfg.block_m
            m = w * rows
            groups = block_groups(rows_per_block=rows, n=case["n"], world=w, groups=case["groups"],
                                  block_order=(*send_order(rank, w), rank), block_m=cfg.block_m, block_n=cfg.block_n,
                                  group_m=cfg.group_m)
            a = torch.randn(m, case["k"], generator=gen).to(dtype)
            b = torch.randn(case["k"], case["n"], generator=gen).to(dtype)
            out = torch.empty(m, case["n"], dtype=dtype)
            ws = PeerProducerWorkspace(table=groups.table, m=m, n=case["n"], k=case["k"], dtype=dtype, device="cpu",
                                       groups=groups.num_groups, config=cfg, num_programs=3)
            warmup_producer(ws, a, b, out)
            out.fill_(float("nan"))
            producer_gemm(a, b, workspace=ws, out=out)
            record.update(flags=ws.flags.clone(), counters=ws.counters.clone(), offsets=groups.group_offsets)
        else:
            m = w * case["rows"]
            offsets, per = shard_chunk_offsets(case["rows"], w, case["chunks"])
            symmetric = torch.zeros(w * 8, dtype=torch.int32)  # a flag region larger than one call needs
            a = torch.randn(m, case["k"], generator=gen).to(dtype)
            b = torch.randn(case["k"], case["n"], generator=gen).to(dtype)
            out = torch.empty(m, case["n"], dtype=dtype)
            ws = PeerConsumerWorkspace(flags=symmetric[:w * per], m=m, n=case["n"], k=case["k"], dtype=dtype,
                                       device="cpu", chunk_offsets=offsets, arrival=local_first_arrival(rank, w, per),
                                       config=cfg, num_programs=3, max_spins=20)
            warmup_consumer(ws, a, b, out)
            out.fill_(float("nan"))
            symmetric[:w * per].fill_(1)
            consumer_gemm(a, b, workspace=ws, out=out)
            record.update(errors=ws.errors.clone(), flags_is_view=ws.flags.data_ptr() == symmetric.data_ptr())
        record.update(a=a, b=b, out=out)
        results.append(record)
    torch.save(results, out_path)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_interpreted(__file__, _cases(random.Random()), tmp_path_factory.mktemp("peer_interpret"))


@pytest.mark.timeout(300)
def test_ring_ordered_producer_table_computes_every_tile_and_signals_every_group(results):
    producers = [r for r in results if r["case"]["kind"] == "producer"]
    assert len(producers) == 2
    for record in producers:
        assert_matches_reference(record)
        n_tiles = -(-record["case"]["n"] // CONFIG["block_n"])
        offsets = record["offsets"]
        assert record["flags"].tolist() == [1] * (len(offsets) - 1)
        expected = [(offsets[g + 1] - offsets[g]) // CONFIG["block_m"] * n_tiles for g in range(len(offsets) - 1)]
        assert record["counters"].tolist() == expected


@pytest.mark.timeout(300)
def test_consumer_reads_flags_from_a_shared_region_in_local_first_order(results):
    consumers = [r for r in results if r["case"]["kind"] == "consumer"]
    assert len(consumers) == 2
    for record in consumers:
        assert_matches_reference(record)
        assert record["flags_is_view"], "the workspace must wait on the symmetric flags, not a private copy"
        assert record["errors"].tolist() == [0, 0]


@pytest.mark.timeout(300)
def test_flag_range_wait_records_the_first_missing_flag(results):
    (record,) = [r for r in results if r["case"]["kind"] == "wait"]
    assert record["ok_error"] == 0
    assert record["missing_error"] == record["case"]["missing"] + 1


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])

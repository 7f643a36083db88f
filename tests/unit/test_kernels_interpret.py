"""Numerics of the tile-fused GEMMs under Triton's interpreter (CPU), flags pre-set.

The interpreter must be switched on before the kernels are decorated, and a pytest
session may already hold compiled kernels (tests/unit/test_kernels_compile.py, GPU
tests), so the kernels run in one child process (this file run as a script, with
``TRITON_INTERPRET=1``) that saves inputs and outputs; the assertions run here. The
interpreter runs programs one after another: it checks tile order, masking and
numerics, never the signalling itself (tests/gpu does that).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
import torch
from _interpret import assert_matches_reference, run_interpreted

from hocket.kernels.config import TileConfig

SHAPES = [  # (m, k, n): none divides the 32x32x16 blocks except where noted
    (100, 50, 70),
    (64, 48, 96),   # every dim divides: the unmasked path
    (33, 17, 130),
    (100, 56, 72),  # rows 16-byte aligned, every dim uneven: tensor-descriptor loads with zero padding
]
DESCRIPTOR_SHAPES = {(64, 48, 96), (100, 56, 72)}
"""Shapes whose cases load through tensor descriptors (``TileConfig.tma``); the others draw it
(their unaligned rows make the launch fall back to pointers)."""
DTYPES = ["float32", "bfloat16"]
CONFIG = dict(block_m=32, block_n=32, block_k=16, group_m=2, num_warps=4, num_stages=1)


def _last_chunk_rows(offsets: list[int], arrival: list[int]) -> int:
    last = arrival[-1]
    return offsets[last + 1] - offsets[last]


def _cases(rng: random.Random) -> list[dict]:
    cases = []
    for dtype in DTYPES:
        for m, k, n in SHAPES:
            tma = (m, k, n) in DESCRIPTOR_SHAPES
            chunks = rng.randint(1, 4)
            cuts = sorted(rng.sample(range(1, m), chunks - 1))
            arrival = list(range(chunks))
            rng.shuffle(arrival)
            cases.append(dict(kind="consumer", dtype=dtype, m=m, k=k, n=n, seed=rng.getrandbits(31),
                              offsets=[0, *cuts, m], arrival=arrival, programs=rng.randint(1, 5),
                              narrow_rows=rng.choice([0, m, _last_chunk_rows([0, *cuts, m], arrival)]),
                              split_rows=rng.choice([0, m, _last_chunk_rows([0, *cuts, m], arrival)]),
                              splits=rng.randint(2, 4), tma=tma or rng.random() < 0.5))
            groups = rng.randint(1, -(-m // CONFIG["block_m"]))
            cases.append(dict(kind="producer", dtype=dtype, m=m, k=k, n=n, seed=rng.getrandbits(31),
                              groups=groups, ramp=rng.random() < 0.5, programs=rng.randint(1, 5),
                              narrow_rows=rng.choice([0, rng.randint(1, m)]),
                              split_rows=rng.choice([0, rng.randint(1, m)]), splits=rng.randint(2, 4),
                              tma=tma or rng.random() < 0.5))
    cases[2]["split_rows"], cases[3]["split_rows"] = 0, 1  # unsplit and split launches of both kinds
    cases[4]["split_rows"], cases[5]["split_rows"] = cases[4]["m"], 0
    cases.append(dict(kind="timeout", dtype="float32", m=64, k=32, n=64, seed=rng.getrandbits(31),
                      offsets=[0, 32, 64], arrival=[0, 1], programs=2, missing=1))
    return cases


def _child(cases_path: str, out_path: str) -> None:
    """Runs in the interpreter child: execute every case, save tensors and flags."""
    from hocket.kernels import (
        ConsumerWorkspace,
        FlagTimeoutError,
        ProducerWorkspace,
        TileConfig,
        consumer_gemm,
        producer_gemm,
        raise_on_timeout,
        warmup_consumer,
        warmup_producer,
    )
    from hocket.kernels.descriptors import uses_descriptors
    from hocket.kernels.launch import _INTERPRETED
    from hocket.kernels.schedule import even_row_offsets, ramp_row_offsets

    assert _INTERPRETED, "the child must run the kernels under TRITON_INTERPRET=1"
    results = []
    for case in json.loads(Path(cases_path).read_text()):
        cfg = TileConfig(**CONFIG, tma=case.get("tma", False))
        dtype = getattr(torch, case["dtype"])
        gen = torch.Generator().manual_seed(case["seed"])
        a = torch.randn(case["m"], case["k"], generator=gen).to(dtype)
        b = torch.randn(case["k"], case["n"], generator=gen).to(dtype)
        out = torch.empty(case["m"], case["n"], dtype=dtype)
        common = dict(m=case["m"], n=case["n"], k=case["k"], dtype=dtype, device="cpu", config=cfg,
                      num_programs=case["programs"])
        record = dict(case=case, a=a, b=b, descriptors=uses_descriptors(cfg, a, b))
        if case["kind"] == "producer":
            offsets = (ramp_row_offsets if case["ramp"] else even_row_offsets)(case["m"], case["groups"],
                                                                             align=cfg.block_m)
            ws = ProducerWorkspace(group_offsets=offsets, narrow_rows=case["narrow_rows"],
                                   split_rows=case["split_rows"], splits=case["splits"], **common)
            warmup_producer(ws, a, b, out)
            out.fill_(float("nan"))
            producer_gemm(a, b, workspace=ws, out=out)
            record.update(flags=ws.flags.clone(), counters=ws.counters.clone(),
                          group_offsets=ws.schedule.group_offsets, tiles=ws.schedule.tiles)
        else:
            ws = ConsumerWorkspace(chunk_offsets=case["offsets"], arrival=case["arrival"], max_spins=20,
                                   narrow_rows=case.get("narrow_rows", 0), split_rows=case.get("split_rows", 0),
                                   splits=case.get("splits", 1), **common)
            warmup_consumer(ws, a, b, out)
            out.fill_(float("nan"))
            ws.flags.fill_(1)
            if case["kind"] == "timeout":
                ws.flags[case["missing"]] = 0
            consumer_gemm(a, b, workspace=ws, out=out)
            try:
                raise_on_timeout(ws.errors, max_spins=ws.max_spins, context="interpreter test")
                record["timeout_message"] = ""
            except FlagTimeoutError as exc:
                record["timeout_message"] = str(exc)
        record["out"] = out
        record["narrow_tiles"] = sum(tile[2] for tile in ws.schedule.tiles)
        record["split_tiles"] = ws.schedule.split_tiles
        record["split_counters"] = None if ws.split_counters is None else ws.split_counters.tolist()
        results.append(record)
    torch.save(results, out_path)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_interpreted(__file__, _cases(random.Random()), tmp_path_factory.mktemp("interpret"))


@pytest.mark.timeout(300)
def test_consumer_numerics_every_element_written(results):
    consumers = [r for r in results if r["case"]["kind"] == "consumer"]
    assert len(consumers) == len(SHAPES) * len(DTYPES)
    for record in consumers:  # narrow_rows covers at least the last chunk: its tiles are narrow
        assert (record["narrow_tiles"] > 0) == (record["case"]["narrow_rows"] > 0)
    for record in consumers:
        assert_matches_reference(record)
        assert record["timeout_message"] == ""


@pytest.mark.timeout(300)
def test_producer_numerics_and_every_group_signalled(results):
    producers = [r for r in results if r["case"]["kind"] == "producer"]
    assert len(producers) == len(SHAPES) * len(DTYPES)
    for record in producers:
        assert_matches_reference(record)
        groups = record["case"]["groups"]
        assert record["flags"].tolist() == [1] * groups
        bm, n = CONFIG["block_m"], record["case"]["n"]
        offsets = record["group_offsets"]
        narrow_rows = record["case"]["narrow_rows"]
        narrow_bn = TileConfig(**CONFIG).narrow_n
        expected = []
        for g in range(groups):
            blocks = range(offsets[g] // bm, -(-offsets[g + 1] // bm))
            expected.append(sum(-(-n // (narrow_bn if b * bm < narrow_rows else CONFIG["block_n"])) for b in blocks))
        assert record["counters"].tolist() == expected, "each group's counter counts its tiles exactly once"
        assert (record["narrow_tiles"] > 0) == (narrow_rows > 0)


@pytest.mark.timeout(300)
def test_split_edge_tiles_add_up_and_leave_their_counters_at_zero(results):
    """Cases with ``split_rows`` cut their edge tiles along K (the numerics above cover them:
    each tile is the sum of its slices' fp32 partials); every tile counter is back at zero for
    the next launch, and launches without split rows carry no split buffers."""
    gemms = [r for r in results if r["case"]["kind"] in ("consumer", "producer")]
    split = [r for r in gemms if r["split_tiles"] > 0]
    assert {r["case"]["kind"] for r in split} == {"consumer", "producer"}
    for record in gemms:
        if record["case"]["split_rows"] == 0:
            assert record["split_tiles"] == 0 and record["split_counters"] is None
        else:
            assert record["split_tiles"] > 0
            assert record["split_counters"] == [0] * record["split_tiles"]


@pytest.mark.timeout(300)
def test_descriptor_loads_ran_where_rows_are_aligned(results):
    """``tma`` cases on 16-byte-aligned rows loaded through descriptors (their numerics are
    checked above with the rest); unaligned ones fell back to pointers."""
    for kind in ("consumer", "producer"):
        ran = [r for r in results if r["case"]["kind"] == kind and r["descriptors"]]
        shapes = {(r["case"]["m"], r["case"]["k"], r["case"]["n"]) for r in ran}
        assert shapes >= DESCRIPTOR_SHAPES, f"{kind}: descriptor loads ran on {shapes}"
    for record in results:
        if record["descriptors"]:
            assert record["case"]["tma"]
            assert all(t.stride(0) * t.element_size() % 16 == 0 for t in (record["a"], record["b"]))
        elif record["case"].get("tma"):
            assert any(t.stride(0) * t.element_size() % 16 for t in (record["a"], record["b"]))


@pytest.mark.timeout(300)
def test_missing_flag_gives_clear_error_naming_the_chunk(results):
    (record,) = [r for r in results if r["case"]["kind"] == "timeout"]
    message = record["timeout_message"]
    assert message.startswith(f"chunk {record['case']['missing']}'s flag never rose")
    assert "HOCKET_TIMEOUT_S" in message
    # chunk 0 had landed: its rows were computed and are correct
    rows = record["case"]["offsets"][1]
    ref = torch.mm(record["a"][:rows].double(), record["b"].double())
    assert torch.allclose(record["out"][:rows].double(), ref, rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])

"""The peer-read all-gather GEMM under Triton's interpreter (CPU): the peers' shards are ordinary
tensors passed as the per-rank pointer arguments, readiness flags pre-set. Checks numerics of
every rank's rows (uneven row counts too), that the peers' rows are staged exactly, that this
rank's staged rows stay untouched, and that a peer whose flag never rises ends in an error naming
that rank. Like tests/unit/test_kernels_interpret.py the kernel runs in one child process
(this file as a script with TRITON_INTERPRET=1); signalling itself is tested on GPUs.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
import torch
from _interpret import assert_matches_reference, run_interpreted

from hocket.kernels.peer_read_schedule import FOLLOWER, LOADER, LOCAL, peer_read_schedule

CONFIG = dict(block_m=32, block_n=32, block_k=16, group_m=2, num_warps=4, num_stages=1)


def _cases(rng: random.Random) -> list[dict]:
    cases = []
    for dtype in ("float32", "bfloat16"):
        for rows in (64, rng.randint(5, 90)):  # whole row blocks, then a drawn count (usually uneven)
            world = rng.randint(2, 3)
            cases.append(dict(kind="numerics", dtype=dtype, world=world, rank=rng.randrange(world), rows=rows,
                              n=rng.randint(20, 90), k=rng.randint(10, 150), seed=rng.getrandbits(31),
                              dynamic=len(cases) % 2 == 0))  # tiles by ticket and by fixed stride
    world = 3
    cases.append(dict(kind="timeout", dtype="float32", world=world, rank=0, rows=40, n=40, k=24,
                      missing=rng.randrange(1, world), seed=rng.getrandbits(31)))
    return cases


def _child(cases_path: str, out_path: str) -> None:
    from hocket.kernels.config import TileConfig
    from hocket.kernels.errors import FlagTimeoutError
    from hocket.kernels.peer_read_gemm import _INTERPRETED, peer_read_gemm, warmup_peer_read
    from hocket.kernels.peer_read_schedule import PeerReadWorkspace, raise_peer_read_timeout

    assert _INTERPRETED, "the child must run the kernel under TRITON_INTERPRET=1"
    results = []
    for case in json.loads(Path(cases_path).read_text()):
        dtype = getattr(torch, case["dtype"])
        gen = torch.Generator().manual_seed(case["seed"])
        w, rank, R, k, n = case["world"], case["rank"], case["rows"], case["k"], case["n"]
        shards = [torch.randn(R, k, generator=gen).to(dtype) for _ in range(w)]
        b = torch.randn(k, n, generator=gen).to(dtype)
        ws = PeerReadWorkspace(rows_per_shard=R, n=n, k=k, world=w, rank=rank, dtype=dtype, device="cpu",
                               config=TileConfig(**CONFIG), max_spins=20, dynamic=case.get("dynamic", True))
        stage = torch.empty(w * R, k, dtype=dtype)
        out = torch.empty(w * R, n, dtype=dtype)
        warmup_peer_read(ws, shards[rank], stage, b, out)
        stage.fill_(float("nan"))
        out.fill_(float("nan"))
        ready = torch.ones(w, dtype=torch.int32)
        if case["kind"] == "timeout":
            ready[case["missing"]] = 0
        peer_read_gemm(shards[rank], shards, stage, b, workspace=ws, out=out, peer_flags=ready)
        message = ""
        try:
            raise_peer_read_timeout(ws.errors, max_spins=ws.max_spins, rank=rank, row_blocks=ws.schedule.row_blocks)
        except FlagTimeoutError as exc:
            message = str(exc)
        results.append(dict(case=case, a=torch.cat(shards), b=b, out=out, stage=stage, message=message,
                            row_flags=ws.row_flags.tolist(), tickets=ws.tickets.tolist()))
    torch.save(results, out_path)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_interpreted(__file__, _cases(random.Random()), tmp_path_factory.mktemp("peer_read"))


@pytest.mark.timeout(300)
def test_peer_read_numerics_and_staging(results):
    numerics = [r for r in results if r["case"]["kind"] == "numerics"]
    assert len(numerics) == 4
    for record in numerics:
        case = record["case"]
        assert_matches_reference(record)
        assert record["message"] == ""
        R, rank = case["rows"], case["rank"]
        for src in range(case["world"]):
            rows = slice(src * R, (src + 1) * R)
            if src == rank:  # this rank's rows are not staged by the kernel
                assert record["stage"][rows].isnan().all()
            else:
                assert torch.equal(record["stage"][rows], record["a"][rows]), f"rank {src}'s staged rows differ"
        blocks = -(-R // CONFIG["block_m"])
        expected = [0 if src == rank else 1 for src in range(case["world"]) for _ in range(blocks)]
        assert record["row_flags"] == expected
        assert record["tickets"] == [0, 0], "the ticket counter must reset itself after a complete launch"


@pytest.mark.timeout(300)
def test_missing_peer_flag_names_the_rank(results):
    (record,) = [r for r in results if r["case"]["kind"] == "timeout"]
    missing = record["case"]["missing"]
    assert f"rank {missing}'s shard never became readable for rank 0" in record["message"]


def test_table_covers_every_tile_once_and_dependencies_point_back():
    rng = random.Random()
    for _ in range(20):
        world = rng.randint(2, 5)
        rank, R, n = rng.randrange(world), rng.randint(1, 300), rng.randint(1, 700)
        bm, bn = rng.choice([16, 32, 64]), rng.choice([16, 32, 64])
        after = rng.randint(0, 50)
        s = peer_read_schedule(rows_per_shard=R, n=n, world=world, rank=rank, block_m=bm, block_n=bn,
                               group_m=rng.randint(1, 4), loaders_after=after)
        keys = [(src, pm, pn) for src, pm, pn, _, _ in s.tiles]
        expected = {(src, pm, pn) for src in range(world) for pm in range(-(-R // bm)) for pn in range(-(-n // bn))}
        assert len(keys) == len(set(keys)) and set(keys) == expected
        loader_at = {}
        for i, (src, pm, pn, kind, flag) in enumerate(s.tiles):
            assert (kind == LOCAL) == (src == rank)
            if kind == LOADER:
                assert pn == 0 and flag == src * s.row_blocks + pm
                loader_at[flag] = i
            elif kind == FOLLOWER:
                assert pn != 0 and loader_at[flag] < i, "a follower must come after its row block's loader"
        first_loader = min(loader_at.values())
        assert first_loader == min(after, (-(-R // bm)) * (-(-n // bn)))


def test_schedule_rejects_bad_arguments():
    with pytest.raises(ValueError, match="rows_per_shard"):
        peer_read_schedule(rows_per_shard=0, n=8, world=2, rank=0, block_m=16, block_n=16)
    with pytest.raises(ValueError, match="rank"):
        peer_read_schedule(rows_per_shard=8, n=8, world=2, rank=2, block_m=16, block_n=16)
    with pytest.raises(ValueError, match="loaders_after"):
        peer_read_schedule(rows_per_shard=8, n=8, world=2, rank=0, block_m=16, block_n=16, loaders_after=-1)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])

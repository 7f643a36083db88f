"""The single-device offload pipelines are priced as their executors run them: the flag
groups a tile_fused kernel really cuts (split_sizes, or the ramp from one row block at the
exposed edge) and, to host, the executor's issue order (hocket.ops.offload: every GEMM
launch before the first copy)."""

import random

import pytest

from hocket.core.pieces import fused_offload_sizes, ramp_row_offsets
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost import schedule
from hocket.cost.compute import FUSED_BLOCK_M
from hocket.hardware import load_preset
from hocket.strategies import pipeline_stages, predict

H200 = load_preset("h200x1")


def _random_site(rng: random.Random, kind: str) -> Site:
    return Site(kind=kind, m=rng.randint(8, 64) * 128, k=rng.choice([1024, 2048, 4096, 8192]),
                n=rng.choice([1024, 2048, 4096, 8192]), world=1)


def _transfer_rows(site: Site, plan: Plan) -> list[float]:
    stages = pipeline_stages(site, plan, H200)
    return [s.nbytes / site.comm_bytes * site.m for s in stages if s.is_transfer]


@pytest.mark.parametrize("trial", range(6))
def test_fused_groups_are_the_executors_pieces(trial):
    rng = random.Random()
    kind = rng.choice(["h2d_mm", "mm_d2h"])
    site = _random_site(rng, kind)
    blocks = site.m // FUSED_BLOCK_M
    chunks = rng.randint(2, min(12, blocks))
    ramp = Plan(strategy="tile_fused", chunks=chunks, transport="host_staged")
    direction = "to_host" if kind == "mm_d2h" else "from_host"
    expected = fused_offload_sizes(site.m, ramp, align=FUSED_BLOCK_M, direction=direction)
    assert _transfer_rows(site, ramp) == pytest.approx(list(expected))
    # without split_sizes the executor ramps from one row block at the exposed edge
    edge = expected[0] if direction == "to_host" else expected[-1]
    assert edge == FUSED_BLOCK_M and (max(expected) > FUSED_BLOCK_M or len(expected) == blocks)
    # explicit sizes reach the pipeline as given (here: even blocks, a different pipeline)
    even = tuple(FUSED_BLOCK_M * (blocks // chunks + (1 if i < blocks % chunks else 0)) for i in range(chunks))
    given = ramp.with_(split_sizes=even)
    assert _transfer_rows(site, given) == pytest.approx(list(even))


def test_to_host_ramp_starts_copying_after_one_row_block():
    # the ramp's first group is one row block, so its copy starts before an even group's would
    site = Site(kind="mm_d2h", m=8192, k=8192, n=7168, world=1)
    starts = {}
    for label, sizes in (("ramp", None), ("even", (1024,) * 8)):
        plan = Plan(strategy="tile_fused", chunks=8, transport="host_staged", split_sizes=sizes)
        stages = pipeline_stages(site, plan, H200)
        gemm_end = schedule(stages).end_ms
        starts[label] = next(e for s, e in zip(stages, gemm_end) if s.name == "gemm[0]")
    assert starts["ramp"] < starts["even"]


def test_fused_offload_sizes_match_the_offload_executor():
    from hocket.ops.offload_pieces import piece_offsets  # the executor's cut (imports torch)
    rng = random.Random()
    for _ in range(20):
        m = rng.randint(1, 96) * 128 + rng.choice([0, rng.randint(1, 127)])
        plan = Plan(strategy="tile_fused", chunks=rng.randint(1, 40), transport="host_staged")
        for direction in ("to_host", "from_host"):
            offsets = piece_offsets(plan, m, align=FUSED_BLOCK_M, direction=direction)
            assert fused_offload_sizes(m, plan, align=FUSED_BLOCK_M, direction=direction) == tuple(
                b - a for a, b in zip(offsets, offsets[1:]))
    with pytest.raises(ValueError, match="direction"):
        fused_offload_sizes(1024, plan, align=128, direction="sideways")
    assert ramp_row_offsets(8192, 6, align=128)[1] == 128


def test_fused_block_m_is_the_kernels_default_tile():
    from hocket.kernels.config import default_config
    assert {default_config(d).block_m for d in ("bfloat16", "float16", "float32")} == {FUSED_BLOCK_M}


def test_to_host_copies_are_issued_right_behind_their_gemm():
    """As hocket.ops.offload._to_host issues them: each piece's GEMM, then its copy, so from an idle GPU
    the first copy does not wait for the later GEMMs' launches."""
    site = Site(kind="mm_d2h", m=8192, k=8192, n=1280, world=1)
    plan = Plan(strategy="chunked", chunks=8, transport="host_staged")
    names = [s.name for s in pipeline_stages(site, plan, H200) if not s.is_issue]
    assert names == [name for i in range(8) for name in (f"gemm[{i}]", f"copy_d2h[{i}]")]


def test_to_host_chunked_is_issue_bound_sooner_than_gpu_bound():
    # the last copy is issued after every launch and every earlier copy, so once the host spends
    # more per piece than the GPU, more pieces cost more
    site = Site(kind="mm_d2h", m=8192, k=8192, n=1280, world=1)
    times = [predict(site, Plan(strategy="chunked", chunks=c, transport="host_staged"), H200).total_ms
             for c in (8, 16, 32)]
    assert times[0] < times[1] < times[2]
    stages = pipeline_stages(site, Plan(strategy="chunked", chunks=16, transport="host_staged"), H200)
    ends = schedule(stages).end_ms
    last_launch_issued = max(e for s, e in zip(stages, ends) if s.name.startswith("issue:gemm"))
    first_copy_start = next(e - s.duration_ms for s, e in zip(stages, ends) if s.name == "copy_d2h[0]")
    assert first_copy_start < last_launch_issued  # the first copy runs while later GEMMs are still being issued

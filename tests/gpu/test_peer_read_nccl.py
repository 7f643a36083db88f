"""all_gather_matmul with ``tile_fused`` over ``transport="peer_read"`` on 2 GPUs (NCCL + symmetric
memory): the GEMM reads the peer's rows over NVLink. fp32 and bf16; rows per rank a multiple of
the tile height and not; one and two Bs; with and without the gathered A; gathered along dim 0,
a middle dim and the last dim (the last runs the copy-engine fallback); two calls per case (the
second reuses the symmetric buffers and must re-synchronise the readiness flags), all against
the one-process reference (tests/gpu/_nccl_cases.py).

Run on a machine with >= 2 GPUs: ``python -m pytest tests/gpu/test_peer_read_nccl.py -q``."""

from __future__ import annotations

import pytest
from _two_gpus import SEED, require_two_gpus

require_two_gpus()

from _nccl_cases import run_plans  # noqa: E402

pytestmark = pytest.mark.timeout(600)
PLANS = [{"strategy": "tile_fused", "transport": "peer_read", "chunks": 1}]


CASES = [
    # kind, shape per rank, dim, ns, extra
    ("ag_mm", (512, 192), 0, (320,), {"return_A": True}),      # whole 128-row tiles
    ("ag_mm", (1000, 136), 0, (300, 64), {"return_A": False}),  # uneven rows and columns, two Bs
    ("ag_mm", (3, 50, 40), 1, (24,), {"return_A": True}),       # a middle dim, 150 rows per rank
    ("ag_mm", (37, 40), 1, (24,), {"return_A": False}),         # last dim: copy-engine fallback
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("kind,shape,dim,ns,extra", CASES, ids=[f"{'x'.join(map(str, c[1]))}-d{c[2]}" for c in CASES])
def test_peer_read_all_gather_matmul(pool2, kind, shape, dim, ns, extra, dtype):
    case = dict(kind=kind, shape=shape, dim=dim, ns=ns, dtype=dtype, seed=SEED, plans=PLANS, **extra)
    results = pool2.run(run_plans, case)
    assert len(results[0]) == len(results[1]) == 2 * (len(ns) + extra["return_A"])
    print(f"\npeer_read {shape} dim {dim} {dtype}: worst error {max(e for _, e in results[0]):.2g}")

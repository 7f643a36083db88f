"""The operators on 2 GPUs with NCCL: every strategy x transport (collective, p2p, copy_engine,
host_staged) x chunk count, fp32 and bf16, gathered / scattered along dim 0 and the last dim,
shapes small and odd (fallback paths) and tile-aligned (the Triton kernels), against the reference.

Run on a machine with >= 2 GPUs: ``python -m pytest tests/gpu/test_ops_nccl.py -q``."""

from __future__ import annotations

import pytest
from _two_gpus import SEED, require_two_gpus

require_two_gpus()

from _nccl_cases import run_back_to_back, run_plans, run_unsupported_transport  # noqa: E402

pytestmark = pytest.mark.timeout(900)


CASES = [
    # kind, shape, dim, ns, extra: tile-aligned shapes reach the kernels, odd ones the fallbacks
    ("ag_mm", (256, 192), 0, (320,), {"return_A": True}),
    ("ag_mm", (3, 50, 40), 1, (24, 17), {"return_A": True}),
    ("ag_mm", (37, 40), 1, (24,), {"return_A": False}),
    ("mm_rs", (512, 192), 0, (320,), {"reduce_op": "sum"}),
    ("mm_rs", (6, 8, 40), 1, (24,), {"reduce_op": "avg"}),
    ("mm_rs", (33, 40), 1, (24,), {"reduce_op": "sum"}),
    ("mm_ar", (384, 192), 0, (320,), {"reduce_op": "sum"}),
    ("mm_ar", (2, 7, 40), 0, (33,), {"reduce_op": "avg"}),
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("kind,shape,dim,ns,extra", CASES, ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}-d{c[2]}"
                                                              for c in CASES])
def test_every_plan_on_nccl(pool2, kind, shape, dim, ns, extra, dtype):
    case = dict(kind=kind, shape=shape, dim=dim, ns=ns, dtype=dtype, seed=SEED, **extra)
    results = pool2.run(run_plans, case)
    assert len(results[0]) == len(results[1]) > 0
    print(f"\n{kind} {shape} dim {dim} {dtype}: {len(results[0])} checks, worst error "
          f"{max(e for _, e in results[0]):.2g}")


def test_tile_fused_names_its_transport_on_every_rank(pool2):
    pool2.run_expect_error(run_unsupported_transport, "mm_ar", exc_type=ValueError,
                           match="transport='copy_engine'")


COPY_ENGINE_PLANS = [{"strategy": "chunked", "transport": "copy_engine", "chunks": c} for c in (1, 3)]


@pytest.mark.parametrize("protocol", ["push", "pull", "put"])
@pytest.mark.parametrize("kind,shape,dim,ns,extra", CASES[:6], ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}-d{c[2]}"
                                                                    for c in CASES[:6]])
def test_copy_engine_protocols(pool2, kind, shape, dim, ns, extra, protocol):
    """Every peer protocol of chunked/copy_engine (``Plan.protocol``; where a call has no form of it, the
    automatic choice runs), against the reference."""
    case = dict(kind=kind, shape=shape, dim=dim, ns=ns, dtype="bfloat16", seed=SEED, plans=COPY_ENGINE_PLANS,
                protocol=protocol, **extra)
    results = pool2.run(run_plans, case)
    assert len(results[0]) == len(results[1]) > 0


@pytest.mark.parametrize("kind,chunks,protocol", [("ag_mm", 1, "pull"), ("ag_mm", 2, "pull"), ("ag_mm", 1, "put"),
                                                  ("ag_mm", 2, "push"), ("mm_rs", 1, "pull"), ("mm_rs", 2, "push")])
def test_copy_engine_back_to_back(pool2, kind, chunks, protocol):
    """Eight calls with fresh inputs, two shape classes interleaved, no sync between calls."""
    case = dict(kind=kind, dtype="bfloat16", plan={"strategy": "chunked", "transport": "copy_engine",
                                                   "chunks": chunks},
                rows=(256, 96), k=192, n=320, calls=8, seed=SEED, protocol=protocol)
    counts = pool2.run(run_back_to_back, case)
    assert counts[0] == counts[1] == (16 if kind == "ag_mm" else 8)


PULL_SCATTER = [{"strategy": "chunked", "transport": "copy_engine", "chunks": 1}]
EPILOGUE_CASES = [
    # blocks large enough for a fused part on an H200 (4096 rows; 4095: not a multiple of the row tile)
    ("mm_rs", (8192, 2048), 0, (8192,), {"reduce_op": "sum"}),
    ("mm_rs", (8190, 2048), 0, (8192,), {"reduce_op": "avg"}),
    ("mm_rs", (4096, 2048), 1, (16384,), {"reduce_op": "sum"}),
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("kind,shape,dim,ns,extra", EPILOGUE_CASES, ids=[f"{'x'.join(map(str, c[1]))}-d{c[2]}"
                                                                       for c in EPILOGUE_CASES])
def test_pull_scatter_sums_in_the_gemm_epilogue(pool2, kind, shape, dim, ns, extra, dtype):
    """The one-piece pull mm_rs with its own block cut into plain and fused rows (the fused rows' partials
    pulled into the output, added by addmm_), against the reference, on blocks big enough to be cut."""
    from hocket.cost.epilogue import epilogue_split

    rows = shape[0] // 2 if dim == 0 else shape[0]
    cols = ns[0] if dim == 0 else ns[0] // 2
    assert epilogue_split(rows, shape[-1], cols, sources=1, itemsize=2, tflops=989.0, gbps=450.0, sms=132)[1] > 0
    case = dict(kind=kind, shape=shape, dim=dim, ns=ns, dtype=dtype, seed=SEED, plans=PULL_SCATTER, protocol="pull",
                **extra)
    results = pool2.run(run_plans, case)
    assert len(results[0]) == len(results[1]) == 2


HOST_STAGED_PLANS = [{"strategy": "sequential", "transport": "host_staged", "chunks": 1},
                     {"strategy": "chunked", "transport": "host_staged", "chunks": 3},
                     {"strategy": "chunked", "transport": "host_staged", "chunks": 2, "order": "local_first"}]


HALF_MIB = 2**19


@pytest.mark.parametrize("kind,shape,dim,ns,extra", CASES, ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}-d{c[2]}"
                                                              for c in CASES])
def test_host_staged_relay(pool2, kind, shape, dim, ns, extra):
    """The host-staged relay (stream-written and stream-awaited slot flags, receives pipelined per
    message), against the reference."""
    plans = [p for p in HOST_STAGED_PLANS if kind != "mm_ar" or "order" not in p]
    case = dict(kind=kind, shape=shape, dim=dim, ns=ns, dtype="bfloat16", seed=SEED, plans=plans, **extra)
    results = pool2.run(run_plans, case)
    assert len(results[0]) == len(results[1]) > 0


LOCAL_FIRST_PLANS = [{"strategy": "chunked", "transport": "host_staged", "chunks": c, "order": "local_first"}
                     for c in (1, 3, 5)]


@pytest.mark.parametrize("kind,shape,dim,ns,extra", [c for c in CASES if c[0] != "mm_ar"],
                         ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}-d{c[2]}" for c in CASES if c[0] != "mm_ar"])
def test_host_staged_local_first_calls(pool2, kind, shape, dim, ns, extra):
    """Own-data-first pipelines over the relay in one call (messages cut at the pieces' edges, 0.25 MiB
    messages so a piece spans several), 1, 3 and 5 pieces, against the reference."""
    case = dict(kind=kind, shape=shape, dim=dim, ns=ns, dtype="bfloat16", seed=SEED, plans=LOCAL_FIRST_PLANS,
                sizes={"piece_bytes": HALF_MIB // 2}, **extra)
    results = pool2.run(run_plans, case)
    assert len(results[0]) == len(results[1]) > 0


@pytest.mark.parametrize("kind,chunks", [("ag_mm", 4), ("mm_rs", 3)])
def test_host_staged_one_call_back_to_back(pool2, kind, chunks):
    """Twelve own-data-first calls in one relay call each, two shape classes interleaved, no sync between
    calls: a later call's GEMMs and receives never touch buffers an earlier call still reads."""
    case = dict(kind=kind, dtype="bfloat16", plan={"strategy": "chunked", "transport": "host_staged",
                                                   "chunks": chunks, "order": "local_first"},
                rows=(1536, 96), k=1024, n=320, calls=12, seed=SEED,
                sizes={"piece_bytes": HALF_MIB})
    counts = pool2.run(run_back_to_back, case)
    assert counts[0] == counts[1] == (24 if kind == "ag_mm" else 12)


@pytest.mark.parametrize("slots", [1, 8])
@pytest.mark.parametrize("kind,chunks", [("ag_mm", 3), ("mm_rs", 2)])
def test_host_staged_slot_counts(pool2, kind, chunks, slots):
    """TransportSizes.slots: one slot (every message waits for the peers' read of the one before) and
    eight (a batch of up to eight messages), twelve calls back to back, against the reference."""
    case = dict(kind=kind, dtype="bfloat16", plan={"strategy": "chunked", "transport": "host_staged",
                                                   "chunks": chunks},
                rows=(1536, 96), k=1024, n=320, calls=12, seed=SEED,
                sizes={"slots": slots, "piece_bytes": HALF_MIB})
    counts = pool2.run(run_back_to_back, case)
    assert counts[0] == counts[1] == (24 if kind == "ag_mm" else 12)


@pytest.mark.parametrize("kind,chunks", [("ag_mm", 2), ("mm_rs", 3), ("mm_ar", 2)])
def test_host_staged_back_to_back(pool2, kind, chunks):
    """Twelve calls (more messages than the relay has slots, so slots are reused behind the peers'
    reads), two shape classes interleaved, 0.5 MiB messages so large calls cut into several."""
    case = dict(kind=kind, dtype="bfloat16", plan={"strategy": "chunked", "transport": "host_staged",
                                                   "chunks": chunks},
                rows=(1536, 96), k=1024, n=320, calls=12, seed=SEED,
                sizes={"piece_bytes": HALF_MIB})
    counts = pool2.run(run_back_to_back, case)
    assert counts[0] == counts[1] == (24 if kind == "ag_mm" else 12)

"""Which rows of this rank's own block take the peers' partials through the GEMM's epilogue (plain Python).

A matmul + reduce-scatter ends with this rank's own block plus the partials its peers computed for it.
Added in a separate pass after the last GEMM, that sum reads two blocks and writes one with nothing
beside it: on an H200 ~40-55 us for the 50-64 MiB blocks of the large Llama-style cases, 1-2% of the
call. Where a peer's partial lands in the output *before* this rank's GEMM of those rows runs, the GEMM
adds it itself: ``out.addmm_(A_rows, B)`` (beta = 1: the vendor GEMM reads the output in its epilogue).

So the own block is cut in two (:func:`hocket.strategies.pieces.own_block_split`, which the executor and
the cost model both call):

* ``plain`` rows, multiplied first, into the output, while the copy engine brings the partials of the
  other rows;
* ``fused`` rows, multiplied by ``addmm_`` once their partials have landed in the output;

and the plain rows' partials are added in a small pass at the end. Two GEMMs where there was one must
not cost a wave more: the vendor GEMM runs its output tiles in waves over the SMs, so the cut is where
``waves(plain) + waves(fused) == waves(rows)`` (128x256 tiles; 1xH200, on a 4096x7168x8192 block the
two-part sum took 0.608-0.618 ms at cuts of 512, 1024 and 1536 rows, one wave less than at 384, 768 or
1408 rows, 0.630-0.669, against 0.639 for the GEMM and a pass;
benchmarks/results/validation/2026-12-01_measured-rules.md). The plain GEMM has to last as long
as the fused rows' transfer, or the GPU waits for it. Per row, the transfer of ``sources`` partials
takes ``sources * itemsize * cols / link`` and the GEMM ``2 * k * cols / flops``, so the plain rows need
``plain >= margin * ratio * fused`` with ``ratio = sources * itemsize * flops / (2 * k * link)``; the
margin covers the copy slowing beside the GEMM and the GEMM running below peak. One definition for the
executor (:mod:`hocket.ops.lowering.peer_pull`) and the cost model (:mod:`hocket.strategies.peer_pipelines`),
from the same device peak and link rate of the cluster description, so the price cuts the rows the
call cuts.
"""

from __future__ import annotations

import math

EPILOGUE_MARGIN = 1.5
"""How much longer than the fused rows' transfer (at the nominal rates) the plain GEMM is made."""
EPILOGUE_ALIGN = 128
"""The cut between plain and fused rows is a multiple of this (a GEMM row tile)."""
TILE_ROWS, TILE_COLS = 128, 256
"""The output tile the wave count assumes (what the vendor library runs on large bf16 GEMMs)."""
MIN_FUSED_ROWS = 256
"""Fewer fused rows than this are not worth a second GEMM launch: the whole block is plain."""
MIN_FUSED_BYTES = 16 * 2**20
"""Nor a fused part whose partials are smaller than this (16 MiB: the pass over them takes ~10 us on an
H200, about what the second GEMM launch, copy and event add on the host). Two 2xH200 leases measured the
0.3 ms case mm_rs 8192x2048x4096, whose cut fuses 8 MiB, 0.329 against 0.362 ms and 0.297 against 0.266 with
the pass: no gain beyond that noise, where the large cases (33-48 MiB fused) gained 61-87 us on both leases
(benchmarks/results/validation/2026-12-01_measured-rules.md)."""
DEFAULT_TFLOPS = 989.0
DEFAULT_GBPS = 450.0
"""Rates used when the cluster description has none (an H100/H200 SXM's dense bf16 peak and NVLink)."""


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        raise ValueError(f"{name}={value!r} must be a finite number > 0")
    return float(value)


def waves(rows: int, cols: int, sms: int) -> int:
    """Waves of ``TILE_ROWS x TILE_COLS`` output tiles a ``rows x cols`` GEMM runs on ``sms`` SMs."""
    return -(-(-(-rows // TILE_ROWS) * -(-cols // TILE_COLS)) // sms)


def epilogue_split(rows: int, k: int, cols: int, *, sources: int, itemsize: int, tflops: float, gbps: float,
                   sms: int | None = None, margin: float = EPILOGUE_MARGIN, align: int = EPILOGUE_ALIGN,
                   min_fused_bytes: int = MIN_FUSED_BYTES) -> tuple[int, int]:
    """``(plain, fused)`` rows of an own block of ``rows x cols`` (module docstring): the fewest plain
    rows, a multiple of ``align``, whose GEMM covers the fused rows' transfer and, given ``sms``, whose
    two GEMMs run no more waves than one; ``fused == 0`` (the whole block plain, summed in a pass) when
    no cut leaves at least ``MIN_FUSED_ROWS`` fused rows holding ``min_fused_bytes`` of partials.

    ``k``: the GEMM's inner dimension; ``sources``: peers whose partials this rank receives;
    ``itemsize``: bytes per element; ``tflops``/``gbps``: the device's dense peak for the dtype and the
    link's rate per direction; ``sms``: the device's SM count (None: no wave condition)."""
    for name, value in (("rows", rows), ("k", k), ("cols", cols), ("sources", sources), ("itemsize", itemsize),
                        ("align", align)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be an int >= 1")
    if sms is not None and (isinstance(sms, bool) or not isinstance(sms, int) or sms < 1):
        raise ValueError(f"sms={sms!r} must be None or an int >= 1 (the device's SM count)")
    ratio = sources * itemsize * _positive("tflops", tflops) * 1e12 / (2.0 * k * _positive("gbps", gbps) * 1e9)
    scaled = _positive("margin", margin) * ratio
    plain = max(align, math.ceil(rows * scaled / (1.0 + scaled) / align) * align)
    whole = waves(rows, cols, sms) if sms is not None else None
    while rows - plain >= MIN_FUSED_ROWS and (rows - plain) * cols * itemsize >= min_fused_bytes:
        if whole is None or waves(plain, cols, sms) + waves(rows - plain, cols, sms) <= whole:
            return plain, rows - plain
        plain += align
    return rows, 0


def cluster_rates(cluster, rank: int, peers, dtype: str) -> tuple[float, float]:
    """``(tflops, gbps)`` for :func:`epilogue_split` from a ``ClusterSpec``: ``rank``'s dense peak for
    ``dtype`` and the slowest link from it to ``peers``; the defaults where the description has none."""
    tflops = gbps = None
    try:
        tflops = cluster.device(rank).peak(dtype)
        rates = [cluster.link(rank, peer).gbps_per_direction for peer in peers if peer != rank]
        gbps = min(rates) if rates else None
    except (AttributeError, ValueError, IndexError, KeyError):
        pass
    return (tflops or DEFAULT_TFLOPS), (gbps or DEFAULT_GBPS)

"""What ``hocket calibrate`` measures: shape grid, transfer sizes, repetitions."""

from __future__ import annotations

from dataclasses import dataclass

from hocket.core.site import canonical_dtype

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
KiB, MiB = 1024, 1024 * 1024


ISSUE_CHECKPOINTS = ("start", "after_gemm", "after_curves", "end")
"""Where in a calibration the host issue items can be timed, in run order."""
SITTING_CHECKPOINTS = {1: ("end",), 2: ("start", "end"), 3: ("start", "after_curves", "end"), 4: ISSUE_CHECKPOINTS}
"""The checkpoints of ``CalibrateConfig.issue_sittings`` sittings: spread over the run."""


@dataclass(frozen=True, kw_only=True)
class CalibrateConfig:
    """One calibration run. Shapes are (m, k, n) of a single GEMM; each is also timed
    split into ``gemm_chunks`` row chunks (m/c rows each), the chunking penalty."""

    quick: bool
    dtype: str
    gemm_shapes: tuple[tuple[int, int, int], ...]
    gemm_chunks: tuple[int, ...] = (1, 4, 16)
    sizes_bytes: tuple[int, ...]
    collectives: tuple[str, ...] = COLLECTIVES
    contention_shape: tuple[int, int, int]
    contention_bytes: int
    warmup: int = 1
    iters: int = 5
    steady_sizes_bytes: tuple[int, ...] = ()
    """sizes at which every collective is also timed ``steady_reps`` calls back to back per sample
    (the profile's ``collectives_steady``); () skips them."""
    steady_reps: int = 8
    sustained_s: float = 0.0
    """seconds of the grid's fastest whole GEMM run back to back against its burst timing (GPU ranks:
    the profile's ``gemm_sustained``; ``hocket.calibrate.sustained``); 0 skips it."""
    issue_sittings: int = 3
    """GPU ranks: how many times the host issue items are timed, spread over the run (its start, after the
    transfer curves, its end; 2: start and end; 4: also after the GEMM grid); the profile keeps each item's
    median over the sittings (``hocket.calibrate.issue.combine_sittings``). A host's per-item speed
    swings 1.6x within a minute on a lent H200 (three calibrations 30 s apart read host_copy at 32 / 52 /
    36 us, benchmarks/results/h200/2026-12-01_offload-plan-none.md), so a single sitting can catch it in a slow
    spell that the work it prices never sees."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        for shape in self.gemm_shapes + (self.contention_shape,):
            if len(shape) != 3 or any(not isinstance(d, int) or d < 1 for d in shape):
                raise ValueError(f"GEMM shape {shape!r} must be three positive ints (m, k, n)")
        for c in self.gemm_chunks:
            if not isinstance(c, int) or c < 1:
                raise ValueError(f"gemm_chunks has {c!r}; chunk counts must be ints >= 1")
        if not self.sizes_bytes or any(not isinstance(b, int) or b < 1 for b in self.sizes_bytes):
            raise ValueError(f"sizes_bytes={self.sizes_bytes!r} must be non-empty positive byte counts")
        unknown = set(self.collectives) - set(COLLECTIVES)
        if unknown:
            raise ValueError(f"collectives {sorted(unknown)} are unknown; use a subset of {COLLECTIVES}")
        if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in self.steady_sizes_bytes):
            raise ValueError(f"steady_sizes_bytes={self.steady_sizes_bytes!r} must be positive byte counts (or ())")
        if isinstance(self.steady_reps, bool) or not isinstance(self.steady_reps, int) or self.steady_reps < 2:
            raise ValueError(f"steady_reps={self.steady_reps!r} must be an int >= 2 (calls back to back per sample)")
        if self.contention_bytes < 1:
            raise ValueError(f"contention_bytes={self.contention_bytes} must be >= 1")
        if isinstance(self.sustained_s, bool) or not isinstance(self.sustained_s, (int, float)) \
                or not 0 <= self.sustained_s <= 60:
            raise ValueError(f"sustained_s={self.sustained_s!r} must be seconds in [0, 60] (0 skips the "
                             f"sustained GEMM phase; 1-2 s lets a GPU reach its power cap)")
        if isinstance(self.issue_sittings, bool) or not isinstance(self.issue_sittings, int) \
                or not 1 <= self.issue_sittings <= len(ISSUE_CHECKPOINTS):
            raise ValueError(f"issue_sittings={self.issue_sittings!r} must be an int in [1, {len(ISSUE_CHECKPOINTS)}] "
                             f"(times the host issue items are timed over the run)")
        if self.warmup < 0 or self.iters < 1:
            raise ValueError(f"warmup={self.warmup} must be >= 0 and iters={self.iters} >= 1")


def default_config(*, quick: bool, device_type: str, dtype: str | None = None) -> CalibrateConfig:
    """The grid for a CPU or CUDA device; ``quick`` finishes in seconds (CI, tests)."""
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device_type={device_type!r} must be 'cpu' or 'cuda'")
    if device_type == "cpu":
        if quick:
            return CalibrateConfig(quick=True, dtype=dtype or "float32", gemm_shapes=((256, 256, 256),),
                                   gemm_chunks=(1, 4), sizes_bytes=(16 * KiB, 256 * KiB, 2 * MiB),
                                   contention_shape=(256, 256, 256), contention_bytes=1 * MiB,
                                   warmup=1, iters=3, issue_sittings=1)
        return CalibrateConfig(quick=False, dtype=dtype or "float32",
                               gemm_shapes=((512, 512, 512), (1024, 1024, 1024), (2048, 1024, 1024),
                                            (1024, 2048, 512)),
                               # up to 256 MiB: gloo's all-gather/reduce-scatter slow down sharply
                               # past a few MiB, and operator sites move 32-128 MiB
                               gemm_chunks=(1, 4, 16), sizes_bytes=tuple(2 ** e for e in range(12, 29, 2)),
                               contention_shape=(1024, 1024, 1024), contention_bytes=16 * MiB, warmup=2, iters=7)
    if quick:
        return CalibrateConfig(quick=True, dtype=dtype or "bfloat16", gemm_shapes=((4096, 4096, 4096),),
                               gemm_chunks=(1, 4, 16), sizes_bytes=(1 * MiB, 16 * MiB, 64 * MiB),
                               contention_shape=(8192, 8192, 8192), contention_bytes=64 * MiB, warmup=2, iters=5,
                               steady_sizes_bytes=(16 * MiB,), sustained_s=0.5, issue_sittings=1)
    return CalibrateConfig(quick=False, dtype=dtype or "bfloat16",
                           # (8192, 2048, 8192): a shallow k (TP shards of a 4096-wide model); without it the
                           # grid's nearest points have k >= 4096 and a k=2048 GEMM is priced from them
                           gemm_shapes=((8192, 7168, 8192), (8192, 8192, 8192), (4096, 4096, 14336),
                                        (16384, 8192, 1024), (2048, 4096, 4096), (8192, 14336, 4096),
                                        (8192, 2048, 8192)),
                           gemm_chunks=(1, 2, 4, 8, 16, 32), sizes_bytes=tuple(2 ** e for e in range(16, 31, 2)),
                           contention_shape=(8192, 8192, 8192), contention_bytes=256 * MiB, warmup=3, iters=10,
                           steady_sizes_bytes=(4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB), sustained_s=2.0)

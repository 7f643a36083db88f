"""How close an operator's result must be to the reference, per dtype: the one place tests,
``hocket demo`` and ``hocket bench`` read it from.

Errors are measured relative to the reference's largest magnitude (``scale``): an
element passes when ``|actual - expected| <= atol * scale + rtol * |expected|``. bf16 and
fp16 reductions accumulate in the low-precision dtype on gloo and in ring steps, and
each extra rank adds one rounding, so their ``atol`` grows with the world size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hocket.core.site import canonical_dtype


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    rtol: float
    atol: float
    """absolute tolerance in units of the reference's largest magnitude."""


_BASE = {
    "float64": Tolerance(rtol=1e-9, atol=1e-9),
    "float32": Tolerance(rtol=1e-4, atol=2e-5),
    "bfloat16": Tolerance(rtol=1.6e-2, atol=8e-3),
    "float16": Tolerance(rtol=2e-3, atol=1e-3),
}


def tolerance(dtype: object, *, world: int = 1) -> Tolerance:
    """Tolerance for results in ``dtype`` produced by ``world`` ranks."""
    name = canonical_dtype(dtype)
    if name not in _BASE:
        raise ValueError(f"dtype={dtype!r} has no tolerance; hocket ops run in {sorted(_BASE)}")
    base = _BASE[name]
    if name in ("bfloat16", "float16"):
        return Tolerance(rtol=base.rtol, atol=base.atol * max(1, world))
    return Tolerance(rtol=base.rtol, atol=base.atol * max(1, world) ** 0.5)


def max_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest absolute difference divided by the reference's largest magnitude (at least 1)."""
    if actual.shape != expected.shape:
        raise ValueError(f"shapes differ: actual {tuple(actual.shape)} vs expected {tuple(expected.shape)}")
    a, e = actual.double(), expected.double()
    scale = max(1.0, float(e.abs().max())) if e.numel() else 1.0
    return float((a - e).abs().max()) / scale if e.numel() else 0.0


def within_tolerance(actual: torch.Tensor, expected: torch.Tensor, *, world: int = 1) -> bool:
    """True when every element of ``actual`` is within ``expected.dtype``'s tolerance."""
    tol = tolerance(expected.dtype, world=world)
    a, e = actual.double(), expected.double()
    scale = max(1.0, float(e.abs().max())) if e.numel() else 1.0
    return bool(((a - e).abs() <= tol.atol * scale + tol.rtol * e.abs()).all())


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, world: int = 1, what: str = "result") -> None:
    """Raise AssertionError naming ``what``, the error found and the tolerance allowed."""
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {tuple(actual.shape)} differs from the reference's "
                             f"{tuple(expected.shape)}")
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{what}: dtype {actual.dtype} differs from the reference's {expected.dtype}")
    if not within_tolerance(actual, expected, world=world):
        tol = tolerance(expected.dtype, world=world)
        raise AssertionError(f"{what}: max error {max_error(actual, expected):.3g} (relative to the largest "
                             f"reference value) exceeds {expected.dtype} tolerance rtol={tol.rtol:g} "
                             f"atol={tol.atol:g} at world={world}")

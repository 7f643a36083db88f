"""Finite-difference terms for ``step_fn``s of ``hocket.ops.stencil_steps`` (pure torch, translation-invariant).

:func:`second_derivative_weights` are the central weights of ``d^2/dx^2`` of order ``2 * radius``:
``w_k = 2 (-1)^(k+1) (r!)^2 / (k^2 (r-k)! (r+k)!)`` for ``k >= 1`` and ``w_0 = -2 sum w_k`` (radius 1:
1, -2, 1; radius 2: -1/12, 4/3, -5/2, 4/3, -1/12). :func:`laplacian` takes a block padded by ``radius`` on
its first ``padded_dims`` dims (the split dims, padded by the operator) and returns the Laplacian on the
unpadded cells; the other dims it pads itself (zeros, or wrapped when ``periodic``).
"""

from __future__ import annotations

import math

import torch

from hocket.ops.stencil_fields import pad_dims


def second_derivative_weights(radius: int) -> tuple[float, ...]:
    """``(w_0, w_1, ..., w_radius)`` (module docstring)."""
    if not isinstance(radius, int) or radius < 1:
        raise ValueError(f"radius={radius!r} must be an int >= 1")
    r = radius
    w = [2 * (-1) ** (k + 1) * math.factorial(r) ** 2 / (k * k * math.factorial(r - k) * math.factorial(r + k))
         for k in range(1, r + 1)]
    return (-2 * sum(w), *w)


def laplacian(x: torch.Tensor, radius: int, padded_dims: int, *, periodic: bool = False,
              spacing: float = 1.0) -> torch.Tensor:
    """The order-``2 * radius`` Laplacian of ``x`` over every dim (module docstring for the padding)."""
    r, ndim = radius, x.dim()
    rest = list(range(padded_dims, ndim))
    if rest:  # the dims the operator does not split: pad them here
        x = x.movedim(rest, list(range(len(rest))))
        x = pad_dims(x, r, len(rest), periodic=periodic)
        x = x.movedim(list(range(len(rest))), rest)
    weights = second_derivative_weights(r)
    core = tuple(slice(r, n - r) for n in x.shape)
    out = (weights[0] * ndim) * x[core]
    for d in range(ndim):
        n = x.shape[d]
        for k in range(1, r + 1):
            lo = list(core)
            hi = list(core)
            lo[d] = slice(r - k, n - r - k)
            hi[d] = slice(r + k, n - r + k)
            out = out + weights[k] * (x[tuple(lo)] + x[tuple(hi)])
    return out / (spacing * spacing)

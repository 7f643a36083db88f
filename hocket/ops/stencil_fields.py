"""The fields of a stencil call (``hocket.ops.stencil_steps``) and the whole-grid padding rules.

A field of ``fields`` is one of:

* a plain tensor: **exchanged**. ``step_fn`` gets it padded by ``radius`` on each split side (halo cells
  from the neighbours, zeros outside a ``fixed`` grid, wrapped around a ``periodic`` one) and returns its
  next interior;
* :class:`Carried` ``(tensor)``: **carried**, not exchanged (``u(t - 1)`` of a wave equation). ``step_fn``
  gets it unpadded, covering the cells it computes, and returns its next value there;
* :class:`Static` ``(tensor)``: **static**, not exchanged, never changed (a coefficient such as ``c^2``).
  ``step_fn`` gets it unpadded, covering the cells it computes, and returns nothing for it.

``step_fn(inputs)`` takes one entry per field, in order, and returns one tensor per exchanged or carried
field, in order (static fields omitted).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

ROLES = ("exchanged", "carried", "static")


@dataclass(frozen=True)
class Carried:
    """A field carried from step to step without an exchange (module docstring)."""

    tensor: torch.Tensor


@dataclass(frozen=True)
class Static:
    """A field that never changes and is never exchanged (module docstring)."""

    tensor: torch.Tensor


def split_fields(fields: object) -> tuple[list[torch.Tensor], list[str]]:
    """``(tensors, roles)`` of a ``fields`` tuple; errors name the entry."""
    if isinstance(fields, (torch.Tensor, Carried, Static)) or not isinstance(fields, Sequence) or not fields:
        raise ValueError(f"fields must be a non-empty tuple of this rank's blocks (tensors, Carried(t) or "
                         f"Static(t)), got {type(fields).__name__}")
    tensors, roles = [], []
    for i, f in enumerate(fields):
        role, t = ("carried", f.tensor) if isinstance(f, Carried) else \
            ("static", f.tensor) if isinstance(f, Static) else ("exchanged", f)
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"fields[{i}] is a {type(t).__name__}; each field must be a torch.Tensor "
                             f"(or Carried/Static of one)")
        tensors.append(t)
        roles.append(role)
    if "exchanged" not in roles:
        raise ValueError("fields has no exchanged field (a plain tensor); a stencil needs at least one")
    first = tensors[0]
    for i, t in enumerate(tensors):
        if t.shape != first.shape:
            raise ValueError(f"fields[{i}] has shape {tuple(t.shape)} but fields[0] has {tuple(first.shape)}; "
                             f"every field is a block of the same grid")
        if t.dtype != first.dtype or t.device != first.device:
            raise ValueError(f"fields[{i}] is {t.dtype} on {t.device} but fields[0] is {first.dtype} on "
                             f"{first.device}; every field must have one dtype and device")
    return tensors, roles


def rewrap(tensors: Sequence[torch.Tensor], roles: Sequence[str]) -> tuple:
    """The ``fields`` tuple of ``tensors`` with ``roles`` (the operator's return value)."""
    wrap = {"exchanged": lambda t: t, "carried": Carried, "static": Static}
    return tuple(wrap[role](t) for t, role in zip(tensors, roles))


def pad_dims(x: torch.Tensor, width: int, dims: int, *, periodic: bool) -> torch.Tensor:
    """``x`` padded by ``width`` cells on both sides of each of its first ``dims`` dims: zeros, or the
    cells wrapped around (``periodic``; ``width`` at most the dim's size)."""
    for d in range(dims):
        n = x.shape[d]
        if periodic:
            if width > n:
                raise ValueError(f"a periodic halo of {width} cells is wider than the grid's dim {d} ({n} cells)")
            x = torch.cat([x.narrow(d, n - width, width), x, x.narrow(d, 0, width)], dim=d)
        else:
            shape = list(x.shape)
            shape[d] = width
            zeros = x.new_zeros(shape)
            x = torch.cat([zeros, x, zeros], dim=d)
    return x


def call_step(step_fn: Callable, inputs: tuple, expected: Sequence[tuple[int, ...]]) -> tuple[torch.Tensor, ...]:
    """``step_fn(inputs)``, checked: a tuple of tensors of the ``expected`` shapes."""
    out = step_fn(inputs)
    if isinstance(out, torch.Tensor):
        out = (out,)
    if not isinstance(out, (tuple, list)) or len(out) != len(expected):
        raise ValueError(f"step_fn returned {type(out).__name__} of {len(out) if isinstance(out, (tuple, list)) else 1} "
                         f"entries; it must return a tuple of {len(expected)} tensors (one per exchanged or "
                         f"carried field, in order)")
    for i, (t, shape) in enumerate(zip(out, expected)):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(shape):
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"step_fn returned {got} for output {i}; expected the next interior {tuple(shape)} "
                             f"(the input padded by radius on each split side, less 2 * radius)")
    return tuple(out)


def reference_steps(fields: Sequence, step_fn: Callable, radius: int, split_dims: int, *, steps: int = 1,
                    boundary: str = "fixed") -> tuple:
    """The same ``steps`` on the whole grid in one process: each step pads every exchanged field by
    ``radius`` on its first ``split_dims`` dims (zeros for ``fixed``, wrapped for ``periodic``) and calls
    ``step_fn`` once; carried and static fields go in unpadded."""
    tensors, roles = split_fields(tuple(fields))
    tensors = list(tensors)
    out_index = [i for i, role in enumerate(roles) if role != "static"]
    shape = tuple(tensors[0].shape)
    for _ in range(steps):
        inputs = tuple(pad_dims(t, radius, split_dims, periodic=boundary == "periodic") if role == "exchanged"
                       else t for t, role in zip(tensors, roles))
        outs = call_step(step_fn, inputs, [shape] * len(out_index))
        for i, t in zip(out_index, outs):
            tensors[i] = t
    return rewrap(tensors, roles)

"""Grouped GEMMs: ``torch._grouped_mm`` where the build has it, a loop of ``torch.mm`` otherwise.

``grouped_mm(x [rows, k], w [E, k, n], offs int32 [E])``: group ``e`` is rows ``offs[e-1] .. offs[e]`` of ``x``
(``offs[-1]`` of 0 for ``e = 0``) times ``w[e]``; rows at or past ``offs[-1]`` come back as zeros. Empty groups
(equal neighbouring offsets) and zero rows are allowed. Autograd flows to ``x`` and ``w`` on both paths.

``grouped_wgrad(a [rows, k], b [rows, n], offs)``: the weight gradient ``[E, k, n]``, ``a_e^T @ b_e`` per group
(rows past ``offs[-1]`` ignored).

Backend rules (probed once per (device type, dtype) with a tiny call and remembered; the probe reads its result
back on the CPU only): ``torch._grouped_mm`` runs float32, bfloat16 and float16 where the build has it (CPU on
torch 2.13: not float64); a call also needs every row stride and data pointer 16-byte aligned (``k`` and ``n``
multiples of 16 bytes), else the loop runs. The loop reads ``offs`` on the host (a sync on a device); the
grouped path reads nothing there.
``offs`` must be int32. Its own backward rejects a stride-0 gradient and leaves the input gradient's tail rows
uninitialised, so the backward here makes the gradient contiguous and runs the two grouped GEMMs itself.
"""

from __future__ import annotations

import torch

GROUPED = "torch._grouped_mm"
LOOP = "mm_loop"

_PROBED: dict[tuple[str, torch.dtype], bool] = {}


def _probe(device: torch.device, dtype: torch.dtype) -> bool:
    key = (device.type, dtype)
    found = _PROBED.get(key)
    if found is None:
        fn = getattr(torch, "_grouped_mm", None)
        found = False
        if fn is not None:
            try:
                x = torch.ones(4, 8, device=device, dtype=dtype)
                w = torch.ones(2, 8, 8, device=device, dtype=dtype)
                offs = torch.tensor([2, 4], dtype=torch.int32, device=device)
                y = fn(x, w, offs=offs)
                # the value is checked where reading it is free (the CPU); elsewhere the probe reads nothing on
                # the host, so a first call under splits="padded" or CUDA-graph capture does not sync
                found = y.shape == (4, 8) and (device.type != "cpu" or float(y[0, 0]) == 8.0)
            except (RuntimeError, NotImplementedError, TypeError):
                found = False
        _PROBED[key] = found
    return found


def grouped_mm_backend(device: torch.device | str, dtype: torch.dtype) -> str:
    """``"torch._grouped_mm"`` when this build runs it for ``device``'s type and ``dtype``, else ``"mm_loop"``
    (aligned shapes only use it: see the module docstring)."""
    return GROUPED if _probe(torch.device(device), dtype) else LOOP


def _aligned(*ts: torch.Tensor) -> bool:
    for t in ts:
        if t.data_ptr() % 16:
            return False
        for stride in t.stride():
            if stride != 1 and (stride * t.element_size()) % 16:
                return False
    return True


def _fits(width: int, t: torch.Tensor) -> bool:
    """Whether an output row of ``width`` elements of ``t``'s dtype is a multiple of 16 bytes."""
    return (width * t.element_size()) % 16 == 0


def _zero_tail(y: torch.Tensor, offs: torch.Tensor, end: int | None = None) -> torch.Tensor:
    """``y`` with rows at or past ``offs[-1]`` set to zero, in place (``_grouped_mm`` leaves them
    uninitialised). ``end``: ``offs[-1]`` when the caller knows it on the host: a slice is zeroed (nothing when
    it is every row); else one masked fill computed on ``offs``' device (no host sync)."""
    if end is not None:
        if end < y.shape[0]:
            y[end:].zero_()
        return y
    tail = torch.arange(y.shape[0], device=y.device).unsqueeze(1) >= offs[-1].to(torch.int64)
    return y.masked_fill_(tail, 0)


class _Grouped(torch.autograd.Function):
    """``torch._grouped_mm`` with the tail rows zeroed, forward and backward (its own backward leaves the input
    gradient's tail uninitialised and rejects stride-0 gradients)."""

    @staticmethod
    def forward(ctx, x, w, offs, end):
        ctx.save_for_backward(x, w, offs)
        ctx.end = end
        return _zero_tail(torch._grouped_mm(x, w, offs=offs), offs, end)

    @staticmethod
    def backward(ctx, grad):
        x, w, offs = ctx.saved_tensors
        grad = grad.contiguous()
        dx = dw = None
        if ctx.needs_input_grad[0]:
            wt = w.transpose(1, 2)
            if _aligned(grad, wt) and _fits(x.shape[1], x):
                dx = _zero_tail(torch._grouped_mm(grad, wt, offs=offs), offs, ctx.end)
            else:
                dx = _loop(grad, wt, offs)
        if ctx.needs_input_grad[1]:
            dw = grouped_wgrad(x, grad, offs)
        return dx, dw, None, None


def _check(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> None:
    if x.dim() != 2 or w.dim() != 3:
        raise ValueError(f"grouped_mm: x must be [rows, k] and w [E, k, n]; got x {tuple(x.shape)}, "
                         f"w {tuple(w.shape)}")
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"grouped_mm: x has k={x.shape[1]} but w has shape {tuple(w.shape)} (k={w.shape[1]}); "
                         f"w must be [E, {x.shape[1]}, n]")
    if offs.dim() != 1 or offs.shape[0] != w.shape[0] or offs.dtype != torch.int32:
        raise ValueError(f"grouped_mm: offs must be int32 [E={w.shape[0]}] cumulative row ends, got "
                         f"{offs.dtype} {tuple(offs.shape)}; build it with torch.cumsum(counts, 0).to(torch.int32)")
    if x.dtype != w.dtype:
        raise ValueError(f"grouped_mm: w.dtype={w.dtype} differs from x.dtype={x.dtype}; cast one to the other")


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, *, end: int | None = None) -> torch.Tensor:
    """``[rows, n]``: group ``e``'s rows of ``x`` times ``w[e]``; rows past ``offs[-1]`` are zeros (module
    docstring). ``end``: ``offs[-1]`` when the caller knows it on the host (the exchanged split sizes), which
    saves the masked pass that zeroes the tail."""
    _check(x, w, offs)
    if end is not None and not 0 <= end <= x.shape[0]:
        raise ValueError(f"grouped_mm: end={end} must be offs[-1], between 0 and x's {x.shape[0]} rows")
    rows, n = x.shape[0], w.shape[2]
    if rows == 0 or w.shape[0] == 0:
        return torch.mm(x, w[0]) if w.shape[0] else x.new_zeros((rows, n))
    if _probe(x.device, x.dtype) and _aligned(x, w) and _fits(n, x):
        if x.requires_grad or w.requires_grad:
            return _Grouped.apply(x, w, offs, end)
        # rows past offs[-1] come back uninitialised (and a zero weight times garbage may be NaN)
        return _zero_tail(torch._grouped_mm(x, w, offs=offs), offs, end)
    return _loop(x, w, offs)


def _loop(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    ends = offs.tolist()
    parts, start = [], 0
    for e, end in enumerate(ends):
        end = max(start, min(int(end), x.shape[0]))
        if end > start:
            parts.append(torch.mm(x[start:end], w[e]))
        start = end
    if start < x.shape[0]:
        parts.append(x.new_zeros((x.shape[0] - start, w.shape[2])))
    if not parts:
        return x.new_zeros((x.shape[0], w.shape[2]))
    return torch.cat(parts) if len(parts) > 1 else parts[0]


def grouped_wgrad(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, *, out: torch.Tensor | None = None,
                  ends: tuple[int, ...] | None = None) -> torch.Tensor:
    """``[E, k, n]``: ``a[rows of e].T @ b[rows of e]`` per group ``e`` of ``offs`` (no autograd needed).

    ``out``: add the products into it and return it. On the CPU with ``ends`` (``offs`` on the host) each sum
    happens inside its GEMM (``addmm_`` per group, no extra pass over ``out``); else one grouped GEMM and an
    add."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(f"grouped_wgrad: a [rows, k] and b [rows, n] must share rows; got {tuple(a.shape)}, "
                         f"{tuple(b.shape)}")
    groups = offs.shape[0]
    k, n = a.shape[1], b.shape[1]
    if out is not None:
        if tuple(out.shape) != (groups, k, n):
            raise ValueError(f"grouped_wgrad: out has shape {tuple(out.shape)}; it must be [{groups}, {k}, {n}]")
        if ends is not None and a.device.type == "cpu":
            at, start = a.t(), 0
            for e, end in enumerate(ends):
                end = max(start, min(end, a.shape[0]))
                if end > start:
                    out[e].addmm_(at[:, start:end], b[start:end])
                start = end
            return out
        return out.add_(grouped_wgrad(a, b, offs))
    if a.shape[0] == 0 or groups == 0:
        return a.new_zeros((groups, k, n))
    at = a.t()
    if _probe(a.device, a.dtype) and _aligned(at, b) and _fits(n, a) and _fits(k * n, a):
        return torch._grouped_mm(at, b, offs=offs)
    out = a.new_zeros((groups, k, n))
    start = 0
    for e, end in enumerate(offs.tolist()):
        end = max(start, min(int(end), a.shape[0]))
        if end > start:
            torch.mm(at[:, start:end], b[start:end], out=out[e])
        start = end
    return out

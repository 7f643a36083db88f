"""Local input checks of ``hocket.ops.moe_experts``: no communication, run before any.

Every error is a ``ValueError`` (bad value or shape) or ``TypeError`` (wrong kind of object) naming the argument,
what was given and the fix. Shape checks come first; the data checks (expert ids in ``0 .. E - 1``, no expert
twice in one token's row) read ``topk_ids`` (a device sync on a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hocket.ops.validation import MATMUL_DTYPES

INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


@dataclass(frozen=True)
class MoeShape:
    tokens: int
    hidden: int
    ffn: int
    e_local: int
    experts: int
    topk: int
    dtype: torch.dtype


def _tensor(name: str, t: object, dims: int, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor ({what}), got {type(t).__name__}")
    if t.dim() != dims:
        raise ValueError(f"{name} must be {what} ({dims} dims), got shape {tuple(t.shape)}")
    return t


def check_shapes(x, topk_ids, topk_weights, w_gate_up, w_down, world: int, shared=None) -> MoeShape:
    """The shape, dtype and device checks; returns the call's sizes."""
    x = _tensor("x", x, 2, "[tokens, hidden]: this rank's tokens")
    topk_ids = _tensor("topk_ids", topk_ids, 2, "[tokens, k]: the router's expert ids")
    topk_weights = _tensor("topk_weights", topk_weights, 2, "[tokens, k]: the router's weights")
    w_gate_up = _tensor("w_gate_up", w_gate_up, 3, "[E_local, hidden, 2*ffn]: this rank's experts")
    w_down = _tensor("w_down", w_down, 3, "[E_local, ffn, hidden]: this rank's experts")
    if x.dtype not in MATMUL_DTYPES:
        raise ValueError(f"x.dtype={x.dtype} is not supported; use one of {[str(d) for d in MATMUL_DTYPES]}")
    for name, w in (("w_gate_up", w_gate_up), ("w_down", w_down)):
        if w.dtype != x.dtype:
            raise ValueError(f"{name}.dtype={w.dtype} differs from x.dtype={x.dtype}; cast the expert weights to "
                             f"the tokens' dtype ({name}.to(x.dtype)) or x to theirs")
    if topk_ids.dtype not in INT_DTYPES:
        raise TypeError(f"topk_ids.dtype={topk_ids.dtype} is not an integer type; pass the router's expert "
                        f"indices as integers (e.g. torch.topk(scores, k).indices, torch.int64)")
    if not topk_weights.dtype.is_floating_point:
        raise TypeError(f"topk_weights.dtype={topk_weights.dtype} is not a floating type; pass the router's "
                        f"weights (e.g. torch.topk(scores.softmax(-1), k).values)")
    if tuple(topk_weights.shape) != tuple(topk_ids.shape):
        raise ValueError(f"topk_weights has shape {tuple(topk_weights.shape)} but topk_ids has shape "
                         f"{tuple(topk_ids.shape)}; both must be [tokens, k]: one weight per chosen expert")
    tokens, hidden = x.shape
    if topk_ids.shape[0] != tokens:
        raise ValueError(f"topk_ids has {topk_ids.shape[0]} rows but x has {tokens} tokens (shape "
                         f"{tuple(x.shape)}); pass one row of k expert ids per token")
    e_local, w_hidden, two_ffn = w_gate_up.shape
    if e_local < 1:
        raise ValueError(f"w_gate_up has shape {tuple(w_gate_up.shape)}: no experts on this rank; every rank "
                         f"holds E // world >= 1 experts")
    if two_ffn % 2:
        raise ValueError(f"w_gate_up has shape {tuple(w_gate_up.shape)}: its last dim {two_ffn} is odd; it must be "
                         f"2*ffn (the first ffn columns the gate, the last ffn the up projection)")
    ffn = two_ffn // 2
    if w_hidden != hidden:
        raise ValueError(f"hidden sizes disagree: x is {tuple(x.shape)} (hidden={hidden}) but w_gate_up is "
                         f"{tuple(w_gate_up.shape)} (hidden={w_hidden}); w_gate_up must be [E_local, {hidden}, "
                         f"2*ffn]")
    if tuple(w_down.shape) != (e_local, ffn, hidden):
        raise ValueError(f"w_down has shape {tuple(w_down.shape)} but w_gate_up {tuple(w_gate_up.shape)} and x "
                         f"{tuple(x.shape)} need w_down [E_local, ffn, hidden] = [{e_local}, {ffn}, {hidden}]")
    devices = {t.device for t in (x, topk_ids, topk_weights, w_gate_up, w_down)}
    if len(devices) > 1:
        raise ValueError(f"the inputs are on several devices ({sorted(str(d) for d in devices)}); move x, "
                         f"topk_ids, topk_weights, w_gate_up and w_down to one device")
    experts = e_local * world
    topk = topk_ids.shape[1]
    if topk < 1:
        raise ValueError(f"topk_ids has shape {tuple(topk_ids.shape)}: k=0; each token needs k >= 1 experts")
    if topk > experts:
        raise ValueError(f"topk_ids has k={topk} columns but there are only E={experts} experts ({e_local} per "
                         f"rank x {world} ranks); a token picks k distinct experts, so k <= E: lower k")
    if shared is not None and not callable(shared):
        raise TypeError(f"shared={shared!r} must be callable (a module: x [tokens, hidden] -> [tokens, hidden]) "
                        f"or None")
    return MoeShape(tokens, hidden, ffn, e_local, experts, topk, x.dtype)


def check_ids(topk_ids: torch.Tensor, experts: int) -> None:
    """Expert ids in ``0 .. experts - 1`` and distinct within each token's row."""
    if topk_ids.numel() == 0:
        return
    ids = topk_ids.to(torch.int64)
    low, high = int(ids.min()), int(ids.max())
    if low < 0:
        t = int((ids < 0).any(1).nonzero()[0])
        raise ValueError(f"topk_ids holds a negative expert id ({low}, token {t}: {ids[t].tolist()}); expert ids "
                         f"must be in 0..{experts - 1}")
    if high >= experts:
        t = int((ids >= experts).any(1).nonzero()[0])
        raise ValueError(f"topk_ids holds expert id {high} (token {t}: {ids[t].tolist()}), out of range for "
                         f"E={experts} experts; ids must be in 0..{experts - 1} (E = w_gate_up.shape[0] x the "
                         f"group size)")
    if ids.shape[1] > 1:
        ordered = ids.sort(1).values
        twice = (ordered[:, 1:] == ordered[:, :-1]).any(1)
        if bool(twice.any()):
            t = int(twice.nonzero()[0])
            raise ValueError(f"topk_ids names the same expert twice for token {t} ({ids[t].tolist()}); a token's k "
                             f"experts must be distinct (take them with torch.topk)")


def id_error(topk_ids: torch.Tensor, experts: int) -> ValueError:
    """The detailed error of ``topk_ids`` whose device-side rule check failed (:func:`check_ids`: the rank, token
    and fix), for the routing exchange to raise."""
    try:
        check_ids(topk_ids, experts)
    except ValueError as exc:
        return exc
    return ValueError(f"topk_ids broke a rule on the device but not on the host check (ids in 0..{experts - 1}, "
                      f"distinct per token); please report")

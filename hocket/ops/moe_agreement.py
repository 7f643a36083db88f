"""The routing exchange of an MoE call: the call's agreement and its split sizes in one all-gather.

An MoE call's validity depends on its data (expert ids in range, no expert twice in a token's row), so it is
checked on **every** call, whatever ``HOCKET_AGREEMENT`` says. One all-gather per call carries, per rank, the
row ``[tag, status, digest_hi, digest_lo, tokens, bad_ids, counts[0 .. E-1]]`` (int64): the descriptor's digest
(:class:`~hocket.ops.agreement.Descriptor`: sizes, dtype, plan, flags), this rank's token count, whether its ids
broke a rule (computed on the device, no host read) and its tokens per expert (the split sizes). So a call costs
one small collective and, eagerly, one host read of the gathered table.

The row's length must be the same on every rank before anyone knows the others' ``E``: it is ``6 + E_g``, with
``E_g`` the expert count of the group's last agreed call (0 before the first), state every rank of the group
shares. A rank whose ``E`` differs from ``E_g`` (the first call, a layer with another expert count) sends zero
counts and ``status`` 2; a rank whose local checks failed sends ``status`` 1. When every row has status 0, no bad
ids and one digest, the call is agreed. Otherwise a second exchange (text lengths, then the texts) lets every rank
build the same outcome: a rank whose checks failed raises its own error and the others
:class:`~hocket.ops.agreement.RankInputError` quoting it; descriptors that differ raise one
:class:`~hocket.ops.agreement.AgreementError` on every rank (ranks holding different numbers of experts get the
message that the experts do not divide over the group); when they agree on a new ``E``, ``E_g`` becomes it on
every rank and the first exchange runs again.

Inside a CUDA graph capture (``splits="padded"`` only) nothing is read on the host: the row is built and gathered
on the device, the digest and ``E`` must be the ones an eager call of this rank agreed before (else a
ValueError says to run the call eagerly first, which ``hocket.ops.CapturedCall``'s warm-up does), every rank's
token count is that eager call's, and each replay checks the gathered table with ``torch._assert_async``: bad ids,
a failed rank or a digest that differs stop every rank's replay at the same point with a device-side assert (a
graph cannot raise a Python error), since every rank reads the same table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import torch

from hocket.ops.agreement import (
    AgreementError,
    Descriptor,
    RankInputError,
    _differences,
    _exchange_device,
    _gather_texts,
)
from hocket.transport.group import GroupHandle
from hocket.transport.torch_dist import TorchDistTransport

OP = "moe_experts"
TAG = 0x3E0E
"""the first entry of a routing row (an agreement row of the dense operators holds 0 or 1 there)."""
HEAD = 6
"""entries before the counts: tag, status, digest_hi, digest_lo, tokens, bad_ids."""
OK, FAILED, RESIZED = 0, 1, 2

_GROUP_E: dict[tuple[str, int], int] = {}
"""(group name, process group id) -> the expert count of the group's last agreed call."""
_AGREED: dict[tuple[str, int, tuple[int, int]], list[int]] = {}
"""(group, digest) -> every rank's tokens in the last eager call agreed with that digest (a capture's sizes)."""


def clear_routing_state() -> None:
    _GROUP_E.clear()
    _AGREED.clear()


@dataclass(frozen=True)
class Routing:
    tokens: list[int]
    """every rank's token count."""
    counts: torch.Tensor
    """``world x E`` int64 tokens per (source rank, expert): on the CPU with ``host``, else on the data's device."""


def id_flags(topk_ids: torch.Tensor, experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(counts [E] int64, bad)`` on ``topk_ids``'s device with no host read: tokens per expert (ids clamped into
    range so a bad id cannot index out of bounds; such counts are never used) and a 0-dim int64 that is 1 when an
    id is negative, ``>= experts`` or repeated within a token's row."""
    ids = topk_ids.to(torch.int64)
    flat = ids.reshape(-1)
    counts = torch.zeros(experts, dtype=torch.int64, device=ids.device)
    if flat.numel() == 0:
        return counts, torch.zeros((), dtype=torch.int64, device=ids.device)
    counts.scatter_add_(0, flat.clamp(0, experts - 1), torch.ones_like(flat))
    bad = (flat.min() < 0) | (flat.max() >= experts)
    if ids.shape[1] > 1:
        ordered = ids.sort(1).values
        bad = bad | (ordered[:, 1:] == ordered[:, :-1]).any()
    return counts, bad.to(torch.int64)


def _where(group: GroupHandle) -> tuple[str, int]:
    return (group.name, id(group.pg))


def exchange_routing(group: GroupHandle, descriptor: Descriptor, *, tokens: int, counts: torch.Tensor | None,
                     bad: torch.Tensor | None, experts: int, device: torch.device, host: bool,
                     local_error: BaseException | None = None, capturing: bool = False,
                     id_error=None) -> Routing:
    """Agree the call and gather every rank's split sizes (module docstring). ``counts``/``bad``: this rank's
    :func:`id_flags` (None when its local checks failed: ``local_error``); ``id_error()`` builds the detailed
    error of bad ids (host reads; run only when ``bad`` is set). Raises the same error on every rank."""
    if capturing:
        return _captured(group, descriptor, counts, bad, experts, device)
    if group.world == 1:
        if local_error is not None:
            raise local_error
        if int(bad):
            raise id_error()
        _AGREED[(*_where(group), descriptor.digest())] = [tokens]
        table = counts.unsqueeze(0)
        return Routing([tokens], table.cpu() if host else table.clone())
    while True:
        found = _exchange(group, descriptor, tokens=tokens, counts=counts, bad=bad, experts=experts,
                          device=device, host=host, local_error=local_error, id_error=id_error)
        if found is not None:
            return found


def _row(group: GroupHandle, descriptor: Descriptor, *, status: int, tokens: int, counts, bad, width: int,
         dev: torch.device) -> torch.Tensor:
    hi, lo = descriptor.digest()
    head = torch.tensor([TAG, status, hi, lo, tokens], dtype=torch.int64, device=dev)
    if status == OK:
        tail = torch.cat([bad.reshape(1).to(dev), counts.to(dev)])
    else:
        tail = torch.zeros(1 + width, dtype=torch.int64, device=dev)
    return torch.cat([head, tail])


def _exchange(group, descriptor, *, tokens, counts, bad, experts, device, host, local_error, id_error):
    where = _where(group)
    width = _GROUP_E.get(where, 0)
    status = FAILED if local_error is not None else (RESIZED if experts != width else OK)
    dev = _exchange_device(group, device)
    transport = TorchDistTransport(group)
    mine = _row(group, descriptor, status=status, tokens=tokens, counts=counts, bad=bad, width=width, dev=dev)
    table = torch.empty((group.world, HEAD + width), dtype=torch.int64, device=dev)
    transport.all_gather(table, mine).wait()
    seen = table.cpu()
    rows = seen[:, :HEAD].tolist()
    digest = descriptor.digest()
    agreed = all(r[0] == TAG and r[1] == OK and r[5] == 0 and (r[2], r[3]) == digest for r in rows)
    if agreed:
        every = [r[4] for r in rows]
        _AGREED[(*where, digest)] = every
        counts_all = (seen if host else table.to(device))[:, HEAD:].contiguous()
        return Routing(every, counts_all)
    # the slow path: every rank learns every rank's outcome from the texts
    if local_error is None and status == OK and rows[group.rank][5]:
        local_error = id_error()
    if local_error is not None:
        descriptor = replace(descriptor, error=f"{type(local_error).__name__}: {local_error}")
    texts = _texts(transport, descriptor.text().encode(), dev, group.world)
    if local_error is not None:
        raise local_error
    parsed = [json.loads(t) for t in texts]
    failed = [r for r, p in enumerate(parsed) if p.get("error")]
    if any(r[0] != TAG for r in rows):
        raise AgreementError(f"hocket.{OP}: rank(s) {[i for i, r in enumerate(rows) if r[0] != TAG]} did not enter "
                             f"the MoE routing exchange (they called another hocket operator here); every rank must "
                             f"call the same operators in the same order")
    if failed:
        errors = "; ".join(f"rank {r}: {parsed[r]['error']}" for r in failed)
        raise RankInputError(f"hocket.{OP}: the inputs of rank(s) {failed} failed their checks, so no rank ran "
                             f"the operator ({errors})")
    if len({(r[2], r[3]) for r in rows}) > 1:
        raise AgreementError(_experts_message(texts, group.world) or _differences(texts, OP))
    _GROUP_E[where] = experts  # every rank agrees on a new E: exchange again with rows that carry it
    return None


def _texts(transport: TorchDistTransport, text: bytes, dev: torch.device, world: int) -> list[str]:
    mine = torch.tensor([len(text)], dtype=torch.int64, device=dev)
    lengths = torch.empty((world, 1), dtype=torch.int64, device=dev)
    transport.all_gather(lengths, mine).wait()
    return _gather_texts(transport, text, [int(v) for v in lengths.view(-1).tolist()], dev)


def _captured(group, descriptor, counts, bad, experts, device) -> Routing:
    where = _where(group)
    digest = descriptor.digest()
    tokens = _AGREED.get((*where, digest))
    if counts is None or tokens is None or (group.world > 1 and _GROUP_E.get(where) != experts):
        raise ValueError(f"hocket.{OP}: this call is being captured in a CUDA graph but no eager call with the same "
                         f"shapes, dtype, plan and flags ran on group {group.name!r} before; run it eagerly once "
                         f"first (hocket.ops.CapturedCall's warm-up does), so that its agreement and every rank's "
                         f"token count are known to the graph")
    message = (f"hocket.{OP} (CUDA graph replay): a rank's topk_ids broke a rule (an id outside 0..{experts - 1} "
               f"or an expert twice in a token's row), or a rank replays another call; run the call eagerly to get "
               f"the error with the rank and token")
    if group.world == 1:
        torch._assert_async(bad == 0, message)
        return Routing(tokens, counts.unsqueeze(0).clone())
    dev = _exchange_device(group, device)
    mine = _row(group, descriptor, status=OK, tokens=tokens[group.rank], counts=counts, bad=bad, width=experts,
                dev=dev)
    table = torch.empty((group.world, HEAD + experts), dtype=torch.int64, device=dev)
    TorchDistTransport(group).all_gather(table, mine).wait()
    expect = torch.tensor([TAG, OK, digest[0], digest[1]], dtype=torch.int64, device=dev)
    good = (table[:, :4] == expect).all() & (table[:, 5] == 0).all()
    torch._assert_async(good, message)
    return Routing(tokens, table[:, HEAD:].to(device).contiguous())


def _experts_message(texts: list[str], world: int) -> str | None:
    sites = [json.loads(t).get("site", {}) for t in texts]
    locals_ = [s.get("experts_local") for s in sites]
    if None in locals_ or len(set(locals_)) == 1:
        return None
    total = sum(locals_)
    held = ", ".join(f"rank {r}: {n}" for r, n in enumerate(locals_))
    return (f"hocket.{OP}: w_gate_up.shape[0] (experts on this rank) differs across ranks ({held}): E={total} "
            f"routed experts do not divide evenly over the {world} ranks of the group. Expert parallelism needs "
            f"E divisible by the group size, with E // {world} experts (w_gate_up [E_local, hidden, 2*ffn], "
            f"w_down [E_local, ffn, hidden]) on every rank: pick an expert-parallel degree that divides E")

"""The agreement step of an MoE call (:mod:`hocket.ops.agreement`, extended for ``moe_experts``).

An MoE call's validity depends on its data (expert ids in range, no expert twice in a token's row), so the
descriptor's exchange runs on **every** call, whatever ``HOCKET_AGREEMENT`` says and whether the descriptor was
agreed before: one all-gather of ``[status, digest_hi, digest_lo, text_len, tokens]`` (int64) per rank, and,
only when a rank failed or the digests differ, an all-gather of the descriptor texts from which every rank
builds the same error. A rank whose local checks failed raises its own error after the exchange; the others
raise :class:`~hocket.ops.agreement.RankInputError` quoting it; ranks whose descriptors differ raise the same
:class:`~hocket.ops.agreement.AgreementError`. Ranks that hold different numbers of experts get the error that
says the experts do not divide over the group. The exchange also tells every rank every rank's token count.
"""

from __future__ import annotations

import json

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


def agree_call(group: GroupHandle, descriptor: Descriptor, *, tokens: int, device: torch.device,
               local_error: BaseException | None = None) -> list[int]:
    """Exchange ``descriptor`` (module docstring); return every rank's ``tokens``. Raises the same error on
    every rank on any local failure or mismatch."""
    if group.world == 1:
        if local_error is not None:
            raise local_error
        return [tokens]
    digest = descriptor.digest()
    text = descriptor.text().encode()
    dev = _exchange_device(group, device)
    transport = TorchDistTransport(group)
    mine = torch.tensor([1 if local_error is not None else 0, digest[0], digest[1], len(text), tokens],
                        dtype=torch.int64, device=dev)
    table = torch.empty((group.world, 5), dtype=torch.int64, device=dev)
    transport.all_gather(table, mine).wait()
    rows = table.tolist()
    failed = [r for r, row in enumerate(rows) if row[0]]
    same = all(row[1:3] == rows[0][1:3] for row in rows)
    if not failed and same:
        return [row[4] for row in rows]
    texts = _gather_texts(transport, text, [row[3] for row in rows], dev)
    if local_error is not None:
        raise local_error
    if failed:
        errors = "; ".join(f"rank {r}: {json.loads(texts[r])['error']}" for r in failed)
        raise RankInputError(f"hocket.{OP}: the inputs of rank(s) {failed} failed their checks, so no rank ran "
                             f"the operator ({errors})")
    raise AgreementError(_experts_message(texts, group.world) or _differences(texts, OP))

"""Cross-rank agreement: one small collective before a Site first runs on a group.

Every rank builds a :class:`Descriptor` of its call: the operator, its Site (shapes,
dtype, dims, world), the Plan's hash, the flags that change what runs (``return_A``,
``reduce_op``, ``HOCKET_DISABLE``, ...) and the outcome of its *local* input checks (ok,
or the error text). The exchange has a fixed shape so that every rank can take part
whatever its inputs were:

1. an all-gather of ``[status, digest_hi, digest_lo, text_len]`` (int64) per rank;
2. only when some rank failed or the digests differ: an all-gather of every rank's
   descriptor text (padded to the longest), from which each rank builds the *same*
   message naming which rank differs in what.

A rank whose local check fails does not raise at once: it joins the exchange with the
failure as its status and raises afterwards (its own error), while every other rank
raises :class:`RankInputError` naming that rank and quoting its error. So no rank is
left waiting in a collective that another rank never enters, and local checks still
run before any data moves.

An agreed descriptor is cached per (group, descriptor digest) and the exchange is
skipped on later calls. The price: a rank that diverges *after* its peers cached the
descriptor (e.g. it alone changes K on the tenth call) meets them in a data
collective, not in an exchange; on gloo that surfaces as a bounded-wait
``TransportError`` after ``HOCKET_TIMEOUT_S``. ``HOCKET_AGREEMENT=always`` exchanges on
every call and reports such divergence clearly (at one small collective per call);
``HOCKET_AGREEMENT=0`` turns the check off.

Plans: an explicit plan is part of the descriptor, so ranks agree on it like on any
input. A plan left to hocket (``plan=None``) is chosen after the agreement, on every
rank (the planner may time candidates with collectives, which is safe only once all
ranks are known to run the same Site), and :func:`settle_plan` then makes rank 0's
choice the one every rank runs: decided on rank 0 and broadcast, so planners that
read different caches or profiles can never make ranks run different plans.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from hocket.env import agreement_check, agreement_every_call
from hocket.core.plan import Plan
from hocket.transport.group import GroupHandle
from hocket.transport.torch_dist import TorchDistTransport


class AgreementError(ValueError):
    """Ranks called one operator with different sites, plans or flags."""


class RankInputError(ValueError):
    """Another rank's inputs failed its local checks; raised on every rank that passed them."""


@dataclass(frozen=True, kw_only=True)
class Descriptor:
    op: str
    site: dict = field(default_factory=dict)
    plan: dict = field(default_factory=dict)
    flags: dict = field(default_factory=dict)
    error: str = ""
    """empty when the local checks passed, else ``"<ExceptionType>: <message>"``."""

    def text(self) -> str:
        return json.dumps({"op": self.op, "site": self.site, "plan": self.plan, "flags": self.flags,
                           "error": self.error}, sort_keys=True, separators=(",", ":"))

    def digest(self) -> tuple[int, int]:
        raw = hashlib.sha1(self.text().encode()).digest()
        return int.from_bytes(raw[:8], "little", signed=True), int.from_bytes(raw[8:16], "little", signed=True)


_AGREED: set[tuple[str, int, tuple[int, int]]] = set()


def clear_agreement_cache() -> None:
    _AGREED.clear()


def _exchange_device(group: GroupHandle, device: torch.device) -> torch.device:
    """CPU when the group can move CPU tensors (gloo), else the caller's (or the current) CUDA device."""
    if "gloo" in group.backend and not (device.type == "cuda" and "nccl" in group.backend):
        return torch.device("cpu")
    if device.type == "cuda":
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _differences(texts: list[str], op: str) -> str:
    parsed = [json.loads(t) for t in texts]
    lines = []
    base = parsed[0]
    for rank, desc in enumerate(parsed[1:], start=1):
        for part in ("site", "plan", "flags"):
            ours, theirs = base.get(part, {}), desc.get(part, {})
            for key in sorted(set(ours) | set(theirs)):
                if ours.get(key) != theirs.get(key):
                    lines.append(f"rank {rank} has {part}.{key}={theirs.get(key)!r} but rank 0 has "
                                 f"{part}.{key}={ours.get(key)!r}")
    detail = "; ".join(lines) if lines else "descriptors differ"
    return (f"hocket.{op}: ranks called it with different inputs: {detail}. Every rank must pass the same shapes, "
            "dtype, dims, plan and flags")


def _gather_texts(transport: TorchDistTransport, text: bytes, lengths: list[int], dev: torch.device) -> list[str]:
    """Every rank's ``text`` (``lengths[r]`` bytes on rank r), through one all-gather padded to the longest."""
    world = len(lengths)
    width = max(max(lengths), 1)
    padded = torch.zeros(width, dtype=torch.uint8, device=dev)
    if text:
        padded[:len(text)] = torch.frombuffer(bytearray(text), dtype=torch.uint8).to(dev)
    table = torch.empty((world, width), dtype=torch.uint8, device=dev)
    transport.all_gather(table, padded).wait()
    return [bytes(table[r, :lengths[r]].cpu().tolist()).decode() for r in range(world)]


def agree(group: GroupHandle, descriptor: Descriptor, *, device: torch.device,
          local_error: BaseException | None = None) -> None:
    """Exchange ``descriptor`` with every rank; raise the same error everywhere on any failure or mismatch.

    ``local_error`` is this rank's local-check exception (its text is already in the
    descriptor); it is re-raised here after the exchange.
    """
    if group.world == 1 or not agreement_check():
        if local_error is not None:
            raise local_error
        return
    digest = descriptor.digest()
    key = (group.name, id(group.pg), digest)
    if local_error is None and key in _AGREED and not agreement_every_call():
        return
    text = descriptor.text().encode()
    dev = _exchange_device(group, device)
    transport = TorchDistTransport(group)
    mine = torch.tensor([1 if local_error is not None else 0, digest[0], digest[1], len(text)],
                        dtype=torch.int64, device=dev)
    table = torch.empty((group.world, 4), dtype=torch.int64, device=dev)
    transport.all_gather(table, mine).wait()
    rows = table.tolist()
    failed = [r for r, row in enumerate(rows) if row[0]]
    same = all(row[1:3] == rows[0][1:3] for row in rows)
    if not failed and same:
        _AGREED.add(key)
        return
    texts = _gather_texts(transport, text, [row[3] for row in rows], dev)
    if local_error is not None:
        raise local_error
    if failed:
        errors = "; ".join(f"rank {r}: {json.loads(texts[r])['error']}" for r in failed)
        raise RankInputError(f"hocket.{descriptor.op}: the inputs of rank(s) {failed} failed their checks, so "
                             f"no rank ran the operator ({errors})")
    raise AgreementError(_differences(texts, descriptor.op))


def settle_plan(group: GroupHandle, op: str, choose: Callable[[], Plan], *, device: torch.device) -> Plan:
    """Run ``choose()`` on every rank (a planner may run collectives), then use rank 0's plan everywhere.

    Called after :func:`agree`, so every rank gets here with the same Site. Each rank
    sends its plan (or its planner's error); rank 0's plan is the one every rank runs
    (decided on rank 0, broadcast), and a planner error on any rank raises on every rank.
    """
    return Plan.from_json(settle(group, op, "choosing the plan", lambda: choose().to_json(), device=device))


def settle_replay(group: GroupHandle, op: str, choose: Callable[[], bool], *, device: torch.device) -> bool:
    """Whether every rank replays this call from hocket's CUDA graph (:mod:`hocket.ops.eager_graph`):
    ``choose()`` on every rank, rank 0's answer everywhere (a replay and an issued call of one call
    would not meet: they use different slots of a peer transport)."""
    return settle(group, op, "deciding whether to replay the call",
                  lambda: "1" if choose() else "0", device=device) == "1"


def settle(group: GroupHandle, op: str, what: str, choose: Callable[[], str], *, device: torch.device) -> str:
    """``choose()`` (text) on every rank, rank 0's text returned on every rank; an error (ValueError or
    TypeError) on any rank raises on every rank, naming ``what`` failed where."""
    local_error: ValueError | TypeError | None = None
    chosen = None
    try:
        chosen = choose()
    except (ValueError, TypeError) as exc:
        local_error = exc
    if group.world == 1 or not agreement_check():
        if local_error is not None:
            raise local_error
        return chosen
    text = (chosen if local_error is None else f"{type(local_error).__name__}: {local_error}").encode()
    dev = _exchange_device(group, device)
    transport = TorchDistTransport(group)
    mine = torch.tensor([1 if local_error is not None else 0, len(text)], dtype=torch.int64, device=dev)
    table = torch.empty((group.world, 2), dtype=torch.int64, device=dev)
    transport.all_gather(table, mine).wait()
    rows = table.tolist()
    texts = _gather_texts(transport, text, [row[1] for row in rows], dev)
    if local_error is not None:
        raise local_error
    failed = [r for r, row in enumerate(rows) if row[0]]
    if failed:
        errors = "; ".join(f"rank {r}: {texts[r]}" for r in failed)
        raise RankInputError(f"hocket.{op}: {what} failed on rank(s) {failed} ({errors})")
    return texts[0]


def all_ranks_ok(group: GroupHandle, ok: bool, *, device: torch.device) -> bool:
    """True on every rank only if ``ok`` is True on every rank of ``group`` (one small all-gather), so that
    a step one rank could not take (capturing a CUDA graph, :mod:`hocket.ops.eager_graph`) is skipped by all
    of them rather than leaving the others waiting in a collective the failed rank never joins."""
    if group.world == 1:
        return ok
    dev = _exchange_device(group, device)
    mine = torch.tensor([1 if ok else 0], dtype=torch.int64, device=dev)
    table = torch.empty((group.world, 1), dtype=torch.int64, device=dev)
    TorchDistTransport(group).all_gather(table, mine).wait()
    return bool(table.min().item() == 1)

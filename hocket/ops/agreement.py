"""Cross-rank agreement: one small collective before a Site first runs on a group.

Every rank builds a :class:`Descriptor` of its call: the operator, its Site (shapes,
dtype, dims, world), the Plan's hash, the flags that change what runs (``return_A``,
``reduce_op``, and every setting that changes what a rank executes: ``HOCKET_DISABLE``,
``HOCKET_AGREEMENT``, ``HOCKET_EAGER_GRAPHS``, the transport sizes, ...;
:func:`hocket.ops.dispatch.settings_in_descriptor`) and the outcome of its *local* input checks (ok,
or the error text). Ranks whose settings differ raise the same :class:`AgreementError`, naming the
setting, each rank's value and the fix, at their first call. The exchange has a fixed shape so that
every rank can take part
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
every call and reports such divergence clearly (at one small collective per call).
``HOCKET_AGREEMENT=0`` exchanges only at the first call on each group: every mode enters that
exchange, and the mode is in the descriptor, so ranks started with different modes raise there
instead of one rank waiting in an exchange the other skips. What no exchange can catch: a rank that
changes its mode (or any setting) at runtime after that first call, alone; then it skips, or enters, an
exchange the others do not and the wait ends after ``HOCKET_TIMEOUT_S``. Under ``0`` a ``plan=None``
call is also chosen by each rank alone (:func:`settle` exchanges nothing).

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
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from hocket.core.plan import Plan
from hocket.env import agreement_mode
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
                           "error": self.error}, sort_keys=True, separators=(",", ":"), default=repr)
        # default=repr: a flag the local checks reject (reduce_op=dist.ReduceOp.SUM) is still sent, as text

    def digest(self) -> tuple[int, int]:
        found = self.__dict__.get("_digest")
        if found is None:  # computed once per descriptor (it is frozen)
            raw = hashlib.sha1(self.text().encode()).digest()
            found = int.from_bytes(raw[:8], "little", signed=True), int.from_bytes(raw[8:16], "little", signed=True)
            object.__setattr__(self, "_digest", found)
        return found


def mode_in_force() -> str:
    """``HOCKET_AGREEMENT`` as the exchanges use it (:func:`hocket.env.agreement_mode`); a value it rejects
    counts as the default ``1`` here, so the rank still joins the exchange in which its error (its local
    error, from :func:`hocket.ops.dispatch.prepare`) is reported to every rank."""
    try:
        return agreement_mode()
    except ValueError:
        return "1"


_AGREED: set[tuple[str, int, tuple[int, int]]] = set()
_GROUPS: set[tuple[str, int]] = set()
"""(group name, process group id) of the groups with at least one exchange (``HOCKET_AGREEMENT=0``)."""


def clear_agreement_cache() -> None:
    _AGREED.clear()
    _GROUPS.clear()


SIZES_STATUS = 0x5E5
"""The first entry of a size-exchange row; an agreement row holds 0 or 1 there."""


def agree_shard_sizes(group_name: str, op: str, local: int, *, device: torch.device) -> tuple[int, ...] | None:
    """Every rank's shard size for a call of ``op`` (``local`` on this rank, ``-1`` where its inputs are
    not valid tensors), through one small all-gather that every rank of the group enters.

    Part of the agreement of a call made with ``shard_rows="auto"``: the sizes become ``Site.shard_rows``
    (checked to add up there, and compared across ranks with the rest of the Site). It runs on every such
    call (one all-gather of four int64 per rank, and a host sync): a cache keyed by this rank's shapes
    would let a rank whose size changed meet peers whose sizes did not in a data collective instead.
    Returns None where some rank sent ``-1`` (its local checks then report the error on every rank) or
    on a one-rank group.

    The exchange has the shape of :func:`agree`'s first all-gather, ``[status, ., ., text length]`` with
    status :data:`SIZES_STATUS`, so a peer that called the operator without ``shard_rows="auto"`` (and so
    entered its agreement instead) meets it there: it reads this rank as failed and raises
    :class:`RankInputError` quoting this rank's error, and this rank raises that error (ValueError).
    """
    from hocket.transport.group import process_group_of, resolve_group

    group = resolve_group(process_group_of(group_name))
    if group.world == 1:
        return None
    dev = _exchange_device(group, device)
    error = (f"ValueError: hocket.{op}: rank {group.rank} passed shard_rows='auto' but some rank did not (it "
             f"entered the call's agreement instead of the size exchange); pass shard_rows the same way on every "
             f"rank")
    text = Descriptor(op=op, error=error).text().encode()
    mine = torch.tensor([SIZES_STATUS, local, 0, len(text)], dtype=torch.int64, device=dev)
    table = torch.empty((group.world, 4), dtype=torch.int64, device=dev)
    transport = TorchDistTransport(group)
    transport.all_gather(table, mine).wait()
    rows = table.tolist()
    if any(row[0] != SIZES_STATUS for row in rows):
        _gather_texts(transport, text, [row[3] for row in rows], dev)  # the agreement's second exchange
        raise ValueError(error.removeprefix("ValueError: "))
    sizes = [row[1] for row in rows]
    return None if any(s < 0 for s in sizes) else tuple(sizes)


def _exchange_device(group: GroupHandle, device: torch.device) -> torch.device:
    """CPU when the group can move CPU tensors (gloo), else the caller's (or the current) CUDA device."""
    if "gloo" in group.backend and not (device.type == "cuda" and "nccl" in group.backend):
        return torch.device("cpu")
    if device.type == "cuda":
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


SETTING_FIXES = {
    "transport_sizes": "call hocket.core.sizes.set_sizes with the same TransportSizes on every rank (or on none)",
    "eager_graphs_max": "call hocket.ops.eager_graph.set_max_graphs with the same count on every rank (or on none)",
    "hierarchy_nodes": "describe the same nodes on every rank (one HOCKET_CLUSTER for the whole job, or the same "
                       "hocket.ops.live.set_process_planner cluster)",
}
"""How to make a descriptor setting that is not an environment variable the same on every rank."""


def _fix(key: str) -> str | None:
    """How to make the descriptor flag ``key`` the same on every rank, where it is a setting (None otherwise)."""
    if key in SETTING_FIXES:
        return SETTING_FIXES[key]
    if key.startswith("HOCKET_"):
        return (f"start every rank with the same {key} (set one value for the whole job, or unset it everywhere; "
                f"see hocket.env.SETTINGS)")
    return None


def _differences(texts: list[str], op: str) -> str:
    parsed = [json.loads(t) for t in texts]
    lines, fixes = [], []
    base = parsed[0]
    for rank, desc in enumerate(parsed[1:], start=1):
        for part in ("site", "plan", "flags"):
            ours, theirs = base.get(part, {}), desc.get(part, {})
            for key in sorted(set(ours) | set(theirs)):
                if ours.get(key) != theirs.get(key):
                    lines.append(f"rank {rank} has {part}.{key}={theirs.get(key)!r} but rank 0 has "
                                 f"{part}.{key}={ours.get(key)!r}")
                    fix = _fix(key) if part == "flags" else None
                    if fix is not None and fix not in fixes:
                        fixes.append(fix)
    detail = "; ".join(lines) if lines else "descriptors differ"
    if fixes:
        return (f"hocket.{op}: ranks run with different settings: {detail}. To fix: {'; '.join(fixes)}")
    hint = ""
    if any(f"site.{dim}=" in detail for dim in ("m", "k")) and op in ("all_gather_matmul", "matmul_all_reduce"):
        hint = (" (for shards that differ in size between ranks pass shard_rows=[every rank's size] or "
                "shard_rows='auto', docs/uneven-shards.md)")
    return (f"hocket.{op}: ranks called it with different inputs: {detail}. Every rank must pass the same shapes, "
            f"dtype, dims, plan and flags{hint}")


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
    if group.world == 1:
        if local_error is not None:
            raise local_error
        return
    digest = descriptor.digest()
    where = (group.name, id(group.pg))
    key = (*where, digest)
    mode = mode_in_force()
    if where in _GROUPS and mode == "0":  # HOCKET_AGREEMENT=0 after the group's first exchange
        if local_error is not None:
            raise local_error
        return
    if local_error is None and key in _AGREED and mode != "always":
        return
    _GROUPS.add(where)
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
    """``choose()`` (text) on every rank, rank 0's text returned on every rank; an error (any ``Exception``: a
    bad setting, a cache or profile the planner could not handle, a decision that failed on rank 0) on any
    rank raises on every rank, naming ``what`` failed where: the failed rank raises its own error, the others
    :class:`RankInputError` quoting it, so no rank waits in a collective the failed one never joins."""
    local_error: Exception | None = None
    chosen = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            chosen = choose()
        except Exception as exc:  # noqa: BLE001 - reported to every rank, re-raised here
            local_error = exc
    mine = [(w.category.__name__, str(w.message)) for w in caught]
    if group.world == 1 or mode_in_force() == "0":
        _warn_again(mine)
        if local_error is not None:
            raise local_error
        return chosen
    text = (json.dumps({"value": chosen, "warnings": mine}) if local_error is None
            else f"{type(local_error).__name__}: {local_error}").encode()
    dev = _exchange_device(group, device)
    transport = TorchDistTransport(group)
    status = torch.tensor([1 if local_error is not None else 0, len(text)], dtype=torch.int64, device=dev)
    table = torch.empty((group.world, 2), dtype=torch.int64, device=dev)
    transport.all_gather(table, status).wait()
    rows = table.tolist()
    texts = _gather_texts(transport, text, [row[1] for row in rows], dev)
    # warnings are raised again only now, after the exchange: one made an error (-W error) must not keep this
    # rank out of a collective its peers are in
    failed = [r for r, row in enumerate(rows) if row[0]]
    decided = {r: json.loads(texts[r]) for r in range(group.world) if r not in failed}
    seen = {message for _, message in mine}
    peers = []
    for rank, entry in decided.items():  # a peer's warnings (a cache or profile fault it met) reach every rank
        for name, message in entry["warnings"]:
            if message not in seen:
                seen.add(message)
                peers.append((name, f"{message} (on rank {rank})"))
    _warn_again(mine + peers)
    if local_error is not None:
        raise local_error
    if failed:
        errors = "; ".join(f"rank {r}: {texts[r]}" for r in failed)
        raise RankInputError(f"hocket.{op}: {what} failed on rank(s) {failed} ({errors})")
    return decided[0]["value"]


def _warn_again(caught: list[tuple[str, str]]) -> None:
    for name, message in caught:
        warnings.warn(message, _warning_class(name), stacklevel=4)


def _warning_class(name: str) -> type[Warning]:
    """The warning class named ``name`` among those loaded (hocket's own are UserWarning subclasses), else
    UserWarning: a peer's warning is raised again here under its own class."""
    for cls in UserWarning.__subclasses__():
        if cls.__name__ == name:
            return cls
    return {"RuntimeWarning": RuntimeWarning, "DeprecationWarning": DeprecationWarning}.get(name, UserWarning)


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

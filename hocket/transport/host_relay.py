"""``transport="host_staged"`` for the operators: collectives between GPUs of one node through
shared, pinned host memory, for GPUs without a peer path (e.g. of two vendors).

Each (group, device) and buffer layout gets one :class:`HostRelay`: a :class:`SharedHostBuffer` file
(in ``HOCKET_HOST_STAGE_DIR``) that every rank maps and page-locks, holding
:attr:`~hocket.core.sizes.TransportSizes.slots` message slots per rank of ``mailbox_bytes / slots``
each; a device-to-host, a host-to-device and a finish stream. A collective is cut into messages of at
most :attr:`~hocket.core.sizes.TransportSizes.piece_bytes` (ramped: the first two smaller), so the
device-to-host copy of one message runs while the host-to-device copy of the previous one does.

No thread waits for a peer: one header word per (sender, slot, reader) is set to 1 by the sender's D2H
stream after its copy into the slot and reset to 0 by the reader's H2D stream after its copy out
(``cuStreamWriteValue32``, a system-wide fence first); the reader waits for 1 and the sender, before it
reuses the slot, for 0 (``cuStreamWaitValue32``, done by the GPU's stream front end, no SM). Every step
is stream-ordered, the calling thread only enqueues, and since every awaited or written value is a
constant, a call captured in a CUDA graph (``hocket.ops.CapturedCall``) replays correctly, interleaved
with eager calls as long as every rank makes the same calls and replays in the same order. (A relay
signalled by the host, with handshakes and inter-process events, was removed: the calling thread's waits
delayed every kernel launched after a call; so was an issue thread, whose polling latency starved the
copy streams on 2xH200.) Those waits have no timeout of their own: a
:class:`~hocket.transport.relay_watchdog.RelayWatchdog` thread times out a call that does not finish
within ``HOCKET_TIMEOUT_S``, writes values that release every wait, and makes the relay raise.

The copies wait for a "ready" event (inputs written, outputs free): by default one recorded on the
caller's stream at the call, or one the caller passes (``ready=``, recorded before a GEMM the caller
launched first; see ``hocket.ops.lowering.peer_chunked``). The returned ``StreamPending`` ends after
the copies and the call's ``finish``. All ranks must issue the same transfers in the same order with
the same sizes (the operators agree on their plan and sizes first).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from hocket import env
from hocket.core.relay_layout import SCRATCH_RING, SCRATCH_SHAPES
from hocket.core.sizes import DEFAULT_SIZES, TransportSizes, sizes_in_force
from hocket.kernels import stream_memops
from hocket.transport.group import GroupHandle
from hocket.transport.per_group import PerGroup, ramped_rounds, require_cuda, require_nccl, rounds
from hocket.transport.relay_watchdog import RelayWatchdog
from hocket.transport.shared_host_buffer import SharedHostBuffer
from hocket.transport.stream_pending import StreamPending
from hocket.transport.stream_switch import on_stream

SLOTS = DEFAULT_SIZES.slots
RELEASE_S = 2.0
"""How long the watchdog's release keeps every wait of a timed-out relay satisfied while its streams drain."""


class HostRelay:
    """Shared pinned slots, copy streams and slot flags of one (group, device) (module docstring)."""

    def __init__(self, group: GroupHandle, device: torch.device, sizes: TransportSizes = DEFAULT_SIZES) -> None:
        if not isinstance(sizes, TransportSizes):
            raise TypeError(f"sizes={sizes!r} must be a hocket.core.sizes.TransportSizes")
        if not stream_memops.available():
            raise RuntimeError("transport='host_staged' needs CUDA stream memory operations (an NVIDIA driver "
                               "with cuStreamWaitValue32, CUDA >= 11.7), which this process cannot issue; use "
                               "transport='collective' on this machine")
        self.sizes = sizes
        self.slots = sizes.slots
        self.piece_bytes = sizes.piece_bytes
        self.rank, self.world = group.rank, group.world
        self.device = device
        self.slot_bytes = sizes.slot_bytes
        token = [f"{env.host_stage_dir()}/hocket-relay-{group.name}-{torch.randint(0, 2**62, ()).item():x}"]
        dist.broadcast_object_list(token, src=group.ranks[0], group=group.pg)
        if self.rank == 0:
            self.buf = SharedHostBuffer.create(token[0], nbytes=self.world * self.slots * self.slot_bytes,
                                               num_chunks=max(2 * self.world, self.world * self.slots * self.world))
        dist.barrier(group=group.pg, device_ids=[device.index])
        if self.rank != 0:
            self.buf = SharedHostBuffer.attach(token[0])
        self.d2h = torch.cuda.Stream(device)
        self.h2d = torch.cuda.Stream(device)
        self.fin = torch.cuda.Stream(device)
        """calls run their ``finish`` (a reduction's sum: SM kernels) here, after the H2D copies, so that a
        sum queued behind a running GEMM never holds the next calls' copies"""
        self.seq = 0
        self._slots: dict[tuple, torch.Tensor] = {}
        self._scratch: dict[tuple, list] = {}
        self._last_tracked: torch.cuda.Event | None = None
        """the end event of the latest call or replay handed to the watchdog (``_release_waits`` waits for it)"""
        with torch.cuda.device(self.device):
            self._word = [stream_memops.device_pointer(self.buf.ready_word_ptr(c)) for c in range(self.buf.num_chunks)]
        self.watchdog = RelayWatchdog(
            name=f"host relay of group {group.name!r} on {self.device}", timeout_s=env.wait_timeout_s(),
            release=self._release_waits, describe=self._lagging,
            on_start=lambda: torch.cuda.set_device(self.device)).start()
        dist.barrier(group=group.pg, device_ids=[device.index])
        if self.rank == 0:  # every rank has mapped the file: its name may go (the mappings stay)
            self.buf.path.unlink()

    def flag(self, sender: int, k: int, receiver: int) -> int:
        """The header word of slot ``k`` of ``sender`` as read by ``receiver``: 1 once the sender's copy
        into the slot landed, 0 once the receiver copied it out."""
        return (sender * self.slots + k) * self.world + receiver

    def _release_waits(self) -> None:
        """Satisfy every stream wait of this relay (the watchdog's last resort): until this rank's copy
        streams have drained and the last call it tracked (eager, or a CUDA graph replay, whose copies run
        on the graph's own streams) has ended, at most ``RELEASE_S``, keep every slot this rank sends
        through marked read and every slot it receives from marked written, so each wait they reach passes."""
        deadline = time.monotonic() + RELEASE_S
        peers = [p for p in range(self.world) if p != self.rank]
        while True:
            for p in peers:
                for k in range(self.slots):
                    self.buf.publish(self.flag(self.rank, k, p), 0)
                    self.buf.publish(self.flag(p, k, self.rank), 1)
            drained = all(s.query() for s in (self.d2h, self.h2d, self.fin))
            if (drained and (self._last_tracked is None or self._last_tracked.query())) or time.monotonic() > deadline:
                return
            time.sleep(1e-3)

    def _lagging(self) -> str:
        """The slots' flags (for the watchdog's error): which sends a peer has not read, and which
        receives it has not written."""
        unread, unwritten = [], []
        for p in range(self.world):
            if p != self.rank:
                unread += [f"{k}->{p}" for k in range(self.slots) if self.buf.ready_value(self.flag(self.rank, k, p))]
                unwritten += [f"{p}->{k}" for k in range(self.slots)
                              if not self.buf.ready_value(self.flag(p, k, self.rank))]
        return (f"this rank (rank {self.rank}) is at message {self.seq}; its slots still unread by a peer: "
                f"{', '.join(unread) or 'none'}; peer slots (rank->slot) not written: {', '.join(unwritten) or 'none'}")

    def _post_on_device(self, messages, finish, ready: torch.cuda.Event, ready_at=None,
                        marks=()) -> tuple[torch.cuda.Event, dict[int, torch.cuda.Event]]:
        """Enqueue ``messages`` (``(send, receive)`` pairs: ``send(slot)`` enqueues D2H copies into this
        rank's host slot, ``receive(slot_of)`` the H2D copies and reductions from every peer's slot,
        ``slot_of(rank, dtype)``) with stream-written and stream-awaited slot flags (:meth:`flag`: the
        sender's D2H stream waits until every reader reset the slot's flags to 0, copies, sets them to 1; a
        reader's H2D stream waits for 1, copies, resets to 0. Every value is a constant, so a call captured
        in a CUDA graph replays correctly), in batches of at most ``slots`` messages: a batch's
        device-to-host sides on the D2H stream, then its host-to-device sides on the H2D stream (one stream
        switch each). Receives only write device scratch or outputs that are not sent, so each message is
        read as soon as every peer wrote it and only ``finish()`` (an all-reduce's sum overwrites what it
        sent) waits for this rank's device-to-host copies (a batch pipeline, whose receives also waited
        for this rank's own copies of their batch, was removed: the two copy directions then overlap
        message by message). Within a batch a D2H wait only needs reads of
        earlier batches, so the order is deadlock-free even where the GPU runs both streams through one
        hardware queue (a whole call's D2H sides first was not: on 2xH200 a 64 MiB reduce-scatter of 10
        messages stalled both ranks until the watchdog fired). ``finish()`` runs on a stream of its own
        after the copies (a sum behind a running GEMM would otherwise hold the H2D stream, and with it
        every later call's receives); returns the event after it, and the events recorded on the H2D
        stream after the receives of the messages in ``marks``. ``ready_at[i]``: an event message ``i``'s
        device-to-host copy (and every later one) also waits for."""
        w, rank, words = self.world, self.rank, self._word
        peers = [p for p in range(w) if p != rank]
        marked: dict[int, torch.cuda.Event] = {}
        self.d2h.wait_event(ready)
        self.h2d.wait_event(ready)
        flag = self.flag
        for start in range(0, len(messages), self.slots):
            batch = messages[start:start + self.slots]
            first = self.seq + 1
            with on_stream(self.d2h):
                for index, (send, _) in enumerate(batch, start=start):
                    if ready_at and index in ready_at:
                        self.d2h.wait_event(ready_at[index])
                    self.seq += 1
                    k = self.seq % self.slots
                    for p in peers:  # every peer has read this slot's previous message
                        stream_memops.wait_value_eq(self.d2h, words[flag(rank, k, p)], 0)
                    send(lambda dtype, k=k: self.slot(rank, k, dtype))
                    for p in peers:
                        stream_memops.write_value(self.d2h, words[flag(rank, k, p)], 1)
            with on_stream(self.h2d):
                for seq, (_, receive) in enumerate(batch, start=first):
                    k = seq % self.slots
                    for p in peers:
                        stream_memops.wait_value_eq(self.h2d, words[flag(p, k, rank)], 1)
                    receive(lambda r, dtype, k=k: self.slot(r, k, dtype))
                    for p in peers:
                        stream_memops.write_value(self.h2d, words[flag(p, k, rank)], 0)
                    if seq - first + start in marks:
                        marked[seq - first + start] = self.h2d.record_event()
        with on_stream(self.h2d):
            self.h2d.wait_stream(self.d2h)  # the call ends after its sends too; finish may overwrite what was sent
            copied = self.h2d.record_event()
        if finish is None:
            return copied, marked
        self.fin.wait_event(copied)
        with on_stream(self.fin):
            finish()
            return self.fin.record_event(), marked

    def slot(self, rank: int, k: int, dtype: torch.dtype) -> torch.Tensor:
        """Rank ``rank``'s slot ``k`` as a flat ``dtype`` host tensor (views are cached)."""
        key = (rank, k, dtype)
        view = self._slots.get(key)
        if view is None:
            start = (rank * self.slots + k) * self.slot_bytes
            raw = self.buf.data[start:start + self.slot_bytes]
            view = self._slots[key] = raw[:self.slot_bytes // dtype.itemsize * dtype.itemsize].view(dtype)
        return view

    def capacity(self, dtype: torch.dtype) -> int:
        return self.slot_bytes // dtype.itemsize

    def message_elements(self, dtype: torch.dtype, *, copies: int = 1, slot_copies: int | None = None,
                         piece_bytes: int | None = None) -> int:
        """Elements per range of a whole message: ``copies`` ranges go device -> host together (at most
        ``piece_bytes``, default the relay's ``sizes.piece_bytes``) and the slot holds ``slot_copies`` of
        them (default ``copies``)."""
        piece_bytes = self.piece_bytes if piece_bytes is None else piece_bytes
        return min(self.slot_bytes // max(1, slot_copies or copies), piece_bytes // max(1, copies)) // dtype.itemsize

    def pieces(self, total: int, dtype: torch.dtype, *, copies: int = 1, slot_copies: int | None = None,
               piece_bytes: int | None = None) -> list[tuple[int, int]]:
        """Element ranges of one collective's messages (:meth:`message_elements` each, the first two
        ramped: a quarter and a half)."""
        return ramped_rounds(total, self.message_elements(dtype, copies=copies, slot_copies=slot_copies,
                                                          piece_bytes=piece_bytes))

    def split_pieces(self, splits: list[tuple[int, int]], dtype: torch.dtype, *, copies: int = 1,
                     slot_copies: int | None = None, piece_bytes: int | None = None
                     ) -> tuple[list[tuple[int, int]], list[int]]:
        """Messages of a collective whose element ranges ``splits`` (consecutive, from 0) must each end
        on a message edge: the first split ramped like :meth:`pieces`, the others in whole messages.
        Returns the messages' ranges and, per split, the index of its last message."""
        per = self.message_elements(dtype, copies=copies, slot_copies=slot_copies, piece_bytes=piece_bytes)
        out: list[tuple[int, int]] = []
        last: list[int] = []
        edge = 0
        for i, (lo, hi) in enumerate(splits):
            if lo != edge or hi < lo:
                raise ValueError(f"splits={splits!r} must be consecutive element ranges starting at 0")
            edge = hi
            if hi > lo or not out:  # an empty split adds no message (an empty call still sends one)
                cut = ramped_rounds(hi - lo, per) if not out else rounds(hi - lo, per)
                out.extend((lo + a, lo + b) for a, b in cut)
            last.append(len(out) - 1)
        return out, last

    def post(self, messages, *tensors: torch.Tensor, finish=None, what: str,
             ready: torch.cuda.Event | None = None) -> StreamPending:
        """Enqueue ``messages`` (``(send, receive)`` pairs, see :meth:`_post_on_device`) after ``ready``
        (default: the work enqueued so far on the caller's stream), on the calling thread; ``finish()``
        then runs on the relay's finish stream after the copies. ``tensors`` stay allocated until the
        copies and ``finish`` are done."""
        return self.post_marked(messages, *tensors, finish=finish, what=what, ready=ready)[0]

    def post_marked(self, messages, *tensors: torch.Tensor, finish=None, what: str,
                    ready: torch.cuda.Event | None = None, ready_at: dict | None = None, marks=(),
                    finish_after: torch.cuda.Event | None = None, scratch_slot: list | None = None
                    ) -> tuple[StreamPending, list]:
        """:meth:`post`, plus: message ``i``'s device-to-host copy (and every later one's) also waits for
        ``ready_at[i]`` (e.g. the GEMM that wrote its rows); and one pending per index in ``marks`` that
        ends once that message (and every earlier one) was received. ``finish()`` also waits for
        ``finish_after`` (e.g. the GEMM of this rank's own block, which a reduce-scatter's sum reads).
        ``scratch_slot``: the ring slot of the call's :meth:`scratch` buffer, which records the call's end
        event."""
        marks = tuple(marks)
        if finish is not None and finish_after is not None:
            finish = _after(finish_after, finish)
        capturing = _capturing(self.device)
        self.watchdog.check()
        if ready is None:
            ready = torch.cuda.current_stream(self.device.index).record_event()
        for t in tensors:
            for stream in (self.d2h, self.h2d, self.fin):
                t.record_stream(stream)
        done, marked = self._post_on_device(list(messages), finish, ready, ready_at, marks)
        if capturing:  # the graph's replays are tracked instead (hocket.ops.CapturedCall)
            CAPTURED.append(self)
        else:
            if scratch_slot is not None:
                scratch_slot[1] = done
            self._last_tracked = done
            self.watchdog.track(f"{what} (messages up to {self.seq})", done)
        index = self.device.index
        return StreamPending(done, what=what, device=index), [
            StreamPending(marked[i], what=f"{what} (to message {i})", device=index) for i in marks]

    def scratch(self, numel: int, dtype: torch.dtype) -> tuple[torch.Tensor, list | None]:
        """A device buffer of ``numel`` elements for one call's receives (H2D stream) and its ``finish``
        (finish stream), and its ring slot (pass it to :meth:`post_marked` as ``scratch_slot``). Calls take
        turns on ``SCRATCH_RING`` buffers per (size, dtype): before a buffer is written again, the H2D
        stream waits for the end of the call that used it last, so a later call's receives never
        overwrite what an earlier call's pending sum still reads, and no call allocates. A call captured
        in a CUDA graph allocates its own (from the graph's memory pool, which its replays keep)."""
        if _capturing(self.device):
            buf = torch.empty(numel, dtype=dtype, device=self.device)
            buf.record_stream(self.h2d)
            buf.record_stream(self.fin)
            return buf, None
        key = (numel, dtype)
        ring = self._scratch.pop(key, None)
        if ring is None:
            if len(self._scratch) >= SCRATCH_SHAPES:  # forget the least recently used size
                self._scratch.pop(next(iter(self._scratch)))
            ring = [[torch.empty(numel, dtype=dtype, device=self.device), None] for _ in range(SCRATCH_RING)]
        self._scratch[key] = ring  # most recently used last
        ring.append(ring.pop(0))
        slot = ring[-1]
        if slot[1] is not None:
            self.h2d.wait_event(slot[1])
        return slot[0], slot

    def track_replay(self, event: torch.cuda.Event, what: str) -> None:
        """Bound a CUDA graph replay that runs calls of this relay (``hocket.ops.CapturedCall``): the watchdog
        times it out like an eager call, ending at ``event``."""
        self._last_tracked = event
        self.watchdog.track(what, event)

    def close(self) -> None:
        self.watchdog.wait_idle()  # the watchdog releases the streams if a peer never signals
        self.d2h.synchronize()
        self.h2d.synchronize()
        self.fin.synchronize()
        self._slots.clear()
        self._scratch.clear()
        self.buf.close()
        self.watchdog.close()
        self.watchdog.check()  # a call that timed out and was never raised for: say so now


def _capturing(device: torch.device) -> bool:
    """Whether the current stream of ``device`` is being captured into a CUDA graph."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _after(event: torch.cuda.Event, fn):
    """``fn`` run on the current stream once ``event`` has fired."""
    def run():
        torch.cuda.current_stream().wait_event(event)
        fn()
    return run


CAPTURED: list[HostRelay] = []
"""Relays that enqueued a call while a CUDA graph was being captured (``hocket.ops.CapturedCall`` reads and
clears it around a capture, to bound each replay with those relays' watchdogs)."""

RELAYS: dict[tuple[int, int], PerGroup[HostRelay]] = {}
"""One relay per (group, device) and buffer layout ``(slots, mailbox_bytes)`` of the sizes in force at
the call: each keeps its own buffers, flags and slot order, so every rank may switch sizes between calls
(all ranks alike). The message size is the caller's (:class:`HostStagedTransport`)."""


def relays_for(sizes: TransportSizes = DEFAULT_SIZES) -> PerGroup[HostRelay]:
    """The relays of the buffer layout of ``sizes`` (made on first use, with ``sizes``)."""
    key = (sizes.slots, sizes.mailbox_bytes)
    if key not in RELAYS:
        RELAYS[key] = PerGroup(lambda group, device: HostRelay(group, device, sizes))
    return RELAYS[key]


def close_relays(group_name: str | None = None) -> int:
    """Free the relays (all, or those of one group); call on every rank. Returns how many. Raises
    :class:`~hocket.transport.pending.TransportError` if a relay's call had timed out unreported."""
    closed, failure = 0, None
    for relays in RELAYS.values():
        try:
            closed += relays.close(group_name)
        except RuntimeError as exc:  # close the other layouts' relays too, then report
            failure = failure or exc
    if failure is not None:
        raise failure
    return closed


_CPU_GROUPS: dict[tuple[str, int], dist.ProcessGroup] = {}
"""a gloo group over the ranks of each NCCL group (its name, its process group's id) the host-staged
all-to-all has used"""


def _cpu_group(group: GroupHandle) -> dist.ProcessGroup:
    key = (group.name, id(group.pg))
    pg = _CPU_GROUPS.get(key)
    if pg is None:
        pg = _CPU_GROUPS[key] = dist.new_group(list(group.ranks), backend="gloo", use_local_synchronization=True)
    return pg


class _CopyBack:
    """A host-staged all-to-all in flight: ``wait`` waits for the gloo transfer, then copies host -> device."""

    def __init__(self, pending, host_out: torch.Tensor, out: torch.Tensor, keep: tuple) -> None:
        self._pending, self._host_out, self._out, self._keep = pending, host_out, out, keep

    def wait(self) -> None:
        self._pending.wait()
        if self._host_out is not None:
            self._out.copy_(self._host_out, non_blocking=True)
            self._host_out = None
            self._keep = ()


class HostStagedTransport:
    """Collectives through shared pinned host memory (see the module docstring)."""

    name = "host_staged"
    takes_ready_event = True
    """collectives take ``ready=`` (an event of the caller's stream): the copies wait for it instead of
    for everything enqueued before the call, so a caller may launch a GEMM first and issue the
    transfer after it."""

    def __init__(self, group: GroupHandle, sizes: TransportSizes | None = None) -> None:
        require_nccl(group, self.name, "stages GPU tensors through pinned host memory")
        if sizes is not None and not isinstance(sizes, TransportSizes):
            raise TypeError(f"sizes={sizes!r} must be a hocket.core.sizes.TransportSizes, or None for the sizes "
                            f"in force (hocket.core.sizes.sizes_in_force())")
        self.group = group
        self.sizes = sizes_in_force() if sizes is None else sizes
        """the relay's buffer layout and this transport's message size (default: the sizes in force when it
        was made)"""

    def _relay(self, t: torch.Tensor) -> HostRelay:
        require_cuda(t, self.name)
        return relays_for(self.sizes).get(self.group, t.device)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, *, ready: torch.cuda.Event | None = None):
        relay = self._relay(inp)
        n = inp.numel()
        pieces = relay.pieces(n, inp.dtype, piece_bytes=self.sizes.piece_bytes)
        return self._all_gather(relay, out, inp, pieces, ready=ready)[0]

    def all_gather_split(self, out: torch.Tensor, inp: torch.Tensor, rows: list[tuple[int, int]], *,
                         ready: torch.cuda.Event | None = None, own_rows: bool = True) -> list:
        """All-gather ``inp`` (this rank's ``[R, ...]`` shard) into ``out`` (``[world, R, ...]``) in one
        relay call whose messages end on the edges of the row ranges ``rows`` (consecutive, covering
        ``R``); returns one pending per range: waiting on it orders the current stream after every
        peer's rows of that range (and of the ranges before it) landed in ``out``. The last one also
        covers the call's end (with ``own_rows``, this rank's own rows copied into ``out``; without, that
        block of ``out`` is left as it was: for a caller that reads only the peers' rows)."""
        relay = self._relay(inp)
        per_row = inp[0].numel() if inp.dim() and inp.shape[0] else 0
        if not rows or rows[-1][1] != (inp.shape[0] if inp.dim() else 1):
            raise ValueError(f"rows={rows!r} must cover the shard's {inp.shape[0] if inp.dim() else 1} rows")
        pieces, last = relay.split_pieces([(lo * per_row, hi * per_row) for lo, hi in rows], inp.dtype,
                                           piece_bytes=self.sizes.piece_bytes)
        done, marked = self._all_gather(relay, out, inp, pieces, ready=ready, marks=last[:-1], own_rows=own_rows)
        return [*marked, done]

    def _all_gather(self, relay: HostRelay, out, inp, pieces, *, ready, marks=(), own_rows: bool = True):
        src, dst = inp.reshape(-1), out.view(-1)
        n, rank = src.numel(), relay.rank
        messages = []
        for lo, hi in pieces:
            def send(slot, lo=lo, hi=hi):
                slot(src.dtype)[:hi - lo].copy_(src[lo:hi], non_blocking=True)

            def receive(slot_of, lo=lo, hi=hi):
                for p in range(relay.world):
                    if p != rank:
                        dst[p * n + lo:p * n + hi].copy_(slot_of(p, src.dtype)[:hi - lo], non_blocking=True)

            messages.append((send, receive))

        def copy_own_rows():
            dst[rank * n:(rank + 1) * n].copy_(src)

        return relay.post_marked(messages, src, dst, finish=copy_own_rows if own_rows else None,
                                 what="host-staged all-gather", ready=ready, marks=marks)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, *, ready: torch.cuda.Event | None = None):
        relay = self._relay(inp)
        n = out.numel()
        pieces = relay.pieces(n, out.dtype, copies=relay.world - 1, slot_copies=relay.world,
                              piece_bytes=self.sizes.piece_bytes)
        return self._reduce_scatter(relay, out, inp, pieces, ready=ready)

    def reduce_scatter_split(self, out: torch.Tensor, inp: torch.Tensor, rows: list[tuple[int, int]],
                             ready_each: list[torch.cuda.Event], *, own_ready: torch.cuda.Event | None = None):
        """Reduce-scatter ``inp`` (``[world, R, ...]``: one block per owner) into ``out`` (``[R, ...]``) in
        one relay call whose messages end on the edges of the row ranges ``rows``; the messages of
        range ``i`` leave only after ``ready_each[i]`` (an event recorded once the caller wrote those rows
        of every peer's block), so the first rows travel while later ones are computed. This rank's own
        block of ``inp`` is read by the final sum only, after ``own_ready`` (default: ``ready_each[-1]``),
        so the caller may compute it after the peers' blocks, beside the transfer."""
        relay = self._relay(inp)
        if len(ready_each) != len(rows):
            raise ValueError(f"ready_each has {len(ready_each)} events for {len(rows)} row ranges; give one per range")
        if not rows or rows[-1][1] != (out.shape[0] if out.dim() else 1):
            raise ValueError(f"rows={rows!r} must cover the output's {out.shape[0] if out.dim() else 1} rows")
        per_row = out[0].numel() if out.dim() and out.shape[0] else 0
        pieces, last = relay.split_pieces([(lo * per_row, hi * per_row) for lo, hi in rows], out.dtype,
                                          copies=relay.world - 1, slot_copies=relay.world,
                                          piece_bytes=self.sizes.piece_bytes)
        ready_at, first = {}, 0
        for event, end in zip(ready_each, last):
            ready_at[first] = event  # an empty range adds no message: the next range's (later) event wins
            first = end + 1
        return self._reduce_scatter(relay, out, inp, pieces, ready=ready_each[0], ready_at=ready_at,
                                    own_ready=own_ready or ready_each[-1])

    def _reduce_scatter(self, relay: HostRelay, out, inp, pieces, *, ready, ready_at=None, own_ready=None):
        w, rank = relay.world, relay.rank
        dst = out.view(-1)
        n = dst.numel()
        blocks = inp.reshape(w, n)
        scratch, scratch_slot = relay.scratch(w * n, dst.dtype)
        parts = scratch.view(w, n)
        messages = []
        for lo, hi in pieces:
            size = hi - lo

            def send(slot, lo=lo, hi=hi, size=size):
                staged = slot(dst.dtype)[:w * size].view(w, size)
                for p in range(w):
                    if p != rank:
                        staged[p].copy_(blocks[p, lo:hi], non_blocking=True)

            def receive(slot_of, lo=lo, hi=hi, size=size):
                for p in range(w):
                    if p != rank:
                        parts[p, lo:hi].copy_(slot_of(p, dst.dtype)[:w * size].view(w, size)[rank], non_blocking=True)

            messages.append((send, receive))

        def reduce():
            if w == 2:  # one rounding, one pass: own block + the peer's partial
                torch.add(blocks[rank], parts[1 - rank], out=dst)
                return
            parts[rank].copy_(blocks[rank])
            torch.sum(parts, dim=0, out=dst)

        return relay.post_marked(messages, blocks, dst, finish=reduce, what="host-staged reduce-scatter",
                                 ready=ready, ready_at=ready_at, finish_after=own_ready, scratch_slot=scratch_slot)[0]

    def all_reduce(self, tensor: torch.Tensor, *, ready: torch.cuda.Event | None = None):
        relay = self._relay(tensor)
        w, rank = relay.world, relay.rank
        flat = tensor.view(-1)
        n = flat.numel()
        scratch, scratch_slot = relay.scratch(w * n, flat.dtype)
        parts = scratch.view(w, n)
        messages = []
        for lo, hi in relay.pieces(n, flat.dtype, piece_bytes=self.sizes.piece_bytes):
            size = hi - lo

            def send(slot, lo=lo, hi=hi, size=size):
                slot(flat.dtype)[:size].copy_(flat[lo:hi], non_blocking=True)

            def receive(slot_of, lo=lo, hi=hi, size=size):
                for p in range(w):
                    if p != rank:
                        parts[p, lo:hi].copy_(slot_of(p, flat.dtype)[:size], non_blocking=True)

            messages.append((send, receive))

        def reduce():  # after every message's own device-to-host copy (post orders it so)
            parts[rank].copy_(flat)
            torch.sum(parts, dim=0, out=flat)

        return relay.post_marked(messages, flat, finish=reduce, what="host-staged all-reduce", ready=ready,
                                 scratch_slot=scratch_slot)[0]

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_splits, in_splits):
        """:meth:`hocket.transport.torch_dist.TorchDistTransport.all_to_all` staged through host memory: the
        rows go device -> pinned host, through ``all_to_all_single`` of a gloo group over the same ranks (made
        once per group, by every rank at its first call), and host -> device into ``out``. On a gloo group the
        buffers are already host memory and the group's own ``all_to_all_single`` moves them. The relay's
        slots are not used: their messages have one size for every peer, and an all-to-all's blocks differ
        per peer. The returned pending's ``wait`` ends after the copy into ``out``."""
        from hocket.transport.pending import Pending

        osp = None if out_splits is None else [int(v) for v in out_splits]
        isp = None if in_splits is None else [int(v) for v in in_splits]
        if not inp.is_cuda:
            work = dist.all_to_all_single(out, inp, osp, isp, group=self.group.pg, async_op=True)
            return Pending([work], what="host-staged all-to-all", group_name=self.group.name, on_cuda=False)
        host_in = torch.empty(inp.shape, dtype=inp.dtype, pin_memory=True)
        host_in.copy_(inp, non_blocking=False)
        host_out = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
        work = dist.all_to_all_single(host_out, host_in, osp, isp, group=_cpu_group(self.group), async_op=True)
        return _CopyBack(Pending([work], what="host-staged all-to-all", group_name=self.group.name, on_cuda=False),
                         host_out, out, (host_in,))

    def exchange(self, sends, recvs):
        raise ValueError("transport='host_staged' carries whole collectives, not peer-to-peer ring steps; use "
                         "strategy 'chunked' or 'sequential' with it")

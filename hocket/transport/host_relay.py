"""``transport="host_staged"`` for the operators: collectives between GPUs of one node through
shared, pinned host memory, for GPUs without a peer path (e.g. of two vendors).

Each (group, device) gets one :class:`HostRelay`: a :class:`SharedHostBuffer` file that every
rank maps and page-locks, holding ``HOCKET_HOST_STAGE_SLOTS`` (default ``SLOTS``) message slots per rank; a device-to-host and a
host-to-device copy stream; CUDA IPC events (``landed`` per slot: this rank's copy into
its slot is done; ``consumed`` per slot: this rank has read every peer's slot); and an
:class:`~hocket.transport.issue_thread.IssueThread` that issues the messages when
``HOCKET_HOST_STAGE_THREAD=1`` (default 0: the calling thread issues them; on 2xH200 the
thread's polling latency cost more than it saved). A collective is
cut into messages of at most ``HOCKET_HOST_STAGE_PIECE_MB`` (ramped: the first two smaller), so
the device-to-host copy of one message runs while the host-to-device copy of the previous one
does. Every step is stream-ordered, so no thread waits for a copy; the issue thread waits
(bounded, a few microseconds when ranks run in step) for the other ranks to have *enqueued*
their side of a message, so that each cross-process event wait refers to the right record:

1. sender: once every rank has enqueued its reads of this slot's previous message, the D2H
   stream waits on their ``consumed`` events, copies this rank's data into its slot and
   records ``landed``; the rank then publishes "sent ``seq``" in the buffer's header;
2. receiver: once every rank published "sent ``seq``", the H2D stream waits on their
   ``landed`` events, copies (and reduces) their slots into the output, records
   ``consumed`` and publishes "read ``seq``".

With ``HOCKET_HOST_STAGE_SIGNAL=device`` (default) no thread waits for a peer at all: one header
word per (sender, slot, reader) is set to 1 by the sender's D2H stream after its copy into the slot
and reset to 0 by the reader's H2D stream after its copy out (``cuStreamWriteValue32``, a system-wide
fence first); the reader waits for 1 and the sender, before it reuses the slot, for 0
(``cuStreamWaitValue32``, done by the GPU's stream front end, no SM). Both steps above become
stream-ordered, the launching thread only enqueues, and since every awaited or written value is a
constant, a call captured in a CUDA graph (``hocket.ops.CapturedCall``) replays correctly, interleaved with
eager calls as long as every rank makes the same calls and replays in the same order. Those waits
have no timeout of their own: a
:class:`~hocket.transport.relay_watchdog.RelayWatchdog` thread times out a call that does not finish
within ``HOCKET_TIMEOUT_S``, writes values that release every wait, and makes the relay raise.
``HOCKET_HOST_STAGE_SIGNAL=host`` keeps the host handshake with IPC events described above.

The copies wait for a "ready" event (inputs written, outputs free): by default one recorded on the
caller's stream at the call, or one the caller passes (``ready=``, recorded before a GEMM the caller
launched first, so the handshakes run while that GEMM does; see ``hocket.ops.lowering.peer_chunked``).
The returned pending (``ThreadPending`` or ``StreamPending``) ends after both streams. All
ranks must issue the same transfers in the same order (the operators agree on their plan first);
every host wait is bounded by ``HOCKET_TIMEOUT_S``.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from hocket import env
from hocket.transport.group import GroupHandle
from hocket.transport.issue_thread import IssueThread, ThreadPending
from hocket.kernels import stream_memops
from hocket.transport.per_group import PerGroup, ramped_rounds, require_cuda, require_nccl, rounds
from hocket.core.relay_layout import SCRATCH_RING, SCRATCH_SHAPES
from hocket.transport.relay_watchdog import RelayWatchdog
from hocket.transport.shared_host_buffer import SharedHostBuffer
from hocket.transport.stream_pending import StreamPending
from hocket.transport.stream_switch import on_stream

SLOTS = 4
RELEASE_S = 2.0
"""How long the watchdog's release keeps every wait of a timed-out relay satisfied while its streams drain."""
POLL_S = 2e-5
"""host poll interval of the issue thread (a real sleep: a spinning thread would hold the GIL that the
launching thread needs for every kernel launch)."""


class HostRelay:
    """Shared pinned slots, copy streams and IPC events of one (group, device) (module docstring)."""

    def __init__(self, group: GroupHandle, device: torch.device, slot_bytes: int, *, signal: str,
                 slots: int = SLOTS) -> None:
        if signal not in env.HOST_STAGE_SIGNALS:
            raise ValueError(f"signal={signal!r} must be one of {env.HOST_STAGE_SIGNALS}")
        if not 1 <= slots <= 64:
            raise ValueError(f"slots={slots!r} must be 1..64 (HOCKET_HOST_STAGE_SLOTS)")
        self.slots = slots
        self.rank, self.world = group.rank, group.world
        self.device = device
        self.slot_bytes = slot_bytes
        token = [f"{env.host_stage_dir()}/hocket-relay-{group.name}-{torch.randint(0, 2**62, ()).item():x}"]
        dist.broadcast_object_list(token, src=group.ranks[0], group=group.pg)
        if self.rank == 0:
            self.buf = SharedHostBuffer.create(token[0], nbytes=self.world * slots * slot_bytes,
                                               num_chunks=max(2 * self.world, self.world * slots * self.world))
        dist.barrier(group=group.pg, device_ids=[device.index])
        if self.rank != 0:
            self.buf = SharedHostBuffer.attach(token[0])
        self.d2h = torch.cuda.Stream(device)
        self.h2d = torch.cuda.Stream(device)
        self.fin = torch.cuda.Stream(device)
        """device-signal calls run their ``finish`` (a reduction's sum: SM kernels) here, after the H2D
        copies, so that a sum queued behind a running GEMM never holds the next calls' copies"""
        self.landed = [torch.cuda.Event(interprocess=True) for _ in range(slots)]
        self.consumed = [torch.cuda.Event(interprocess=True) for _ in range(slots)]
        mine = ([e.ipc_handle() for e in self.landed], [e.ipc_handle() for e in self.consumed])
        everyone = [None] * self.world
        dist.all_gather_object(everyone, mine, group=group.pg)
        self.peer_landed = {p: [torch.cuda.Event.from_ipc_handle(device, h) for h in everyone[p][0]]
                            for p in range(self.world) if p != self.rank}
        self.peer_consumed = {p: [torch.cuda.Event.from_ipc_handle(device, h) for h in everyone[p][1]]
                              for p in range(self.world) if p != self.rank}
        self.seq = 0
        self._slots: dict[tuple, torch.Tensor] = {}
        self._scratch: dict[tuple, list] = {}
        self.issuer = IssueThread(device, name=f"host-relay-{group.name}-{device}")
        self.signal = signal
        self._last_tracked: torch.cuda.Event | None = None
        """the end event of the latest call or replay handed to the watchdog (``_release_waits`` waits for it)"""
        self.watchdog: RelayWatchdog | None = None
        if self.signal == "device":
            self._start_device_signals(group.name)
        dist.barrier(group=group.pg, device_ids=[device.index])
        if self.rank == 0:  # every rank has mapped the file: its name may go (the mappings stay)
            self.buf.path.unlink()

    # -- device signals (HOCKET_HOST_STAGE_SIGNAL=device) --------------------------------------------
    def _start_device_signals(self, group_name: str) -> None:
        if not stream_memops.available():
            raise RuntimeError("HOCKET_HOST_STAGE_SIGNAL=device needs CUDA stream memory operations (an NVIDIA "
                               "driver with cuStreamWaitValue32), which this process cannot issue; set "
                               "HOCKET_HOST_STAGE_SIGNAL=host")
        with torch.cuda.device(self.device):
            self._word = [stream_memops.device_pointer(self.buf.ready_word_ptr(c)) for c in range(self.buf.num_chunks)]
        self.watchdog = RelayWatchdog(
            name=f"host relay of group {group_name!r} on {self.device}", timeout_s=env.wait_timeout_s(),
            release=self._release_waits, describe=self._lagging,
            on_start=lambda: torch.cuda.set_device(self.device)).start()

    def flag(self, sender: int, k: int, receiver: int) -> int:
        """The header word of slot ``k`` of ``sender`` as read by ``receiver`` (device signals): 1 once the
        sender's copy into the slot landed, 0 once the receiver copied it out."""
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
                unwritten += [f"{p}->{k}" for k in range(self.slots) if not self.buf.ready_value(self.flag(p, k, self.rank))]
        return (f"this rank (rank {self.rank}) is at message {self.seq}; its slots still unread by a peer: "
                f"{', '.join(unread) or 'none'}; peer slots (rank->slot) not written: {', '.join(unwritten) or 'none'}")

    def _post_on_device(self, messages, finish, ready: torch.cuda.Event, ready_at=None,
                        marks=()) -> tuple[torch.cuda.Event, dict[int, torch.cuda.Event]]:
        """Enqueue ``messages`` (see :meth:`message`) with stream-written and stream-awaited slot flags
        (:meth:`flag`: the sender's D2H stream waits until every reader reset the slot's flags to 0,
        copies, sets them to 1; a reader's H2D stream waits for 1, copies, resets to 0. Every value is a
        constant, so a call captured in a CUDA graph replays correctly), in batches of at most ``SLOTS`` messages: a batch's device-to-host sides on the D2H
        stream, then its host-to-device sides on the H2D stream (one stream switch each). Receives only
        write device scratch or outputs that are not sent, so with ``HOCKET_HOST_STAGE_PIPELINE=message``
        (default) only ``finish()`` (an all-reduce's sum overwrites what it sent) waits for this rank's
        device-to-host copies; ``batch`` also holds each batch's receives until its sends ended. Within a
        batch a D2H wait only needs reads of earlier batches, so the order is deadlock-free even where the
        GPU runs both streams through one hardware queue (a whole call's D2H sides first was not: on
        2xH200 a 64 MiB reduce-scatter of 10 messages stalled both ranks until the watchdog fired).
        ``finish()`` runs on a stream of its own after the copies (a sum behind a running GEMM would
        otherwise hold the H2D stream, and with it every later call's receives); returns the event after it,
        and the events recorded on the H2D stream after the receives of the messages in ``marks``.
        ``ready_at[i]``: an event message ``i``'s device-to-host copy (and every later one) also waits for."""
        w, rank, words = self.world, self.rank, self._word
        peers = [p for p in range(w) if p != rank]
        per_batch = env.host_stage_pipeline() == "batch"
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
                if per_batch:
                    self.h2d.wait_event(self.d2h.record_event())
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

    def message_elements(self, dtype: torch.dtype, *, copies: int = 1, slot_copies: int | None = None) -> int:
        """Elements per range of a whole message: ``copies`` ranges go device -> host together (at most
        ``HOCKET_HOST_STAGE_PIECE_MB``) and the slot holds ``slot_copies`` of them (default ``copies``)."""
        return min(self.slot_bytes // max(1, slot_copies or copies),
                   env.host_stage_piece_bytes() // max(1, copies)) // dtype.itemsize

    def pieces(self, total: int, dtype: torch.dtype, *, copies: int = 1,
               slot_copies: int | None = None) -> list[tuple[int, int]]:
        """Element ranges of one collective's messages (:meth:`message_elements` each, the first two
        ramped: a quarter and a half)."""
        return ramped_rounds(total, self.message_elements(dtype, copies=copies, slot_copies=slot_copies))

    def split_pieces(self, splits: list[tuple[int, int]], dtype: torch.dtype, *, copies: int = 1,
                     slot_copies: int | None = None) -> tuple[list[tuple[int, int]], list[int]]:
        """Messages of a collective whose element ranges ``splits`` (consecutive, from 0) must each end
        on a message edge: the first split ramped like :meth:`pieces`, the others in whole messages.
        Returns the messages' ranges and, per split, the index of its last message."""
        per = self.message_elements(dtype, copies=copies, slot_copies=slot_copies)
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
             ready: torch.cuda.Event | None = None) -> ThreadPending | StreamPending:
        """Issue ``messages`` (``(send, receive)`` pairs, see :meth:`message`) after ``ready`` (default:
        the work enqueued so far on the caller's stream), on the issue thread or the calling thread
        (``HOCKET_HOST_STAGE_THREAD``); ``finish()`` then runs after the copies (device signals: on
        the relay's finish stream; host handshake: on the H2D stream). ``tensors`` stay allocated until
        the copies and ``finish`` are done."""
        return self.post_marked(messages, *tensors, finish=finish, what=what, ready=ready)[0]

    def post_marked(self, messages, *tensors: torch.Tensor, finish=None, what: str,
                    ready: torch.cuda.Event | None = None, ready_at: dict | None = None, marks=(),
                    finish_after: torch.cuda.Event | None = None, scratch_slot: list | None = None
                    ) -> tuple[ThreadPending | StreamPending, list]:
        """:meth:`post`, plus: message ``i``'s device-to-host copy (and every later one's) also waits for
        ``ready_at[i]`` (e.g. the GEMM that wrote its rows); and one pending per index in ``marks`` that
        ends once that message (and every earlier one) was received. On the issue thread
        (``HOCKET_HOST_STAGE_THREAD=1``) each of those is the whole call's pending: an event the thread
        records later could not be waited on now. ``finish()`` also waits for ``finish_after`` (e.g. the
        GEMM of this rank's own block, which a reduce-scatter's sum reads). ``scratch_slot``: the ring slot
        of the call's :meth:`scratch` buffer, which records the call's end event."""
        marks = tuple(marks)
        if finish is not None and finish_after is not None:
            finish = _after(finish_after, finish)
        capturing = _capturing(self.device)
        if capturing and (self.watchdog is None or env.host_stage_issue_thread()):
            raise RuntimeError(f"a {what} is being captured in a CUDA graph, which needs the relay's device "
                               f"signals on the calling thread: set HOCKET_HOST_STAGE_SIGNAL=device and "
                               f"HOCKET_HOST_STAGE_THREAD=0 (now {env.host_stage_signal()!r} and "
                               f"{int(env.host_stage_issue_thread())}), or call it outside the capture")
        if self.watchdog is not None:
            self.watchdog.check()
        if ready is None:
            ready = torch.cuda.current_stream(self.device.index).record_event()
        streams = (self.d2h, self.h2d, self.fin) if self.watchdog is not None else (self.d2h, self.h2d)
        for t in tensors:  # the finish stream runs work only with device signals
            for stream in streams:
                t.record_stream(stream)
        if self.watchdog is not None:  # nothing waits on the host: enqueue here, in order
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
        threaded = env.host_stage_issue_thread()
        marked: dict[int, torch.cuda.Event] = {}

        def job() -> torch.cuda.Event:
            after = ready
            for index, (send, receive) in enumerate(messages):
                if ready_at and index in ready_at:
                    after = ready_at[index]  # recorded after ``ready`` on the caller's stream
                self.message(send, receive, ready=after, poll_s=POLL_S if threaded else 0.0)
                if index in marks:
                    marked[index] = self.h2d.record_event()
            with on_stream(self.h2d):
                if finish is not None:
                    finish()
                return self.h2d.record_event()

        if threaded:
            pending = self.issuer.submit(job, what=what)
            return pending, [pending] * len(marks)
        self.issuer.drain()  # messages stay in order when the flag changes between calls
        done = job()
        if scratch_slot is not None:
            scratch_slot[1] = done
        index = self.device.index
        return StreamPending(done, what=what, device=index), [
            StreamPending(marked[i], what=f"{what} (to message {i})", device=index) for i in marks]

    def scratch(self, numel: int, dtype: torch.dtype) -> tuple[torch.Tensor, list | None]:
        """A device buffer of ``numel`` elements for one call's receives (H2D stream) and its ``finish``
        (finish stream), and its ring slot (pass it to :meth:`post_marked` as ``scratch_slot``). Calls
        issued on the calling thread take turns on ``SCRATCH_RING`` buffers per (size, dtype): before a
        buffer is written again, the H2D stream waits for the end of the call that used it last, so a
        later call's receives never overwrite what an earlier call's pending sum still reads, and no
        call allocates. On the issue thread (whose end event does not exist yet) each call allocates
        its own, kept by the caching allocator until both streams are done with it; so does a call
        captured in a CUDA graph (from the graph's memory pool, which its replays keep)."""
        if _capturing(self.device) or (self.watchdog is None and env.host_stage_issue_thread()):
            # captured: the graph's own memory, for every replay; issue thread: see above
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

    def message(self, send, receive, *, ready: torch.cuda.Event, poll_s: float = 0.0) -> None:
        """One message (on the issue thread): ``send(slot)`` enqueues D2H copies into this rank's
        host slot (on the D2H stream); ``receive(slot_of)`` enqueues the H2D copies (and reductions)
        from every peer's slot (``slot_of(rank)``, on the H2D stream). Both streams first wait for
        ``ready`` (the caller's inputs written and outputs free)."""
        self.seq += 1
        seq, k, w = self.seq, self.seq % self.slots, self.world
        peers = [p for p in range(w) if p != self.rank]
        if seq > self.slots:
            for p in peers:  # every reader of this slot's previous message has enqueued its reads
                self.buf.wait_ready(w + p, seq - self.slots, poll_s=poll_s)
                self.d2h.wait_event(self.peer_consumed[p][k])
        self.d2h.wait_event(ready)
        with on_stream(self.d2h):
            send(lambda dtype: self.slot(self.rank, k, dtype))
            self.landed[k].record(self.d2h)
        self.buf.publish(self.rank, seq)
        self.h2d.wait_event(ready)
        self.h2d.wait_event(self.landed[k])
        for p in peers:
            self.buf.wait_ready(p, seq, poll_s=poll_s)
            self.h2d.wait_event(self.peer_landed[p][k])
        with on_stream(self.h2d):
            receive(lambda rank, dtype: self.slot(rank, k, dtype))
            self.consumed[k].record(self.h2d)
        self.buf.publish(w + self.rank, seq)

    def track_replay(self, event: torch.cuda.Event, what: str) -> None:
        """Bound a CUDA graph replay that runs calls of this relay (``hocket.ops.CapturedCall``): the watchdog
        times it out like an eager call, ending at ``event``."""
        if self.watchdog is not None:
            self._last_tracked = event
            self.watchdog.track(what, event)

    def close(self) -> None:
        self.issuer.close()
        if self.watchdog is not None:  # the watchdog releases the streams if a peer never signals
            self.watchdog.wait_idle()
        self.d2h.synchronize()
        self.h2d.synchronize()
        self.fin.synchronize()
        self._slots.clear()
        self._scratch.clear()
        self.buf.close()
        if self.watchdog is not None:
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

RELAYS: dict[tuple[str, int], PerGroup[HostRelay]] = {}
"""One relay per (group, device), signalling mode and slot count (``HOCKET_HOST_STAGE_SIGNAL`` and
``HOCKET_HOST_STAGE_SLOTS`` at the call): each keeps its own buffers, flags and slot order, so every
rank may switch between calls (all ranks alike)."""


def relays_for(signal: str, slots: int) -> PerGroup[HostRelay]:
    """The relays of one signalling mode and slot count (made on first use); each slot holds
    ``HOCKET_SYMM_MAILBOX_MB / slots``."""
    key = (signal, slots)
    if key not in RELAYS:
        RELAYS[key] = PerGroup(lambda group, device: HostRelay(group, device, env.symm_mailbox_bytes() // slots,
                                                               signal=signal, slots=slots))
    return RELAYS[key]


def close_relays(group_name: str | None = None) -> int:
    """Free the relays (all, or those of one group); call on every rank. Returns how many. Raises
    :class:`~hocket.transport.pending.TransportError` if a relay's call had timed out unreported."""
    closed, failure = 0, None
    for relays in RELAYS.values():
        try:
            closed += relays.close(group_name)
        except RuntimeError as exc:  # close the other mode's relays too, then report
            failure = failure or exc
    if failure is not None:
        raise failure
    return closed


class HostStagedTransport:
    """Collectives through shared pinned host memory (see the module docstring)."""

    name = "host_staged"
    takes_ready_event = True
    """collectives take ``ready=`` (an event of the caller's stream): the copies wait for it instead of
    for everything enqueued before the call, so a caller may launch a GEMM first and issue the
    transfer (whose host handshakes then run while the GEMM does) after it."""

    def __init__(self, group: GroupHandle) -> None:
        require_nccl(group, self.name, "stages GPU tensors through pinned host memory")
        self.group = group

    def _relay(self, t: torch.Tensor) -> HostRelay:
        require_cuda(t, self.name)
        return relays_for(env.host_stage_signal(), env.host_stage_slots()).get(self.group, t.device)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, *, ready: torch.cuda.Event | None = None):
        relay = self._relay(inp)
        n = inp.numel()
        return self._all_gather(relay, out, inp, relay.pieces(n, inp.dtype), ready=ready)[0]

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
        pieces, last = relay.split_pieces([(lo * per_row, hi * per_row) for lo, hi in rows], inp.dtype)
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
        pieces = relay.pieces(n, out.dtype, copies=relay.world - 1, slot_copies=relay.world)
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
                                          copies=relay.world - 1, slot_copies=relay.world)
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
        for lo, hi in relay.pieces(n, flat.dtype):
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

    def exchange(self, sends, recvs):
        raise ValueError("transport='host_staged' carries whole collectives, not peer-to-peer ring steps; use "
                         "strategy 'chunked' or 'sequential' with it")

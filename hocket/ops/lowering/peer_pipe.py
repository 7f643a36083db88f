"""Copy-engine pushes between the GPUs of a group, with one flag per landed chunk.

A :class:`PeerPipe` owns the resources of one operator shape class on one group: a
symmetric-memory buffer (a flag array plus the operator's regions, e.g. the gathered A or
the partial-result slots, see :class:`hocket.transport.symm_mem.SymmBuffer`), a copy
stream, a one-slot error buffer and the tile-fused kernel workspaces built for it. It is
created once (on the operator's first call, after the cross-rank agreement) and reused;
:func:`close_peer_pipes` frees them.

One call runs this protocol (``cur`` = the caller's stream, ``S`` = the copy stream):

1. :meth:`begin`: ``S`` waits for ``cur`` (inputs ready, the previous call's readers done),
   zeroes this rank's flags, then joins a device-side barrier of the group: after it, no
   rank still reads what it received last call, and every rank's flags are zero.
   ``cur`` waits for the zeroing (never for the barrier) before anything reads the flags.
2. :meth:`push`: on ``S``, optionally after an event of ``cur`` (a finished GEMM piece) or a
   local flag (a finished producer group), copy a tensor into a peer's region (a DMA copy
   over NVLink, no SMs) and raise the peer's flag (one program, system-scope release).
3. :meth:`wait_flags` on ``cur``: one program spins (bounded) until peers' flags rose, or
   a consumer GEMM waits on them tile by tile.
4. :meth:`end`: ``cur`` waits for ``S``, so every push is done before the call returns
   (the caller may then overwrite its inputs); flag timeouts are checked asynchronously.

Every kernel the protocol launches is compiled and loaded when the pipe is built
(docs/transports.md), and every spin is bounded (``HOCKET_TIMEOUT_S``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from hocket import env
from hocket.kernels.errors import FlagTimeoutError, raise_on_timeout, spins_for_timeout
from hocket.strategies.pieces import PEER_MAX_PIECES
from hocket.transport.group import GroupHandle
from hocket.transport.stream_switch import on_stream
from hocket.transport.symm_mem import SymmBuffer

FLAGS_PER_SOURCE = PEER_MAX_PIECES
"""chunks (or groups) one rank may push to another in one call; plans ask for at most this."""


class FlagWatch:
    """Timeout codes of asynchronous calls, read without stalling the GPU: each call copies its
    error buffers into small pinned mirrors behind an event; the next call (or :meth:`check`)
    reads the mirrors whose event has passed. Mirrors and events are recycled once read (a
    pinned allocation and an event per call cost more host time than the rest of a call's
    bookkeeping)."""

    def __init__(self) -> None:
        self._pending: list[tuple[list[tuple[torch.Tensor, Callable]], torch.cuda.Event]] = []
        self._free_mirrors: dict[tuple, list[torch.Tensor]] = {}
        self._free_events: list[torch.cuda.Event] = []

    def _mirror(self, errors: torch.Tensor) -> torch.Tensor:
        free = self._free_mirrors.get((tuple(errors.shape), errors.dtype))
        return free.pop() if free else torch.empty(errors.shape, dtype=errors.dtype, pin_memory=True)

    def watch(self, checks: Sequence[tuple[torch.Tensor, Callable[[torch.Tensor], None]]]) -> None:
        """``checks``: (device error buffer, function raising on its host copy)."""
        mirrors = []
        for errors, raise_fn in checks:
            mirror = self._mirror(errors)
            mirror.copy_(errors, non_blocking=True)
            mirrors.append((mirror, raise_fn))
        event = self._free_events.pop() if self._free_events else torch.cuda.Event()
        event.record()
        self._pending.append((mirrors, event))

    def poll(self, *, block: bool) -> None:
        pending, self._pending = self._pending, []
        for i, (mirrors, event) in enumerate(pending):
            if block:
                event.synchronize()
            elif not event.query():
                self._pending.extend(pending[i:])
                return
            self._free_events.append(event)
            for mirror, raise_fn in mirrors:
                try:
                    raise_fn(mirror)
                finally:
                    self._free_mirrors.setdefault((tuple(mirror.shape), mirror.dtype), []).append(mirror)


class PeerPipe:
    """Symmetric buffers, copy stream and flags of one operator shape class (module docstring)."""

    def __init__(self, *, group: GroupHandle, device: torch.device, regions, flags_per_source: int = FLAGS_PER_SOURCE,
                 flag_method: str = "auto", label: str = "") -> None:
        self.group = group
        self.rank, self.world = group.rank, group.world
        self.device = torch.device(device)
        self.label = label
        self.flag_method = flag_method
        self.flags_per_source = flags_per_source
        self.buf = SymmBuffer(group=group, device=self.device,
                              regions=[("flags", (self.world * flags_per_source,), torch.int32), *regions])
        self.stream = torch.cuda.Stream(self.device)
        self.errors = torch.zeros(1, dtype=torch.int32, device=self.device)
        self.max_spins = spins_for_timeout(env.wait_timeout_s())
        self.workspaces: dict[tuple, object] = {}
        """tile-fused kernel workspaces of this shape class, built by the executors."""
        self.watch = FlagWatch()
        self._ready, self._reset, self._done = (torch.cuda.Event() for _ in range(3))
        """reused every call (a wait refers to the record made before it, so re-recording is safe)."""
        self.per_source = 1
        """pieces each rank pushes to each peer in the current call (flag ``src * per_source + piece``)."""
        self._closed = False
        self._warm_up()

    # -- views ---------------------------------------------------------------------------
    def flags(self, rank: int | None = None) -> torch.Tensor:
        return self.buf.peer(self.rank if rank is None else rank, "flags")

    def local(self, name: str) -> torch.Tensor:
        return self.buf.local(name)

    def peer(self, rank: int, name: str) -> torch.Tensor:
        return self.buf.peer(rank, name)

    def flag_index(self, src: int, piece: int) -> int:
        if not 0 <= piece < self.per_source:
            raise ValueError(f"internal: piece {piece} is outside the {self.per_source} pieces of this call")
        return src * self.per_source + piece

    def source_flags(self) -> torch.Tensor:
        """This rank's flags of the current call: ``[world * per_source]``, chunk ``src * per_source + piece``."""
        return self.flags()[:self.world * self.per_source]

    # -- protocol ------------------------------------------------------------------------
    def begin(self, per_source: int) -> None:
        """Step 1 of the protocol (module docstring); each rank will push ``per_source`` pieces
        to each peer (the same on every rank: it comes from the agreed plan)."""
        if not 1 <= per_source <= self.flags_per_source:
            raise ValueError(f"{per_source} pieces per peer: use between 1 and {self.flags_per_source} chunks")
        self.per_source = per_source
        if self._closed:
            raise RuntimeError(f"peer pipe {self.label!r} was closed; close_peer_pipes() frees it, the next call "
                               f"builds a new one")
        self.watch.poll(block=False)
        cur = torch.cuda.current_stream(self.device)
        self._ready.record(cur)
        self.stream.wait_event(self._ready)
        with on_stream(self.stream):
            self.flags().zero_()
            self._reset.record(self.stream)
            self.buf.barrier(channel=0)
        cur.wait_event(self._reset)
        self.errors.zero_()

    def push(self, src: torch.Tensor, dst: torch.Tensor, *, peer: int, piece: int,
             after: torch.cuda.Event | None = None, after_flag: tuple | None = None) -> None:
        """Step 2: copy ``src`` into ``dst`` (a view of ``peer``'s region) on the copy stream and
        raise ``peer``'s flag for (this rank, ``piece``). ``after``: an event of the caller's
        stream to wait for first; ``after_flag``: ``(flags, index, errors, max_spins)`` of a local
        producer group to wait for first (a bounded one-program spin)."""
        from hocket.kernels.flags import set_flag_on_stream, wait_flag_on_stream

        if tuple(src.shape) != tuple(dst.shape):
            raise ValueError(f"push of {tuple(src.shape)} into {tuple(dst.shape)}: shapes must match")
        index = self.flag_index(self.rank, piece)
        with on_stream(self.stream):
            if after is not None:
                self.stream.wait_event(after)
            if after_flag is not None:
                flags, group, errors, max_spins = after_flag
                wait_flag_on_stream(flags, group, errors, max_spins=max_spins)
            dst.copy_(src, non_blocking=True)
            set_flag_on_stream(self.flags(peer), index, method=self.flag_method)

    def wait_flags(self, src: int, pieces: int, *, first: int = 0) -> None:
        """Step 3: the caller's stream waits until ``src`` pushed pieces ``first .. first+pieces-1``."""
        from hocket.kernels.peer_flags import wait_flag_range_on_stream

        wait_flag_range_on_stream(self.flags(), self.flag_index(src, first), pieces, self.errors,
                                  max_spins=self.max_spins)

    def end(self, extra_checks: Sequence[tuple[torch.Tensor, Callable]] = ()) -> None:
        """Step 4: the caller's stream waits for every push; timeouts are checked later."""
        self._done.record(self.stream)
        torch.cuda.current_stream(self.device).wait_event(self._done)
        per = self.per_source
        self.watch.watch([(self.errors, lambda mirror: self._raise_peer_timeout(mirror, per)), *extra_checks])

    def check(self) -> None:
        """Wait for every call so far and raise if one of its flag waits timed out."""
        self.watch.poll(block=True)

    def _raise_peer_timeout(self, mirror: torch.Tensor, per_source: int) -> None:
        code = int(mirror[0])
        if code:
            src, piece = divmod(code - 1, per_source)
            raise FlagTimeoutError(
                f"{self.label}: piece {piece} from rank {src} never arrived on rank {self.rank}: its flag did not "
                f"rise within {self.max_spins} polls, so this call's output is invalid. A rank stopped, called a "
                f"different operator, or is slower than HOCKET_TIMEOUT_S.")

    def kernel_check(self, errors: torch.Tensor, max_spins: int, what: str) -> tuple[torch.Tensor, Callable]:
        """An ``extra_checks`` entry for a tile-fused kernel workspace's error buffer."""
        return errors, lambda mirror: raise_on_timeout(mirror, max_spins=max_spins, context=f"{self.label} ({what})")

    # -- lifetime ------------------------------------------------------------------------
    def _warm_up(self) -> None:
        """Compile and load the flag kernels, and run one barrier, before anything spins."""
        from hocket.kernels.flags import set_flag_on_stream
        from hocket.kernels.peer_flags import wait_flag_range_on_stream

        scratch = torch.zeros(self.world * self.flags_per_source, dtype=torch.int32, device=self.device)
        set_flag_on_stream(scratch, 0, method=self.flag_method)
        wait_flag_range_on_stream(scratch, 0, 1, self.errors, max_spins=self.max_spins)
        self.buf.barrier(channel=0)
        torch.cuda.synchronize(self.device)
        if int(self.errors.item()) != 0:
            raise RuntimeError(f"{self.label}: flag warm-up failed (error code {int(self.errors.item())})")

    def close(self) -> None:
        if self._closed:
            return
        self.check()
        self.workspaces.clear()
        self.buf.close()
        self._closed = True


class PipeRegistry:
    """The live pipes, one per (group, device, shape class), built by ``factory(group=, device=,
    label=, **build)`` on first use (``build``: the pipe's own arguments, e.g. its regions)."""

    def __init__(self, factory) -> None:
        self._factory = factory
        self._pipes: dict[tuple, object] = {}

    def get(self, group: GroupHandle, device: torch.device, key: tuple, *, label: str, **build):
        full = (group.name, str(device), *key)
        pipe = self._pipes.get(full)
        if pipe is None:
            pipe = self._pipes[full] = self._factory(group=group, device=device, label=label, **build)
        return pipe

    def close(self, group_name: str | None = None) -> int:
        keys = [k for k in self._pipes if group_name is None or k[0] == group_name]
        for key in keys:
            self._pipes.pop(key).close()
        return len(keys)


PIPES = PipeRegistry(PeerPipe)
REGISTRIES: list[PipeRegistry] = [PIPES]
"""every pipe registry :func:`close_peer_pipes` closes (``peer_pull`` adds its pull pipes' when imported)."""


def close_peer_pipes(group_name: str | None = None) -> int:
    """Wait for and free the symmetric buffers of every pipe (or those of one group); call it
    on every rank before destroying the group. Returns how many were closed (push and pull pipes)."""
    return sum(registry.close(group_name) for registry in REGISTRIES)

"""Buffer and piece sizes of the transports and of hocket's own CUDA graphs.

They are the defaults of :class:`TransportSizes`, which the owning contexts take as an argument (the
host-staged relay and the copy-engine mailbox; the eager-graph cache has its own limit,
:func:`hocket.ops.eager_graph.set_max_graphs`) and which the cost model prices with. The operators'
transports use :func:`sizes_in_force` (:func:`set_sizes` changes it for the process). Plain Python: the
cost model reads it without importing torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

MIB = 2**20

HOST_STAGE_PIECE_BYTES = 8 * MIB
"""the most bytes one host-staged message moves (a collective is cut into messages of at most this size,
the first two smaller: a ramp), so the device-to-host copy of one message overlaps the host-to-device
copy of the one before"""
HOST_STAGE_SLOTS = 4
"""message slots per rank in the host-staged relay's shared buffer (each holds mailbox / slots bytes)"""
SYMM_MAILBOX_BYTES = 256 * MIB
"""the symmetric-memory staging area a copy-engine or host-staged transport reserves once per (group, device)"""
EAGER_GRAPHS_MAX = 32
"""how many calls' CUDA graphs a process keeps under ``HOCKET_EAGER_GRAPHS`` (each holds its own pool;
:func:`hocket.ops.eager_graph.set_max_graphs` changes it)"""


@dataclass(frozen=True, kw_only=True)
class TransportSizes:
    """The sizes one transport context runs with (defaults above). Every rank of a group must use the same
    sizes: they are part of the agreement descriptor."""

    piece_bytes: int = HOST_STAGE_PIECE_BYTES
    """bytes: the most one host-staged message moves (:data:`HOST_STAGE_PIECE_BYTES`)"""
    slots: int = HOST_STAGE_SLOTS
    """message slots per rank in the host-staged relay's shared buffer, 1 to 64 (:data:`HOST_STAGE_SLOTS`);
    a rank's copy into a slot waits until every peer read the slot's previous message, so more slots let a
    rank run further ahead of a late peer"""
    mailbox_bytes: int = SYMM_MAILBOX_BYTES
    """bytes: the copy-engine mailbox, and the host-staged relay's shared buffer per rank (each slot holds
    ``mailbox_bytes // slots``; :data:`SYMM_MAILBOX_BYTES`)"""

    def __post_init__(self) -> None:
        for name in ("piece_bytes", "slots", "mailbox_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TransportSizes.{name}={value!r} must be a positive int")
        if self.slots > 64:
            raise ValueError(f"TransportSizes.slots={self.slots} must be at most 64 (default {HOST_STAGE_SLOTS})")

    @property
    def slot_bytes(self) -> int:
        """bytes of one host-staged relay slot"""
        return self.mailbox_bytes // self.slots

    def to_dict(self) -> dict:
        return {"piece_bytes": self.piece_bytes, "slots": self.slots, "mailbox_bytes": self.mailbox_bytes}


DEFAULT_SIZES = TransportSizes()


_IN_FORCE = {"sizes": DEFAULT_SIZES}
"""the sizes the transports built from now on use (:func:`set_sizes`)."""


def sizes_in_force() -> TransportSizes:
    """The :class:`TransportSizes` this process's host-staged and copy-engine transports use (default
    :data:`DEFAULT_SIZES`); part of every rank's agreement descriptor, so ranks that differ raise."""
    return _IN_FORCE["sizes"]


def set_sizes(sizes: TransportSizes | None) -> TransportSizes:
    """Make ``sizes`` (None: :data:`DEFAULT_SIZES`) the sizes of the transports of operator calls from
    now on; returns the sizes it replaces. Set the same on every rank (the agreement raises otherwise).
    A relay or mailbox of other sizes keeps its buffers until ``close_relays``/``close_mailboxes``."""
    if sizes is None:
        sizes = DEFAULT_SIZES
    if not isinstance(sizes, TransportSizes):
        raise TypeError(f"sizes={sizes!r} must be a hocket.core.sizes.TransportSizes, e.g. "
                        f"TransportSizes(piece_bytes=4 * MIB), or None for the defaults")
    previous = _IN_FORCE["sizes"]
    _IN_FORCE["sizes"] = sizes
    return previous


@contextmanager
def using_sizes(sizes: TransportSizes | None) -> Iterator[TransportSizes]:
    """:func:`set_sizes` for the block, then the sizes before it again (also on an exception)."""
    previous = set_sizes(sizes)
    try:
        yield sizes_in_force()
    finally:
        set_sizes(previous)

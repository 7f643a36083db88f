"""Buffer and piece sizes of the transports and of hocket's own CUDA graphs.

They were environment settings; they are now the defaults of :class:`TransportSizes`, which the owning
contexts take as an argument (the host-staged relay, the copy-engine mailbox, the eager-graph cache) and
which the cost model prices with. Plain Python: the cost model reads it without importing torch.
"""

from __future__ import annotations

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
"""how many calls' CUDA graphs a process keeps under ``HOCKET_EAGER_GRAPHS`` (each holds its own pool)"""


@dataclass(frozen=True, kw_only=True)
class TransportSizes:
    """The sizes one transport context runs with (defaults above). Every rank of a group must use the same
    sizes: they are part of the agreement descriptor."""

    piece_bytes: int = HOST_STAGE_PIECE_BYTES
    slots: int = HOST_STAGE_SLOTS
    mailbox_bytes: int = SYMM_MAILBOX_BYTES

    def __post_init__(self) -> None:
        for name in ("piece_bytes", "slots", "mailbox_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TransportSizes.{name}={value!r} must be a positive int")
        if self.slots > 64:
            raise ValueError(f"TransportSizes.slots={self.slots} must be at most 64 (default {HOST_STAGE_SLOTS})")

    def to_dict(self) -> dict:
        return {"piece_bytes": self.piece_bytes, "slots": self.slots, "mailbox_bytes": self.mailbox_bytes}


DEFAULT_SIZES = TransportSizes()

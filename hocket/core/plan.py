"""Plan: a frozen, JSON-serialisable description of how to run a Site (DESIGN.md section 2)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace

PLAN_VERSION = 1

STRATEGIES = ("sequential", "bulk", "chunked", "ring", "bidir_ring", "tile_fused", "substituted", "overlap", "deep_halo",
              "token_blocks", "per_source", "expert_groups", "shared_overlap")
"""The strategy names a Plan accepts, in tie-break order; :mod:`hocket.strategies` holds one spec per
name (its registry refuses a spec whose name is not here, and a test fails on a name without a spec).
``overlap`` and ``deep_halo`` run halo-exchange stencil sites only (kind ``halo``, :mod:`hocket.strategies.halo`);
``token_blocks``, ``per_source``, ``expert_groups`` and ``shared_overlap`` run expert-parallel MoE sites only
(kinds ``a2a_mm``/``mm_a2a``, :mod:`hocket.strategies.moe`)."""
TRANSPORTS = ("collective", "p2p", "copy_engine", "host_staged", "peer_read", "triggered")
"""``triggered`` is HYPOTHETICAL (``hocket.hardware.spec.HYPOTHETICAL_TRANSPORTS``): priced for what-ifs by
``hocket.cost.triggered``, offered by no island or network (``ClusterSpec.group_transports`` never has it),
refused by every operator (``hocket.ops.planning.check_supported``)."""
CAPTURABLE_TRANSPORTS = ("collective", "p2p", "host_staged")
"""transports whose calls a CUDA graph can always capture (``hocket.ops.CapturedCall``): NCCL's (PyTorch
captures them) and the host-staged relay with device signals. ``copy_engine`` captures with its barrier
protocols only and ``peer_read`` not at all (:mod:`hocket.plan.capture` says which plan and why)."""
"""``peer_read``: the GEMM's own tiles load peer rows from symmetric memory over the GPU link (no
copy); only with ``strategy="tile_fused"`` on ``ag_mm`` (``hocket.ops.lowering.peer_read``)."""
ORDERS = ("natural", "local_first", "reverse")
SUBSTITUTES = (None, "rs_ag", "ring_p2p")
"""``rs_ag``: all-reduce -> reduce-scatter + all-gather; ``ring_p2p``: all-gather -> P2P ring."""
HIERARCHIES = (None, "intra_first")
PROTOCOLS = (None, "pull", "put", "push")
"""``Plan.protocol``: the copy-engine peer protocol of ``chunked`` over ``copy_engine``
(:mod:`hocket.core.peer_protocol`); None runs the protocol that module's ``AUTO_ORDER`` picks."""
PACKINGS = (None, "per_face")
"""``Plan.packing``: how a halo site's messages are formed: None packs every field's region for one neighbour
into one message; ``per_face`` sends each field's region as its own message, straight from and into the padded
block where the region is contiguous (no pack copy), through a buffer where it is not."""
SPLITS = (None, "exchanged", "padded")
"""``Plan.splits``: how an MoE call learns its all-to-all split sizes: ``exchanged`` (one exchange of the
counts per call, a host sync) or ``padded`` (a dropless padded layout of ``world x tokens x min(k, E_local)``
rows per rank, no host sync, capturable); None for every other site (an MoE call reads it as ``exchanged``),
except an uneven ``ag_mm`` / ``mm_rs`` (``Site.shard_rows``), where ``padded`` runs its collectives padded to the
largest shard and None runs them exact (:mod:`hocket.transport.uneven`)."""

MAX_CHUNKS = 4096


@dataclass(frozen=True, kw_only=True)
class Plan:
    """How one Site runs. Fields grow as needed and are never removed.

    ``chunks`` means pipeline pieces for ``chunked``/``substituted``, steps per peer for
    the rings, chunk-flag groups for ``tile_fused``, and the halo depth ``s`` (steps per exchange) for
    ``deep_halo``. ``strategy`` is a name of
    ``STRATEGIES``, each described by its spec in :mod:`hocket.strategies`.
    """

    strategy: str = "sequential"
    chunks: int = 1
    order: str = "natural"
    transport: str = "collective"
    comm_sms: int | None = None
    substitute: str | None = None
    hierarchy: str | None = None
    split_sizes: tuple[int, ...] | None = None
    protocol: str | None = None
    """``pull``, ``put`` or ``push`` for ``chunked`` over ``copy_engine`` (:mod:`hocket.core.peer_protocol`);
    None (every other plan, and the automatic choice there). Left out of the JSON when None."""
    packing: str | None = None
    """None or ``per_face`` for the halo strategies (:data:`PACKINGS`). Left out of the JSON when None."""
    splits: str | None = None
    """``exchanged`` or ``padded`` for the MoE sites (:data:`SPLITS`); None elsewhere. Left out of the JSON
    when None."""
    version: int = field(default=PLAN_VERSION)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"Plan.strategy={self.strategy!r} is unknown; use one of {STRATEGIES}")
        if not isinstance(self.chunks, int) or isinstance(self.chunks, bool) or self.chunks < 1:
            raise ValueError(f"Plan.chunks={self.chunks!r} must be an int >= 1 (1 = no pipelining)")
        if self.chunks > MAX_CHUNKS:
            raise ValueError(f"Plan.chunks={self.chunks} is above the limit {MAX_CHUNKS}; use fewer pieces")
        if self.order not in ORDERS:
            raise ValueError(f"Plan.order={self.order!r} is unknown; use one of {ORDERS}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"Plan.transport={self.transport!r} is unknown; use one of {TRANSPORTS}")
        if self.comm_sms is not None and (not isinstance(self.comm_sms, int) or self.comm_sms < 1):
            raise ValueError(f"Plan.comm_sms={self.comm_sms!r} must be None or an int >= 1")
        if self.substitute not in SUBSTITUTES:
            raise ValueError(f"Plan.substitute={self.substitute!r} is unknown; use one of {SUBSTITUTES}")
        if self.hierarchy not in HIERARCHIES:
            raise ValueError(f"Plan.hierarchy={self.hierarchy!r} is unknown; use one of {HIERARCHIES}")
        if self.split_sizes is not None:
            sizes = tuple(int(s) for s in self.split_sizes)
            if not sizes or any(s < 0 for s in sizes):
                raise ValueError(f"Plan.split_sizes={self.split_sizes!r} must be non-empty and >= 0")
            object.__setattr__(self, "split_sizes", sizes)
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"Plan.protocol={self.protocol!r} is unknown; use one of {PROTOCOLS}")
        if self.protocol is not None and (self.strategy != "chunked" or self.transport != "copy_engine"):
            raise ValueError(f"Plan.protocol={self.protocol!r} applies to strategy='chunked' over "
                             f"transport='copy_engine' only (got {self.strategy!r} over {self.transport!r}); "
                             f"leave it None")
        if self.packing not in PACKINGS:
            raise ValueError(f"Plan.packing={self.packing!r} is unknown; use one of {PACKINGS}")
        if self.splits not in SPLITS:
            raise ValueError(f"Plan.splits={self.splits!r} is unknown; use one of {SPLITS}")
        if self.version > PLAN_VERSION:
            raise ValueError(
                f"Plan.version={self.version} is newer than this hocket understands ({PLAN_VERSION}); upgrade hocket"
            )

    # -- serialisation ------------------------------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        if self.protocol is None:  # plans without a protocol keep the JSON (and hash) they always had
            del d["protocol"]
        if self.packing is None:  # likewise for the halo message packing
            del d["packing"]
        if self.splits is None:  # likewise for the MoE split mode
            del d["splits"]
        if self.split_sizes is not None:
            d["split_sizes"] = list(self.split_sizes)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict) -> Plan:
        if not isinstance(data, dict):
            raise TypeError(f"a Plan dict was expected, got {type(data).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"Plan fields {sorted(unknown)} are unknown; known fields: {sorted(known)}")
        data = dict(data)
        if data.get("split_sizes") is not None:
            data["split_sizes"] = tuple(data["split_sizes"])
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"plan JSON could not be parsed ({exc}); expected e.g. {Plan().to_json()}") from None
        if not isinstance(data, dict):
            raise ValueError(_not_an_object(text, data))
        return cls.from_dict(data)

    @property
    def hash(self) -> str:
        return hashlib.sha1(self.to_json().encode()).hexdigest()[:16]

    def with_(self, **changes) -> Plan:
        return replace(self, **changes)

    def describe(self) -> str:
        """Short human label, e.g. ``chunked(4)`` or ``ring(1)/p2p``."""
        label = self.strategy if self.strategy in ("sequential", "bulk", "overlap", "shared_overlap") else f"{self.strategy}({self.chunks})"
        if self.transport != "collective":
            label += f"/{self.transport}"
        if self.protocol is not None:
            label += f":{self.protocol}"
        if self.packing is not None:
            label += f":{self.packing}"
        if self.splits == "padded":
            label += ":padded"
        if self.substitute:
            label += f"+{self.substitute}"
        if self.order != "natural":
            label += f"[{self.order}]"
        return label


SEQUENTIAL = Plan()


def _not_an_object(text: str, data: object) -> str:
    shown = text if len(text) <= 80 else text[:77] + "..."
    return (f"plan={shown!r} is JSON of a {type(data).__name__}, not an object; give a plan as a JSON object like "
            f'{{"strategy": "chunked", "chunks": 4}}, a strategy name like \'chunked\' (one of {STRATEGIES}), '
            f"a dict or a hocket.Plan")


def as_plan(plan: Plan | dict | str | None) -> Plan | None:
    """Accept a Plan, a dict, a JSON string, a strategy name, or None."""
    if plan is None or isinstance(plan, Plan):
        return plan
    if isinstance(plan, dict):
        return Plan.from_dict(plan)
    if isinstance(plan, str):
        text = plan.strip()
        if text.startswith("{"):
            return Plan.from_json(text)
        if text not in STRATEGIES:
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                data = text  # not JSON: a strategy name, checked (and refused with the names) by Plan
            if not isinstance(data, str):
                raise ValueError(_not_an_object(text, data))
        return Plan(strategy=text)
    raise TypeError(f"plan={plan!r} must be a hocket.Plan, a dict, a JSON string, a strategy name or None")

"""Communication time: alpha-beta per algorithm, on the group's topology, per backend.

Every transfer is priced as ``calls * call_overhead + steps * step_latency +
bytes_on_the_bottleneck / (bandwidth * efficiency)``, where the algorithm decides the
steps and the bytes, and the topology decides the bandwidth:

* **one island** (devices on one intra-node fabric): ``switch`` (NVSwitch) gives every
  rank its full per-device link; ``mesh`` (xGMI) gives one link per pair, so direct
  algorithms use ``ranks - 1`` links at once; ``pcie`` and ``shm`` behave like a switch
  with the (slower) per-device link.
* **across nodes**: NCCL-style rings run one ring per NIC, so a flat ring's bandwidth is
  ``min(intra * r / (r - 1), nic * min(nics, r))`` for ``r`` group ranks per node; the
  ``intra_first`` hierarchy is priced as :mod:`hocket.transport.hierarchical` runs it
  (:func:`hierarchical_phases`): an all-gather is an inter-node all-gather of ``1/r`` of the output then
  an intra-node all-gather of all of it (2 calls), a reduce-scatter an intra-node reduce-scatter of the
  input then an inter-node one of ``1/r`` of it (2 calls), an all-reduce an intra-node reduce-scatter, an
  inter-node all-reduce of ``1/r`` and an intra-node all-gather (3 calls); the all-gather and the
  reduce-scatter add one local reorder copy of the buffer. Each phase is priced as its backend runs a
  collective of that size on the sub-group (NCCL's ring, or gloo's copies: :func:`gloo_memory_traffic`).
  All-reduce may use a tree across nodes (latency ``log2`` of the node count); the backend picks the
  faster, as NCCL does.

Backends (``backend_of``): ``nccl`` (GPUs; SM-driven collectives and P2P; RCCL/HCCL
priced alike) and ``gloo`` (CPU ranks), priced as ProcessGroupGloo runs them
(:func:`gloo_memory_traffic`): its all-gather gathers into a fresh flat buffer and copies it
out, its reduce-scatter clones the input, all-reduces it (twice the bytes) and copies a chunk
out, buffers above glibc's mmap threshold fault their pages in on every call; its P2P sends
and receives are separate, uncoalesced calls at wire speed. Transports: ``collective`` and ``p2p`` run on the ``link`` resource
(SM-driven on GPUs), ``copy_engine`` pushes through symmetric memory on the
``copy_engine`` resource, ``host_staged`` copies device -> pinned host -> device over each
device's host link (PCIe) on the ``host`` resource, across nodes through the network.

A calibration profile scales the result by measured/model ratios of the same transfer
(see ``calibration.py``); the default efficiencies below are datasheet fractions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hocket.core.sizes import HOST_STAGE_PIECE_BYTES
from hocket.cost.calibration import CalibrationView

COLLECTIVE_OPS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast")

LINK_EFFICIENCY = {"sm_collective": 0.75, "sm_p2p": 0.75, "copy_engine": 0.85, "host_link": 0.85, "cpu_collective": 0.5}
"""Achievable fraction of the datasheet link rate per transfer kind (NCCL ring on NVLink
reaches ~0.75-0.8 of the per-direction rate at large sizes; copy engines ~0.85; gloo over
local sockets about half of a shared-memory copy)."""
CALL_OVERHEAD_US = {"sm_collective": 10.0, "sm_p2p": 10.0, "copy_engine": 5.0, "host_link": 15.0, "cpu_collective": 40.0}
"""Per call: kernel/collective launch and the first handshake (gloo: socket round trip)."""
STEP_OVERHEAD_US = {"sm_collective": 1.0, "sm_p2p": 1.0, "copy_engine": 1.0, "host_link": 2.0, "cpu_collective": 5.0}
"""Per algorithm step on top of the link latency (flag/handshake between neighbours)."""
COPY_ISSUE_US = 1.5
"""Issuing one more peer copy of a one-shot copy-engine collective (the copies then run concurrently)."""
COPY_GAP_US = 1.0
"""Gap between two DMA copies queued back to back on one engine (descriptor fetch)."""

TRANSFER_RESOURCE = {"sm_collective": "link", "sm_p2p": "link", "copy_engine": "copy_engine", "host_link": "host",
                     "cpu_collective": "link"}


@dataclass(frozen=True, kw_only=True)
class Transfer:
    """One priced transfer: its solo time and what it runs on."""

    ms: float
    kind: str
    """contention class: sm_collective | sm_p2p | copy_engine | host_link | cpu_collective."""
    resource: str
    """link | copy_engine | host (the in-order queue it occupies)."""
    algorithm: str
    egress_bytes: float
    """bytes each rank sends (drives memory and power contention)."""
    queued_saving_ms: float = 0.0
    """Extra time (beyond ``queued_saving_ms(kind, topo)``) this transfer does not pay when it
    is queued right behind another on its resource: a host-staged relay call's first message
    overlaps the previous call's drain."""
    messages: int = 1
    """Host-staged relay messages (each costs host issue time, ``hocket.cost.issue``)."""


@dataclass(frozen=True, kw_only=True)
class GroupTopology:
    """The facts about a group that pricing needs (computed once per prediction)."""

    ranks: tuple[int, ...]
    backend: str
    nodes: int
    ranks_per_node: int
    fabric: str | None
    """the group's intra-node fabric when all its ranks share one island, else None."""
    intra_gbps: float | None
    """per-device intra-node link rate (None when every rank is on its own node)."""
    intra_latency_us: float
    nic_gbps: float | None
    nics_per_node: int
    nic_latency_us: float
    ring_gbps: float
    ring_latency_us: float
    host_gbps: float | None
    host_latency_us: float
    memory_gbps: float | None = None
    """the slowest device memory of the group (GB/s), for the local copies of a hierarchy; None = unknown
    (CPU ranks: their copies are priced at half the link rate, as gloo's own)."""

    @property
    def world(self) -> int:
        return len(self.ranks)


def backend_of(cluster, ranks) -> str:
    """``gloo`` when any rank is a CPU, else ``nccl``."""
    return "gloo" if any(cluster.device(r).is_cpu for r in _representatives(cluster, ranks)) else "nccl"


def _representatives(cluster, ranks):
    """A few ranks that stand for the group's device kinds (first and last of each node run)."""
    ranks = tuple(ranks)
    if len(ranks) <= 64:
        return ranks
    seen, last_node = [], None
    for r in ranks:
        node = cluster.node_of(r)
        if node != last_node:
            seen.append(r)
            last_node = node
    seen.append(ranks[-1])
    return tuple(dict.fromkeys(seen))


def group_topology(cluster, ranks) -> GroupTopology:
    ranks = tuple(ranks)
    if not ranks:
        raise ValueError("a communication group needs at least one rank")
    per_node: dict[int, list[int]] = {}
    for r in ranks:
        per_node.setdefault(cluster.node_of(r), []).append(r)
    nodes = len(per_node)
    rpn = max(len(v) for v in per_node.values())
    intra_gbps, intra_lat, fabric = None, 0.0, None
    members = next(iter(v for v in per_node.values() if len(v) == rpn))
    if rpn > 1:
        link = cluster.bottleneck_link(members)
        intra_gbps, intra_lat = link.gbps_per_direction, link.latency_us
        node = cluster.node(cluster.node_of(members[0]))
        locals_ = [cluster.local_rank(r) for r in members]
        islands = {node.island_of(x) for x in locals_}
        if len(islands) == 1:
            fabric = node.islands[islands.pop()].fabric
    nic_gbps, nics, nic_lat = None, 1, 0.0
    if nodes > 1:
        for node_index in per_node:
            node = cluster.node(node_index)
            if node.nic is not None and (nic_gbps is None or node.nic.gbps_per_direction < nic_gbps):
                nic_gbps, nic_lat, nics = node.nic.gbps_per_direction, node.nic.latency_us, max(1, node.nics)
    if nodes == 1:
        ring_gbps = intra_gbps if intra_gbps is not None else math.inf
        if fabric == "mesh":
            ring_gbps = intra_gbps * (rpn - 1)
        ring_lat = intra_lat
    else:
        off_node = nic_gbps * min(nics, rpn)
        on_node = intra_gbps * rpn / (rpn - 1) if intra_gbps else math.inf
        ring_gbps, ring_lat = min(off_node, on_node), max(nic_lat, intra_lat)
    host = cluster.host_link(ranks[0])
    rates = [cluster.device(r).memory_gbps for r in _representatives(cluster, ranks)]
    memory_gbps = min(rates) if rates and all(rate is not None for rate in rates) else None
    return GroupTopology(
        ranks=ranks, backend=backend_of(cluster, ranks), nodes=nodes, ranks_per_node=rpn, fabric=fabric,
        intra_gbps=intra_gbps, intra_latency_us=intra_lat, nic_gbps=nic_gbps, nics_per_node=nics,
        nic_latency_us=nic_lat, ring_gbps=ring_gbps, ring_latency_us=ring_lat,
        host_gbps=host.gbps_per_direction if host else None, host_latency_us=host.latency_us if host else 0.0,
        memory_gbps=memory_gbps)


def queued_saving_ms(kind: str, topo: GroupTopology) -> float:
    """Fixed cost a transfer does not pay when it is queued right behind another on the
    same resource: DMA copies (copy engine, host link) overlap their setup and latency
    with the previous copy's data phase, leaving a small gap; an SM-driven collective's
    launch is issued ahead, but its handshake steps remain; a gloo call blocks the thread
    that issues it, so it saves nothing."""
    if kind in ("copy_engine", "host_link"):
        latency = topo.host_latency_us if kind == "host_link" else topo.ring_latency_us
        return max(0.0, CALL_OVERHEAD_US[kind] + latency + STEP_OVERHEAD_US[kind] - COPY_GAP_US) / 1e3
    if kind in ("sm_collective", "sm_p2p"):
        return CALL_OVERHEAD_US[kind] / 1e3
    return 0.0


def transfer_kind(topo: GroupTopology, transport: str) -> str:
    if transport == "copy_engine":
        return "copy_engine"
    if transport == "host_staged":
        return "host_link"
    if topo.backend == "gloo":
        return "cpu_collective"
    return "sm_p2p" if transport == "p2p" else "sm_collective"


def _time_ms(kind: str, *, calls: int, steps: float, latency_us: float, nbytes: float, gbps: float) -> float:
    bandwidth = gbps * LINK_EFFICIENCY[kind] * 1e6  # bytes per ms
    overhead_us = calls * CALL_OVERHEAD_US[kind] + steps * (latency_us + STEP_OVERHEAD_US[kind])
    return overhead_us / 1e3 + (nbytes / bandwidth if nbytes > 0 else 0.0)


# -- collectives ------------------------------------------------------------------------------
def _ring_phase(op: str, nbytes: float, p: int, gbps: float, latency_us: float, kind: str) -> float:
    """Alpha-beta ring time of one op over ``p`` ranks, without the call overhead."""
    if p <= 1:
        return 0.0
    frac = (p - 1) / p
    if op in ("all_gather", "reduce_scatter", "broadcast"):
        steps, moved = p - 1, frac * nbytes
    elif op == "all_reduce":
        steps, moved = 2 * (p - 1), 2 * frac * nbytes
    else:  # all_to_all: every rank sends (p-1)/p of its buffer, pairwise
        steps, moved = p - 1, frac * nbytes
    return _time_ms(kind, calls=0, steps=steps, latency_us=latency_us, nbytes=moved, gbps=gbps)


def _nccl_collective(op: str, nbytes: float, topo: GroupTopology, kind: str, hierarchy: str | None) -> tuple[float, str]:
    p, q, r = topo.world, topo.nodes, topo.ranks_per_node
    call = CALL_OVERHEAD_US[kind] / 1e3
    if op == "all_to_all" and topo.fabric == "mesh":
        ring = _time_ms(kind, calls=0, steps=1, latency_us=topo.intra_latency_us,
                        nbytes=nbytes / p, gbps=topo.intra_gbps)  # one direct message per peer link, all at once
        return call + ring, "direct"
    if topo.fabric == "mesh" and op in ("all_gather", "reduce_scatter"):
        direct = _time_ms(kind, calls=0, steps=1, latency_us=topo.intra_latency_us, nbytes=nbytes / p,
                          gbps=topo.intra_gbps)
        return call + direct, "direct"
    best = (call + _ring_phase(op, nbytes, p, topo.ring_gbps, topo.ring_latency_us, kind), "ring")
    if hierarchical_applies(op, topo, hierarchy):
        ms = 0.0
        for phase_op, phase_bytes, where in hierarchical_phases(op, nbytes, r):
            if where == "copy":
                ms += _local_copy_ms(phase_bytes, topo, kind)
                continue
            ranks, gbps, latency = _phase_link(topo, where)
            ms += call + _ring_phase(phase_op, phase_bytes, ranks, gbps, latency, kind)
        return ms, "hierarchical"
    if op == "all_reduce" and q > 1:
        depth = math.ceil(math.log2(q)) + (r - 1)
        tree = call + _time_ms(kind, calls=0, steps=2 * depth, latency_us=topo.ring_latency_us,
                               nbytes=2 * nbytes, gbps=topo.ring_gbps)
        if tree < best[0]:
            best = (tree, "tree")
    return best


HIERARCHICAL_OPS = ("all_gather", "reduce_scatter", "all_reduce")
"""the collectives :mod:`hocket.transport.hierarchical` runs in phases; the others run flat under a hierarchy."""


def hierarchical_applies(op: str, topo: GroupTopology, hierarchy: str | None) -> bool:
    """Whether ``op`` on ``topo`` runs in phases under ``hierarchy``: ``intra_first``, a hierarchical op, a group
    spanning several nodes with several ranks on each (the transport refuses the other layouts)."""
    return hierarchy == "intra_first" and op in HIERARCHICAL_OPS and topo.nodes > 1 and topo.ranks_per_node > 1


def hierarchical_phases(op: str, nbytes: float, ranks_per_node: int) -> list[tuple[str, float, str]]:
    """``(op, bytes, where)`` of each step of ``op`` on ``nbytes`` (the whole buffer, as :func:`collective`
    takes it) under ``hierarchy="intra_first"``, in the order :mod:`hocket.transport.hierarchical` runs them;
    ``where`` is ``intra`` (a call on the intra-node sub-group), ``inter`` (on the inter-node sub-group) or
    ``copy`` (a local reorder of ``bytes``)."""
    r = ranks_per_node
    if op == "all_gather":
        return [("all_gather", nbytes / r, "inter"), ("all_gather", nbytes, "intra"), ("copy", nbytes, "copy")]
    if op == "reduce_scatter":
        return [("copy", nbytes, "copy"), ("reduce_scatter", nbytes, "intra"),
                ("reduce_scatter", nbytes / r, "inter")]
    if op == "all_reduce":
        return [("reduce_scatter", nbytes, "intra"), ("all_reduce", nbytes / r, "inter"),
                ("all_gather", nbytes, "intra")]
    raise ValueError(f"op={op!r} has no hierarchical form; those are {HIERARCHICAL_OPS}")


def _phase_link(topo: GroupTopology, where: str) -> tuple[int, float, float]:
    """(ranks, GB/s per rank, latency us) of a hierarchical phase: the intra-node link between the node's
    ranks, or each node's NICs shared by its ranks (all of them run their inter-node phase at once)."""
    r = topo.ranks_per_node
    if where == "intra":
        return r, topo.intra_gbps, topo.intra_latency_us
    return topo.nodes, topo.nic_gbps * min(topo.nics_per_node, r) / r, topo.nic_latency_us


def _local_copy_ms(nbytes: float, topo: GroupTopology, kind: str) -> float:
    """A local copy of ``nbytes`` (read and write): at the device memory's rate where known, else at half the
    intra-node link rate, the rule gloo's own copies are priced by (:func:`_gloo_collective`)."""
    if nbytes <= 0:
        return 0.0
    if topo.memory_gbps is not None:
        return 2 * nbytes / (topo.memory_gbps * 1e6)
    gbps = topo.intra_gbps or topo.ring_gbps
    return nbytes / (2 * gbps * LINK_EFFICIENCY[kind] * 1e6)


GLOO_MMAP_THRESHOLD_BYTES = 32 * 2**20
"""glibc malloc's largest dynamic mmap threshold on 64-bit hosts (``DEFAULT_MMAP_THRESHOLD_MAX``
= 4 * 1024 * 1024 * sizeof(long)): a CPU tensor above it is a fresh ``mmap`` on every
allocation, whose pages fault in (and are zeroed by the kernel) on first touch; below it
a freed block is reused from the heap, already mapped."""
PAGE_BYTES = 4096
FIRST_TOUCH_US_PER_PAGE = 2.0
"""Datasheet cost of one first-touch fault of a fresh anonymous 4 KiB page (trap, kernel
zeroing of the page, page-table update; about 1 us on bare metal, 1-3 us under a hypervisor's
two-level page tables)."""


def gloo_memory_traffic(op: str, nbytes: float, p: int) -> tuple[str, float, float]:
    """How ProcessGroupGloo runs ``op`` on CPU tensors (torch.distributed, c10d), as
    ``(wire op, bytes copied by the rank's CPU besides the wire, bytes freshly allocated)``:

    * ``all_gather`` (``all_gather_into_tensor`` -> ``allgather`` on the output's chunks):
      gloo's ring all-gather into a *new* flat output buffer (the rank's own shard is
      copied into it), then the flat buffer is copied into the caller's output chunks;
    * ``reduce_scatter`` (``reduce_scatter_tensor``): the input is *cloned*, gloo
      all-reduces the clone in place (twice an all-gather's bytes on the wire), and the
      rank's chunk is copied out;
    * ``all_reduce`` (in place), ``all_to_all``, ``broadcast``: the wire algorithm only.
    """
    if op == "all_gather":
        return "all_gather", nbytes / p + nbytes, nbytes
    if op == "reduce_scatter":
        return "all_reduce", nbytes + nbytes / p, nbytes
    return op, 0.0, 0.0


def _gloo_call(op: str, nbytes: float, p: int, gbps: float, latency_us: float, kind: str) -> float:
    """One gloo call of ``op`` over ``p`` ranks on links of ``gbps`` (see :func:`_gloo_collective`)."""
    call = CALL_OVERHEAD_US[kind] / 1e3
    wire_op, copied, fresh = gloo_memory_traffic(op, nbytes, p)
    wire = _ring_phase(wire_op, nbytes, p, gbps, latency_us, kind)
    copy_ms = copied / (2 * gbps * LINK_EFFICIENCY[kind] * 1e6) if copied > 0 else 0.0
    touch_ms = (math.ceil(fresh / PAGE_BYTES) * FIRST_TOUCH_US_PER_PAGE / 1e3
                if fresh > GLOO_MMAP_THRESHOLD_BYTES else 0.0)
    return call + wire + copy_ms + touch_ms


def _gloo_collective(op: str, nbytes: float, topo: GroupTopology, kind: str,
                     hierarchy: str | None = None) -> tuple[float, str]:
    """gloo on CPU ranks: the wire algorithm (a ring over loopback sockets) plus the local
    copies and fresh buffers of :func:`gloo_memory_traffic`. A local copy pass costs what half
    a wire byte does: a socket exchange is itself two CPU copies per byte and rank (into the
    kernel's socket buffer, out of the peer's), at the link's rate. A fresh buffer above
    ``GLOO_MMAP_THRESHOLD_BYTES`` pays a first-touch fault per page. Under ``hierarchy="intra_first"``
    each phase of :func:`hierarchical_phases` is one such call on its sub-group, plus the reorder copy."""
    if hierarchical_applies(op, topo, hierarchy):
        ms = 0.0
        for phase_op, phase_bytes, where in hierarchical_phases(op, nbytes, topo.ranks_per_node):
            if where == "copy":
                ms += _local_copy_ms(phase_bytes, topo, kind)
            else:
                ms += _gloo_call(phase_op, phase_bytes, *_phase_link(topo, where), kind)
        return ms, "hierarchical"
    ms = _gloo_call(op, nbytes, topo.world, topo.ring_gbps, topo.ring_latency_us, kind)
    algorithm = {"all_gather": "ring+copies", "reduce_scatter": "clone+allreduce+chunk"}.get(op, "ring")
    return ms, algorithm


RELAY_MESSAGE_FLOOR_US = 22.0
"""Device microseconds a host-staged message takes at least, however few its bytes: its device-to-host
copy's setup and completion, the sequence number it writes, the peer's stream wait on it and the
host-to-device copy behind that, one after another. Hidden behind the host's issue time when eager
(``relay_message``: 50-150 us per message), it is what a replayed relay call of many small messages pays:
2xH200, ag_mm 8192x4096x1536 replayed own-data-first in 64 pieces (one call, 64 messages of 0.5 MiB
per rank, ~10 us of data each way) 1.44 ms, 22-23 us per message; in 2-16 pieces (2-16 MiB messages) the
same call ran at its bytes' pace (benchmarks/results/validation/2026-12-01_measured-rules.md)."""

HOST_HANDSHAKE_US = 10.0
"""Latency of a relay message's cross-process handshake: the receiving copy stream waits on
the sender's IPC event once the sender has published "sent" in the shared buffer's header."""
DEVICES_PER_HOST_UPLINK = 2
"""GPUs whose host traffic shares one PCIe uplink to the CPU's root port: HGX/DGX H100 and
H200 boards put two GPUs (and their NICs) behind each PCIe Gen5 switch with one x16 uplink, so
when every rank of a node stages at once, two ranks' copies share one x16 link (its datasheet
rate). Each device alone is bounded by its own copy rate (``host_copy``, calibrated)."""
DEFAULT_HOST_STAGE_MESSAGE_BYTES = HOST_STAGE_PIECE_BYTES
"""the relay cuts a collective into messages this big (:data:`hocket.core.sizes.HOST_STAGE_PIECE_BYTES`)."""


def relay_messages(nbytes: float, message_bytes: float) -> list[tuple[float, int]]:
    """The relay's messages for ``nbytes`` as ``(size, count)`` runs (``ramped_rounds``: a
    quarter and a half of a message first, so the second stage starts sooner, then whole
    messages, then the rest)."""
    message_bytes = max(1.0, message_bytes)
    runs, left = [], max(0.0, nbytes)
    for size in (message_bytes / 4, message_bytes / 2):
        if left > 0:
            runs.append((min(left, size), 1))
            left -= runs[-1][0]
    full = math.floor(left / message_bytes)
    if full:
        runs.append((message_bytes, full))
        left -= full * message_bytes
    if left > 1e-9 * message_bytes:
        runs.append((left, 1))
    return runs or [(0.0, 1)]


def host_stage_directions(op: str, nbytes: float, p: int) -> tuple[float, float]:
    """(device->host, host->device) bytes one rank copies in the relay's ``op`` over ``p``
    ranks of one node (the relay in ``hocket.transport.host_relay``): all-gather sends its
    shard once and reads the ``p - 1`` others; reduce-scatter sends the ``p - 1`` blocks the
    others own and reads the ``p - 1`` partials of its own block (summed on the device);
    all-reduce sends its whole buffer and reads every peer's; all-to-all sends and reads
    ``(p - 1) / p`` of the buffer."""
    shard = nbytes / p
    if op == "all_gather":
        return shard, (p - 1) * shard
    if op == "reduce_scatter":
        return (p - 1) * shard, (p - 1) * shard
    if op == "all_reduce":
        return nbytes, (p - 1) * nbytes
    if op == "broadcast":
        return shard, shard
    return nbytes - shard, nbytes - shard


def _relay_pcie_ms(op: str, nbytes: float, topo: GroupTopology, calibration: CalibrationView | None,
                   message_bytes: float) -> tuple[float, float, int]:
    """(PCIe time, first message's device->host time, messages) of the relay's ``op`` from the
    device<->host link model: a two-stage flow shop (D2H of message i+1 beside H2D of message i),
    every message's share of each direction priced at that direction's rate for the whole call;
    ranks behind one PCIe uplink share it."""
    down, up = host_stage_directions(op, nbytes, topo.world)
    runs = relay_messages(max(down, up), message_bytes)
    sharing = max(1, min(topo.ranks_per_node, DEVICES_PER_HOST_UPLINK))

    def link_ms(nbytes_one_way: float) -> float:
        if nbytes_one_way <= 0:
            return 0.0
        own = host_copy(nbytes_one_way, topo, calibration=calibration).ms  # this device's copy rate
        uplink = host_copy(nbytes_one_way * sharing, topo).ms  # every sharer's bytes on one x16 link
        return max(own, uplink)

    bottleneck = max(down, up)
    down_ms_per_byte = link_ms(down) / down if down > 0 else 0.0
    up_ms_per_byte = link_ms(up) / up if up > 0 else 0.0
    d2h_done = h2d_done = 0.0
    for size, count in runs:  # a run of equal messages in closed form (no loop per message)
        share = size / bottleneck if bottleneck > 0 else 0.0
        d, u = share * down * down_ms_per_byte, share * up * up_ms_per_byte
        h2d_done = max(h2d_done + count * u, d2h_done + max(d + count * u, count * d + u))
        d2h_done += count * d
    fill_ms = (runs[0][0] / bottleneck) * down * down_ms_per_byte if bottleneck > 0 else 0.0
    return h2d_done, fill_ms, sum(count for _, count in runs)


def relay_ratio(op: str, nbytes: float, topo: GroupTopology, calibration: CalibrationView | None,
                message_bytes: float) -> float:
    """Measured/model ratio of the relay's PCIe time from the profile's ``host_relay`` curve (an
    all-gather through the relay with every rank staging both ways at once), read at the all-gather
    whose busier direction carries as many bytes as ``op``'s; 1.0 without the curve. It holds what the
    link model does not: whether the ranks really share an uplink, how fast both directions run
    together, the stream waits of each message."""
    if calibration is None or topo.world < 2 or not calibration.curve("host_relay"):
        return 1.0
    p = topo.world
    down, up = host_stage_directions(op, nbytes, p)
    gathered = max(down, up) * p / (p - 1)  # all-gather output bytes with the same busier direction
    handshake = HOST_HANDSHAKE_US / 1e3

    def model_ms(b: float) -> float:
        return _relay_pcie_ms("all_gather", b, topo, calibration, message_bytes)[0] + handshake

    return calibration.transfer_ms("host_relay", gathered, model_ms, context=(topo, message_bytes)) / \
        model_ms(gathered) if gathered > 0 else 1.0


def _host_staged(op: str, nbytes: float, topo: GroupTopology, calibration: CalibrationView | None,
                 message_bytes: float) -> tuple[float, str, float, int]:
    """device -> pinned host -> device through the relay, in messages that pipeline the two
    directions (one message's host->device copy runs beside the next one's device->host copy);
    ranks behind one PCIe uplink share it; across nodes the host buffers travel over the network.
    A profile's ``host_relay`` curve scales the PCIe part (:func:`relay_ratio`)."""
    q = topo.nodes
    if topo.host_gbps is None:
        raise ValueError("transport='host_staged' needs device<->host links (host_link in the cluster preset); "
                         "CPU ranks already share host memory: use transport='collective'")
    pcie, fill_ms, messages = _relay_pcie_ms(op, nbytes, topo, calibration, message_bytes)
    ratio = relay_ratio(op, nbytes, topo, calibration, message_bytes)
    handshake = HOST_HANDSHAKE_US / 1e3
    network = 0.0
    if q > 1:
        network = _ring_phase(op, nbytes / topo.ranks_per_node, q, topo.nic_gbps, topo.nic_latency_us,
                              "cpu_collective")
    # queued behind another call, its first message's device->host copy overlaps the previous
    # call's drain; the host's issue time per call and message is on the issue chain
    return ratio * (pcie + handshake) + network, "host_staged", ratio * fill_ms, messages


def collective(op: str, nbytes: float, topo: GroupTopology, *, transport: str = "collective",
               hierarchy: str | None = None, calibration: CalibrationView | None = None,
               message_bytes: float = DEFAULT_HOST_STAGE_MESSAGE_BYTES) -> Transfer:
    """One collective of ``op`` over the group; ``nbytes`` is the whole buffer (gathered
    output of an all-gather, input of a reduce-scatter, the buffer of an all-reduce).
    ``message_bytes``: the host-staged relay's message size (``hocket.core.sizes.TransportSizes.piece_bytes``)."""
    if op not in COLLECTIVE_OPS:
        raise ValueError(f"collective op={op!r} is unknown; use one of {COLLECTIVE_OPS}")
    if not (nbytes >= 0 and math.isfinite(nbytes)):
        raise ValueError(f"collective nbytes={nbytes!r} must be finite and >= 0")
    kind = transfer_kind(topo, transport)
    p = topo.world
    if p == 1:
        return Transfer(ms=0.0, kind=kind, resource=TRANSFER_RESOURCE[kind], algorithm="none", egress_bytes=0.0)
    pipelined, messages = 0.0, 1
    if transport == "host_staged":
        ms, algorithm, pipelined, messages = _host_staged(op, nbytes, topo, calibration, message_bytes)
        # the relay's curves (from idle, back to back, replayed) time each call after the previous one has
        # drained (hocket calibrate waits on every call, and a call's copies wait for the caller's stream), so a
        # call queued behind another inside a pipeline still saves its first message's fill (2xH200,
        # replayed chunked(4)/host_staged of ag_mm 8192x4096x1536 priced +25% to +28% without it)
    elif transport == "copy_engine":
        # one-shot push of each rank's part into every peer's symmetric buffer (a direct algorithm);
        # the device's egress link carries (p-1)/p of the buffer, reductions are read back and summed.
        moved = (p - 1) / p * nbytes * (2 if op == "all_reduce" else 1)
        gbps = topo.ring_gbps if topo.fabric != "mesh" else topo.intra_gbps * (p - 1)
        ms = _time_ms(kind, calls=1, steps=1 if op != "all_reduce" else 2, latency_us=topo.ring_latency_us,
                      nbytes=moved, gbps=gbps) + (p - 1) * COPY_ISSUE_US / 1e3
        algorithm = "direct"
    elif topo.backend == "gloo":
        ms, algorithm = _gloo_collective(op, nbytes, topo, kind, hierarchy)
    else:
        ms, algorithm = _nccl_collective(op, nbytes, topo, kind, hierarchy)
    if calibration is not None and nbytes > 0 and transport != "host_staged":  # host_staged: scaled per copy
        # the profile's curves time the flat collective on the group: its measured/model ratio scales the
        # hierarchical price too (the same links, the same backend)
        curve = op if transport == "collective" else "copy_engine"
        ms *= calibration.transfer_ratio(
            curve, nbytes, lambda b: collective(op, b, topo, transport=transport).ms,
            context=(topo, transport))
    egress = (p - 1) / p * nbytes * (2 if op == "all_reduce" else 1)
    return Transfer(ms=ms, kind=kind, resource=TRANSFER_RESOURCE[kind], algorithm=algorithm, egress_bytes=egress,
                    queued_saving_ms=pipelined, messages=messages)


def host_copy(nbytes: float, topo: GroupTopology, *, calibration: CalibrationView | None = None) -> Transfer:
    """One copy between a device and pinned host memory over its host link (one direction)."""
    if not (nbytes >= 0 and math.isfinite(nbytes)):
        raise ValueError(f"host_copy nbytes={nbytes!r} must be finite and >= 0")
    if topo.host_gbps is None:
        raise ValueError("a host copy needs a device<->host link (host_link in the cluster preset); "
                         "CPU ranks already compute in host memory")
    kind = "host_link"
    ms = _time_ms(kind, calls=1, steps=1, latency_us=topo.host_latency_us, nbytes=nbytes, gbps=topo.host_gbps)
    if calibration is not None and nbytes > 0:
        ms = calibration.transfer_ms("host_link", nbytes, lambda b: host_copy(b, topo).ms, context=(topo,))
    return Transfer(ms=ms, kind=kind, resource=TRANSFER_RESOURCE[kind], algorithm="copy", egress_bytes=nbytes)


def ring_step(nbytes: float, topo: GroupTopology, *, transport: str = "p2p", peers: int = 1,
              calibration: CalibrationView | None = None) -> Transfer:
    """One step of a P2P ring: every rank sends ``nbytes`` to each of ``peers`` neighbours
    (1 for a ring, 2 for a bidirectional ring) and receives the same."""
    if not (nbytes >= 0 and math.isfinite(nbytes)):
        raise ValueError(f"ring_step nbytes={nbytes!r} must be finite and >= 0")
    if transport == "collective":  # a ring's steps are P2P send/recv whichever SM-driven transport names them
        transport = "p2p"  # (both are torch.distributed: hocket.transport.registry)
    kind = transfer_kind(topo, transport)
    if topo.world == 1:
        return Transfer(ms=0.0, kind=kind, resource=TRANSFER_RESOURCE[kind], algorithm="none", egress_bytes=0.0)
    if transport == "host_staged":
        raise ValueError("ring steps do not run on transport='host_staged'; use p2p or copy_engine")
    # per-pair rate: a mesh gives each neighbour its own link; a switch shares the device's port
    pair_gbps = topo.ring_gbps if topo.nodes > 1 else (topo.intra_gbps or topo.ring_gbps)
    egress_gbps = pair_gbps * (peers if topo.fabric == "mesh" and topo.world > 2 else 1)
    latency = topo.ring_latency_us
    # gloo: every send and receive is its own call (no coalescing); NCCL groups them in one launch
    calls = 2 * peers if topo.backend == "gloo" and transport == "p2p" else 1
    ms = _time_ms(kind, calls=calls, steps=1, latency_us=latency, nbytes=nbytes * peers, gbps=egress_gbps)
    if calibration is not None and nbytes > 0:
        curve = "copy_engine" if transport == "copy_engine" else "p2p"
        ms *= calibration.transfer_ratio(curve, nbytes, lambda b: ring_step(b, topo, transport=transport,
                                                                           peers=peers).ms,
                                         context=(topo, transport, peers))
    return Transfer(ms=ms, kind=kind, resource=TRANSFER_RESOURCE[kind], algorithm="ring_step",
                    egress_bytes=nbytes * peers)


PER_SM_COPY_GBPS = 30.0
"""What one SM (one NCCL channel's CTA) can move per direction; caps an SM-driven
transfer that is given a ``comm_sms`` budget."""
DEFAULT_COMM_SMS = 8
"""SMs an SM-driven transfer occupies when the plan does not say (NCCL channels, one CTA each)."""


def with_sm_budget(topo: GroupTopology, comm_sms: int | None) -> GroupTopology:
    """The group as seen by an SM-driven transfer limited to ``comm_sms`` SMs."""
    if comm_sms is None or topo.backend == "gloo":
        return topo
    cap = comm_sms * PER_SM_COPY_GBPS
    return replace(
        topo, ring_gbps=min(topo.ring_gbps, cap),
        intra_gbps=None if topo.intra_gbps is None else min(topo.intra_gbps, cap),
        nic_gbps=None if topo.nic_gbps is None else min(topo.nic_gbps, cap))

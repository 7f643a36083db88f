"""Hardware as data: DeviceSpec, LinkSpec and a structural ClusterSpec.

A ClusterSpec stores its topology structurally, never as an N x N matrix:

* a node is a list of *islands*: runs of identical devices joined by one intra-node
  fabric (``switch`` such as NVSwitch, where every pair gets the full per-device link;
  ``mesh`` such as a fully connected xGMI mesh, where every pair has its own link;
  ``pcie`` for a PCIe tree; ``shm`` for CPU processes sharing host memory). Islands of
  one node are joined by a ``bridge`` (usually host memory over PCIe);
* sparse per-pair overrides inside a node (e.g. the two dies of one MI250X package);
* identical nodes are stored once with a count (``NodeGroup``), so a 16,384-GPU
  cluster costs O(node types) memory and rank lookups cost O(log groups).

Which transports a pair of ranks offers (a subset of ``hocket.core.plan.TRANSPORTS``)
is part of the data: the island, bridge or network says it, and devices of different
vendors share no peer path, so between them only ``host_staged`` survives.

Hypothetical transports (``HYPOTHETICAL_TRANSPORTS``: ``triggered``, T3-style transfers that hardware
issues itself when a producer's writes land) are never part of an island, bridge or network: a cluster
declares them in ``ClusterSpec.what_if_transports`` and offers them (``ClusterSpec.what_if_offered``) only
there, only to groups with a peer path; only the cost model's what-if pricing reads them
(``hocket.cost.triggered``), no executor runs them.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from hocket.core.plan import TRANSPORTS

LINK_KINDS = ("nvlink", "xgmi", "hccs", "pcie", "infiniband", "roce", "ethernet", "host", "shm")
"""``host``: device <-> host memory path; ``shm``: host memory shared between processes."""

FABRICS = ("switch", "mesh", "pcie", "shm")
"""switch: every pair at the per-device link rate; mesh: one dedicated link per pair;
pcie: a PCIe tree (pairs share the root complex); shm: CPU processes over shared memory."""

PEER_FREE_TRANSPORTS = frozenset({"host_staged"})
"""What survives between devices of different vendors: no peer path, only host memory."""

HYPOTHETICAL_TRANSPORTS = ("triggered",)
"""Transports no shipping hardware offers, priced for what-ifs only (``hocket.cost.triggered``):
``triggered``: the device tracks a producer's writes to a registered output region and issues the
transfer (and, at the destination, a near-memory reduction) itself, with no SM and no host work (T3,
ASPLOS 2024). A cluster declares them (``ClusterSpec.what_if_transports``, YAML ``what_if:``); no island,
bridge or network lists them, and no operator runs them."""
PEER_TRANSPORTS = frozenset({"p2p", "copy_engine", "peer_read"})
"""Transports that need a device-to-device peer path; a hypothetical triggered transfer needs one too."""
REAL_TRANSPORTS = frozenset(t for t in TRANSPORTS if t not in HYPOTHETICAL_TRANSPORTS)
"""The transports an island, bridge or network may list (every Plan transport but the hypothetical ones)."""


def _check_positive(owner: str, name: str, value: object, unit: str, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{owner}.{name}={value!r} must be a positive number in {unit}"
                         + (" (or None when unknown)" if allow_none else ""))


def _check_transports(owner: str, transports: Iterable[str]) -> frozenset[str]:
    if isinstance(transports, str):
        raise TypeError(f"{owner}.transports={transports!r} must be a list of names, not one string")
    result = frozenset(transports)
    hypothetical = result & set(HYPOTHETICAL_TRANSPORTS)
    if hypothetical:
        raise ValueError(f"{owner}.transports lists {sorted(hypothetical)}, which no hardware offers; declare it "
                         f"for the whole cluster with what_if: {sorted(hypothetical)} (ClusterSpec.what_if_transports)")
    unknown = result - REAL_TRANSPORTS
    if unknown:
        raise ValueError(f"{owner}.transports has unknown names {sorted(unknown)}; use a subset of "
                         f"{tuple(t for t in TRANSPORTS if t in REAL_TRANSPORTS)}")
    return result


@dataclass(frozen=True, kw_only=True)
class DeviceSpec:
    """One accelerator (or a CPU rank). Peaks are dense, with fp32 accumulation.

    ``peak_tflops`` maps hocket dtype names ("bfloat16", "float16", "float32",
    "float8_e4m3fn", ...) to TFLOP/s; a missing key or None means unknown/unsupported.
    ``matmul_efficiency``: the largest fraction of the dense 16-bit peak a vendor-library
    GEMM was publicly measured to reach (a "maximum achievable matmul FLOPS" over the
    datasheet rate), or None when no such figure is published; the cost model prices this
    device's GEMMs relative to that (``hocket.cost.compute.achievable_scale``).
    """

    vendor: str
    model: str
    peak_tflops: Mapping[str, float | None]
    memory_gib: float | None
    memory_gbps: float | None
    sm_count: int | None = None
    copy_engines: int | None = None
    power_limit_w: float | None = None
    matmul_efficiency: float | None = None

    def __post_init__(self) -> None:
        if not self.vendor or not isinstance(self.vendor, str):
            raise ValueError(f"DeviceSpec.vendor={self.vendor!r} must be a non-empty string such as 'nvidia'")
        if not self.model or not isinstance(self.model, str):
            raise ValueError(f"DeviceSpec.model={self.model!r} must be a non-empty string such as 'H100 SXM'")
        peaks = dict(self.peak_tflops)
        for dtype, value in peaks.items():
            _check_positive(f"DeviceSpec({self.model}).peak_tflops", dtype, value, "TFLOP/s", allow_none=True)
        object.__setattr__(self, "peak_tflops", _FrozenMapping(peaks))
        _check_positive(f"DeviceSpec({self.model})", "memory_gib", self.memory_gib, "GiB", allow_none=True)
        _check_positive(f"DeviceSpec({self.model})", "memory_gbps", self.memory_gbps, "GB/s", allow_none=True)
        _check_positive(f"DeviceSpec({self.model})", "power_limit_w", self.power_limit_w, "W", allow_none=True)
        _check_positive(f"DeviceSpec({self.model})", "matmul_efficiency", self.matmul_efficiency,
                        "fraction of the dense peak", allow_none=True)
        if self.matmul_efficiency is not None and self.matmul_efficiency > 1:
            raise ValueError(f"DeviceSpec({self.model}).matmul_efficiency={self.matmul_efficiency!r} must be a "
                             f"fraction of the dense peak in (0, 1] (e.g. 0.80 for 80%)")
        for name in ("sm_count", "copy_engines"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"DeviceSpec({self.model}).{name}={value!r} must be a positive int or None")

    def peak(self, dtype: str) -> float | None:
        """Dense peak TFLOP/s for ``dtype`` (canonical name), or None when unknown."""
        return self.peak_tflops.get(dtype)

    @property
    def is_cpu(self) -> bool:
        return self.vendor == "cpu"

    def to_dict(self) -> dict:
        return {"vendor": self.vendor, "model": self.model, "peak_tflops": dict(self.peak_tflops),
                "memory_gib": self.memory_gib, "memory_gbps": self.memory_gbps, "sm_count": self.sm_count,
                "copy_engines": self.copy_engines, "power_limit_w": self.power_limit_w,
                "matmul_efficiency": self.matmul_efficiency}


class _FrozenMapping(Mapping):
    """A read-only, hashable dict (DeviceSpec stays hashable and immutable)."""

    __slots__ = ("_data",)

    def __init__(self, data: dict) -> None:
        self._data = dict(data)

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._data.items())))

    def __eq__(self, other) -> bool:
        return isinstance(other, Mapping) and dict(self._data) == dict(other)

    def __repr__(self) -> str:
        return repr(self._data)


@dataclass(frozen=True, kw_only=True)
class LinkSpec:
    """A path between two endpoints: bandwidth per direction and per-message latency."""

    kind: str
    gbps_per_direction: float
    latency_us: float
    name: str = ""

    def __post_init__(self) -> None:
        if self.kind not in LINK_KINDS:
            raise ValueError(f"LinkSpec.kind={self.kind!r} is unknown; use one of {LINK_KINDS}")
        _check_positive(f"LinkSpec({self.name or self.kind})", "gbps_per_direction", self.gbps_per_direction, "GB/s")
        _check_positive(f"LinkSpec({self.name or self.kind})", "latency_us", self.latency_us, "microseconds")

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "gbps_per_direction": self.gbps_per_direction,
                "latency_us": self.latency_us}


@dataclass(frozen=True, kw_only=True)
class IslandSpec:
    """A run of ``count`` identical devices on one intra-node fabric."""

    device: DeviceSpec
    count: int
    fabric: str
    link: LinkSpec
    transports: frozenset[str]

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"IslandSpec.count={self.count!r} must be an int >= 1 (devices in the island)")
        if self.fabric not in FABRICS:
            raise ValueError(f"IslandSpec.fabric={self.fabric!r} is unknown; use one of {FABRICS}")
        object.__setattr__(self, "transports", _check_transports("IslandSpec", self.transports))


@dataclass(frozen=True, kw_only=True)
class PairOverride:
    """A specific link between two local ranks of a node (e.g. dies of one package)."""

    a: int
    b: int
    link: LinkSpec
    transports: frozenset[str]

    def __post_init__(self) -> None:
        if self.a == self.b or self.a < 0 or self.b < 0:
            raise ValueError(f"PairOverride(a={self.a}, b={self.b}) needs two different local ranks >= 0")
        object.__setattr__(self, "transports", _check_transports("PairOverride", self.transports))


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    """One host: islands of devices, the bridge between islands, host link and NICs."""

    name: str
    islands: tuple[IslandSpec, ...]
    host_link: LinkSpec | None = None
    """device <-> host memory path (PCIe); None for CPU ranks, whose memory is the host's."""
    bridge: LinkSpec | None = None
    bridge_transports: frozenset[str] = PEER_FREE_TRANSPORTS
    nic: LinkSpec | None = None
    """one network interface (per direction); needed once a cluster has several nodes."""
    nics: int = 0
    overrides: tuple[PairOverride, ...] = ()
    cpu_cores: int | None = None
    host_memory_gib: float | None = None
    _island_starts: tuple[int, ...] = field(init=False, repr=False, compare=False, default=())
    _override_map: dict = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        islands = tuple(self.islands)
        if not islands:
            raise ValueError(f"NodeSpec({self.name}).islands is empty; a node needs at least one device")
        object.__setattr__(self, "islands", islands)
        starts, total = [], 0
        for island in islands:
            starts.append(total)
            total += island.count
        object.__setattr__(self, "_island_starts", tuple(starts))
        if len(islands) > 1 and self.bridge is None:
            raise ValueError(f"NodeSpec({self.name}) has {len(islands)} islands but no bridge link between them")
        object.__setattr__(self, "bridge_transports", _check_transports(f"NodeSpec({self.name}).bridge",
                                                                        self.bridge_transports))
        if isinstance(self.nics, bool) or not isinstance(self.nics, int) or self.nics < 0:
            raise ValueError(f"NodeSpec({self.name}).nics={self.nics!r} must be an int >= 0")
        if self.nic is not None and self.nics < 1:
            raise ValueError(f"NodeSpec({self.name}) has a nic but nics={self.nics}; give the NIC count (>= 1)")
        _check_positive(f"NodeSpec({self.name})", "host_memory_gib", self.host_memory_gib, "GiB", allow_none=True)
        overrides = {}
        for ov in self.overrides:
            if max(ov.a, ov.b) >= total:
                raise ValueError(f"NodeSpec({self.name}) override ({ov.a}, {ov.b}) names a local rank >= {total}")
            overrides[(min(ov.a, ov.b), max(ov.a, ov.b))] = ov
        object.__setattr__(self, "overrides", tuple(self.overrides))
        object.__setattr__(self, "_override_map", overrides)

    @property
    def size(self) -> int:
        return sum(island.count for island in self.islands)

    def island_of(self, local: int) -> int:
        if not 0 <= local < self.size:
            raise ValueError(f"local rank {local} is outside node {self.name!r} (size {self.size})")
        return bisect.bisect_right(self._island_starts, local) - 1

    def device(self, local: int) -> DeviceSpec:
        return self.islands[self.island_of(local)].device

    def pair(self, a: int, b: int) -> tuple[LinkSpec, frozenset[str]]:
        """Link and transports between two different local ranks of this node."""
        ov = self._override_map.get((min(a, b), max(a, b)))
        if ov is not None:
            return ov.link, ov.transports
        ia, ib = self.island_of(a), self.island_of(b)
        if ia == ib:
            return self.islands[ia].link, self.islands[ia].transports
        return self.bridge, self.bridge_transports

    def restrict(self, locals_: Iterable[int]) -> NodeSpec:
        """This node with only the given local ranks, renumbered 0.. in the given order."""
        order = list(locals_)
        if not order:
            raise ValueError(f"restricting node {self.name!r} to no ranks; give at least one local rank")
        if len(set(order)) != len(order):
            raise ValueError(f"restricting node {self.name!r}: local ranks {order} repeat")
        if order == list(range(self.size)):
            return self
        islands: list[IslandSpec] = []
        last = None
        for local in order:
            idx = self.island_of(local)
            if idx == last:
                islands[-1] = replace(islands[-1], count=islands[-1].count + 1)
            else:
                islands.append(replace(self.islands[idx], count=1))
            last = idx
        position = {local: i for i, local in enumerate(order)}
        overrides = tuple(replace(ov, a=position[ov.a], b=position[ov.b]) for ov in self.overrides
                          if ov.a in position and ov.b in position)
        bridge = self.bridge if len(islands) > 1 else None
        return replace(self, islands=tuple(islands), overrides=overrides, bridge=bridge)


@dataclass(frozen=True, kw_only=True)
class NodeGroup:
    node: NodeSpec
    count: int

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"NodeGroup({self.node.name}).count={self.count!r} must be an int >= 1 (nodes)")


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """Nodes of devices plus the network between nodes (see the module docstring)."""

    name: str
    groups: tuple[NodeGroup, ...]
    network_transports: frozenset[str] = frozenset({"collective", "p2p", "host_staged"})
    network_topology: str = "none"
    """how NICs are wired: ``rail`` (NIC i of every node on one switch), ``fat_tree``, ``none`` (one node)."""
    description: str = ""
    what_if_transports: frozenset[str] = frozenset()
    """Hypothetical transports (a subset of ``HYPOTHETICAL_TRANSPORTS``) this cluster's devices are declared
    to have, for what-if pricing only (YAML ``what_if: [triggered]``); empty on every real machine."""
    _rank_starts: tuple[int, ...] = field(init=False, repr=False, compare=False, default=())
    _node_starts: tuple[int, ...] = field(init=False, repr=False, compare=False, default=())
    _world: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        groups = tuple(self.groups)
        if not groups:
            raise ValueError(f"ClusterSpec({self.name}).groups is empty; a cluster needs at least one node")
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "network_transports",
                           _check_transports(f"ClusterSpec({self.name}).network", self.network_transports))
        if isinstance(self.what_if_transports, str):
            raise TypeError(f"ClusterSpec({self.name}).what_if_transports={self.what_if_transports!r} must be a "
                            f"list of names, not one string (e.g. ['triggered'])")
        what_if = frozenset(self.what_if_transports)
        unknown = what_if - set(HYPOTHETICAL_TRANSPORTS)
        if unknown:
            raise ValueError(f"ClusterSpec({self.name}).what_if_transports has {sorted(unknown)}, which are not "
                             f"hypothetical transports; use a subset of {HYPOTHETICAL_TRANSPORTS} (real transports "
                             f"belong in the islands, bridges and network)")
        object.__setattr__(self, "what_if_transports", what_if)
        rank_starts, node_starts, ranks, nodes = [], [], 0, 0
        for group in groups:
            rank_starts.append(ranks)
            node_starts.append(nodes)
            ranks += group.count * group.node.size
            nodes += group.count
        object.__setattr__(self, "_rank_starts", tuple(rank_starts))
        object.__setattr__(self, "_node_starts", tuple(node_starts))
        object.__setattr__(self, "_world", ranks)
        if nodes > 1:
            for group in groups:
                if group.node.nic is None:
                    raise ValueError(f"ClusterSpec({self.name}) has {nodes} nodes but node {group.node.name!r} "
                                     f"has no nic; give its network link (e.g. infiniband, GB/s per direction)")

    # -- sizes and lookups --------------------------------------------------
    @property
    def world_size(self) -> int:
        return self._world

    @property
    def num_nodes(self) -> int:
        return self._node_starts[-1] + self.groups[-1].count

    def _check_rank(self, rank: int, arg: str = "rank") -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self._world:
            raise ValueError(f"{arg}={rank!r} is outside cluster {self.name!r} (world size {self.world_size}); "
                             f"use 0..{self.world_size - 1}")

    def _locate(self, rank: int) -> tuple[int, int, int]:
        """(group index, node index, local rank) of a global rank."""
        self._check_rank(rank)
        g = bisect.bisect_right(self._rank_starts, rank) - 1
        size = self.groups[g].node.size
        offset = rank - self._rank_starts[g]
        return g, self._node_starts[g] + offset // size, offset % size

    def node_of(self, rank: int) -> int:
        return self._locate(rank)[1]

    def local_rank(self, rank: int) -> int:
        return self._locate(rank)[2]

    def node(self, node: int) -> NodeSpec:
        if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < self.num_nodes:
            raise ValueError(f"node={node!r} is outside cluster {self.name!r} ({self.num_nodes} nodes)")
        return self.groups[bisect.bisect_right(self._node_starts, node) - 1].node

    def ranks_per_node(self, node: int) -> int:
        return self.node(node).size

    def device(self, rank: int) -> DeviceSpec:
        g, _, local = self._locate(rank)
        return self.groups[g].node.device(local)

    def host_link(self, rank: int) -> LinkSpec | None:
        """The device <-> host memory path of a rank (None for CPU ranks)."""
        g, _, _ = self._locate(rank)
        return self.groups[g].node.host_link

    def device_counts(self) -> dict[str, int]:
        """``{model: ranks}`` over the whole cluster, computed per group."""
        counts: dict[str, int] = {}
        for group in self.groups:
            for island in group.node.islands:
                counts[island.device.model] = counts.get(island.device.model, 0) + island.count * group.count
        return counts

    def vendors(self) -> frozenset[str]:
        return frozenset(i.device.vendor for g in self.groups for i in g.node.islands)

    # -- links and transports -------------------------------------------------
    def _pair(self, a: int, b: int) -> tuple[LinkSpec, frozenset[str]]:
        if a == b:
            raise ValueError(f"ranks a={a} and b={b} are the same rank; a link needs two different ranks")
        ga, na, la = self._locate(a)
        gb, nb, lb = self._locate(b)
        node_a, node_b = self.groups[ga].node, self.groups[gb].node
        if na == nb:
            link, transports = node_a.pair(la, lb)
        else:
            link = _slower(node_a.nic, node_b.nic)
            transports = self.network_transports
        if node_a.device(la).vendor != node_b.device(lb).vendor:
            transports = transports & PEER_FREE_TRANSPORTS
        return link, transports

    def link(self, a: int, b: int) -> LinkSpec:
        """The path between two ranks: intra-node fabric, bridge or inter-node network (per NIC)."""
        return self._pair(a, b)[0]

    def transports(self, a: int, b: int) -> frozenset[str]:
        """Transports (subset of Plan TRANSPORTS) the pair offers."""
        return self._pair(a, b)[1]

    def group_transports(self, ranks: Iterable[int]) -> frozenset[str]:
        """Transports every pair in the group offers (structural: never loops over all pairs)."""
        ranks = self._group(ranks, "group_transports")
        if len(ranks) == 1:
            return REAL_TRANSPORTS
        per_node: dict[int, tuple[int, list[int]]] = {}
        vendors: set[str] = set()
        for rank in ranks:
            g, node, local = self._locate(rank)
            per_node.setdefault(node, (g, []))[1].append(local)
            vendors.add(self.groups[g].node.device(local).vendor)
        result = REAL_TRANSPORTS
        seen: set[tuple[int, tuple[int, ...]]] = set()
        for g, locals_ in per_node.values():
            key = (g, tuple(sorted(locals_)))
            if key in seen or len(locals_) < 2:
                continue
            seen.add(key)
            result &= _node_group_transports(self.groups[g].node, key[1])
        if len(per_node) > 1:
            result &= self.network_transports
        if len(vendors) > 1:
            result &= PEER_FREE_TRANSPORTS
        return result

    def what_if_offered(self, ranks: Iterable[int]) -> frozenset[str]:
        """Hypothetical transports (``what_if_transports``) the group may be priced with: those the cluster
        declares, for a group of two or more ranks whose every pair has a peer path (a triggered transfer is
        issued by the device over its link to the peer's memory); empty otherwise, and on every preset that
        declares none. Never part of :meth:`group_transports`."""
        ranks = self._group(ranks, "what_if_offered")
        if not self.what_if_transports or len(ranks) < 2:
            return frozenset()
        if not self.group_transports(ranks) & PEER_TRANSPORTS:
            return frozenset()
        return self.what_if_transports

    def bottleneck_link(self, ranks: Iterable[int]) -> LinkSpec:
        """Slowest link a ring over ``ranks`` (in the given order) crosses."""
        ranks = self._group(ranks, "bottleneck_link")
        if len(ranks) < 2:
            raise ValueError(f"bottleneck_link needs at least two ranks, got {ranks}")
        worst: LinkSpec | None = None
        cache: dict[tuple, LinkSpec] = {}
        for i, a in enumerate(ranks):
            b = ranks[(i + 1) % len(ranks)]
            link = self.link(a, b)
            key = (link.kind, link.gbps_per_direction, link.latency_us, link.name)
            link = cache.setdefault(key, link)
            worst = link if worst is None else _slower(worst, link)
        return worst

    def _group(self, ranks: Iterable[int], what: str) -> list[int]:
        ranks = list(ranks)
        if not ranks:
            raise ValueError(f"{what} got an empty rank list; give the group's global ranks")
        for r in ranks:
            self._check_rank(r, "ranks[...]")
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"{what}: ranks repeat in {ranks[:16]}{'...' if len(ranks) > 16 else ''}")
        return ranks

    # -- derived clusters -------------------------------------------------------
    def subcluster(self, ranks: Iterable[int], *, name: str | None = None) -> ClusterSpec:
        """The cluster seen by a group: rank i of the result is ``ranks[i]`` here.

        Each node's ranks must be contiguous in ``ranks`` (node-major order, as TP/DP groups are).
        """
        ranks = self._group(ranks, "subcluster")
        nodes: list[tuple[int, int, list[int]]] = []  # (node, group, locals)
        for rank in ranks:
            g, node, local = self._locate(rank)
            if nodes and nodes[-1][0] == node:
                nodes[-1][2].append(local)
            elif any(n == node for n, _, _ in nodes):
                raise ValueError(f"subcluster: the ranks of node {node} are not contiguous in the list; "
                                 f"order the group node by node")
            else:
                nodes.append((node, g, [local]))
        groups: list[NodeGroup] = []
        restricted_cache: dict[tuple[int, tuple[int, ...]], NodeSpec] = {}
        for _, g, locals_ in nodes:
            key = (g, tuple(locals_))
            spec = restricted_cache.get(key)
            if spec is None:
                spec = restricted_cache[key] = self.groups[g].node.restrict(locals_)
            if groups and groups[-1].node == spec:
                groups[-1] = NodeGroup(node=groups[-1].node, count=groups[-1].count + 1)
            else:
                groups.append(NodeGroup(node=spec, count=1))
        return replace(self, name=name or f"{self.name}[{len(ranks)} ranks]", groups=tuple(groups),
                       network_topology=self.network_topology if len(nodes) > 1 else "none")

    def check_world(self, world: int, *, arg: str = "world") -> None:
        """Raise a clear error when a group of ``world`` ranks does not fit this cluster."""
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            raise ValueError(f"{arg}={world!r} must be an int >= 1")
        if world > self.world_size:
            raise ValueError(f"{arg}={world} is larger than cluster {self.name!r} ({self.world_size} ranks); "
                             f"use a larger cluster preset or a smaller group")

    # -- description ----------------------------------------------------------
    def topology_summary(self) -> list[dict]:
        """Compact, JSON-able description of the structure (used by fingerprints).

        NICs are left out of a one-node cluster (no traffic crosses them), so a probed
        2-GPU host and the matching preset (``h200x2``) share one fingerprint.
        """
        out = []
        multi_node = self.num_nodes > 1
        for group in self.groups:
            node = group.node
            out.append({
                "nodes": group.count,
                "islands": [{"model": i.device.model, "count": i.count, "fabric": i.fabric,
                             "link": i.link.kind, "link_gbps": i.link.gbps_per_direction,
                             "transports": sorted(i.transports)} for i in node.islands],
                "bridge": node.bridge.kind if node.bridge else None,
                "nic": node.nic.kind if node.nic and multi_node else None, "nics": node.nics if multi_node else 0,
                "overrides": [[ov.a, ov.b, ov.link.kind, ov.link.gbps_per_direction] for ov in node.overrides],
            })
        return out

    def describe(self) -> str:
        counts = ", ".join(f"{n}x {m}" for m, n in self.device_counts().items())
        what_if = (f"; what-if (hypothetical): {', '.join(sorted(self.what_if_transports))}"
                   if self.what_if_transports else "")
        return f"{self.name}: {self.world_size} ranks on {self.num_nodes} node(s) ({counts}){what_if}"


def _slower(a: LinkSpec | None, b: LinkSpec | None) -> LinkSpec:
    """The slower of two links (lower bandwidth; on a tie, higher latency)."""
    if a is None or b is None:
        link = a or b
        if link is None:
            raise ValueError("two nodes without a network link cannot talk; give each node a nic")
        return link
    return min((a, b), key=lambda link: (link.gbps_per_direction, -link.latency_us))


def _node_group_transports(node: NodeSpec, locals_: tuple[int, ...]) -> frozenset[str]:
    """Transports every pair of the given local ranks of one node offers."""
    result = REAL_TRANSPORTS
    islands = {node.island_of(local) for local in locals_}
    members = set(locals_)
    for idx in islands:
        if sum(1 for local in locals_ if node.island_of(local) == idx) >= 2:
            result &= node.islands[idx].transports
    if len(islands) > 1:
        result &= node.bridge_transports
    for (a, b), ov in node._override_map.items():
        if a in members and b in members:
            result &= ov.transports
    return result

"""``hierarchy="intra_first"``: each collective runs as phases on intra-node and inter-node sub-groups.

A group of ``p = q * r`` ranks on ``q`` nodes of ``r`` ranks each is cut into ``q`` intra-node sub-groups
(the ranks of one node) and ``r`` inter-node sub-groups (the ranks with the same local index, one per
node). The local index of a rank is its position among its node's ranks in global-rank order, which is
the order :func:`torch.distributed.new_group` gives a sub-group's members. Each collective runs as:

* ``all_gather``: inter-node all-gather of the rank's block (``1/p`` of the output, ``q`` blocks land),
  then intra-node all-gather of those ``q`` blocks (the node's ``r * q`` blocks = all ``p``), then one
  local copy that puts the blocks in group-rank order. Each rank's block crosses the network once.
* ``reduce_scatter``: one local copy that orders the input blocks by (local index, node), intra-node
  reduce-scatter (each rank keeps the node's sum of the ``q`` blocks its inter-node peers own), then
  inter-node reduce-scatter of those ``q`` blocks into the output. ``1/r`` of the input crosses the network.
* ``all_reduce``: intra-node reduce-scatter (the buffer in ``r`` parts), inter-node all-reduce of the
  rank's part, intra-node all-gather back into the buffer (a buffer of ``n`` elements with ``n % r != 0``
  is padded to a multiple of ``r`` in a scratch buffer and copied back).

So the reduction's first phase is intra-node (the name), and the all-gather, its mirror, gathers across
nodes first. Every phase is one call on a sub-group: 2 calls per all-gather and reduce-scatter, 3 per
all-reduce (what :func:`hocket.cost.comm.collective` prices for ``hierarchy="intra_first"``).

A call returns a :class:`ChainedPending`. On CUDA every phase is issued at once (a phase's wait only
orders the current stream after it, so the next one queues behind it without blocking the host). On
CPU (gloo) a wait blocks the host, so only the first phase is issued with the call and the later ones
when the caller waits: a pipeline that keeps two calls in flight overlaps one call's first phase with
the other's later phases and with its compute. Ranks issue the phases in their program order, so the
sub-groups see the same sequence of calls on every rank.

Sub-groups are made with ``new_group(ranks, use_local_synchronization=True)`` (only the members
rendezvous; a plain ``new_group`` would need every world rank inside the operator), once per set of
global ranks for the life of the default process group: such a group is named by a hash of its ranks and
rendezvous under that name in the job's store, so one destroyed and made again would meet the old one's
keys. A :class:`SubGroups` (one per flat group and node layout) holds the pair and the scratch buffers
until :func:`close_sub_groups`, which frees the buffers; the process groups stay for the next
:class:`SubGroups` of the same ranks and go with ``destroy_process_group()``. Scratch buffers are taken
from a free list when a call is issued and returned when it is waited on, so the calls in flight never
share one and a steady loop allocates nothing.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from hocket.env import wait_timeout_s
from hocket.transport.group import GroupHandle, resolve_group
from hocket.transport.pending import DEFAULT_TIMEOUT_S, Pending
from hocket.transport.torch_dist import TorchDistTransport

HIERARCHY_TRANSPORTS = ("collective", "p2p")
"""transports whose hierarchical form runs: both phases are torch.distributed collectives on sub-groups."""


# -- the node layout ----------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeLayout:
    """Where each rank of a group lies: ``ranks[g]`` (global rank of group rank ``g``) on node ``nodes[g]``."""

    ranks: tuple[int, ...]
    nodes: tuple[int, ...]
    node_ids: tuple[int, ...] = field(init=False)
    """the distinct nodes, in order of their smallest global rank."""
    intra: tuple[tuple[int, ...], ...] = field(init=False)
    """``intra[j]``: group ranks on node ``node_ids[j]``, in global-rank order (the sub-group's order)."""
    inter: tuple[tuple[int, ...], ...] = field(init=False)
    """``inter[l]``: group ranks of local index ``l`` (one per node), in global-rank order."""

    def __post_init__(self) -> None:
        if len(self.ranks) != len(self.nodes):
            raise ValueError(f"NodeLayout: {len(self.ranks)} ranks but {len(self.nodes)} node entries")
        by_node: dict[int, list[int]] = {}
        for g in sorted(range(len(self.ranks)), key=lambda g: self.ranks[g]):
            by_node.setdefault(self.nodes[g], []).append(g)
        node_ids = tuple(by_node)
        intra = tuple(tuple(by_node[n]) for n in node_ids)
        sizes = {len(members) for members in intra}
        inter: tuple[tuple[int, ...], ...] = ()
        if len(sizes) == 1:
            r = sizes.pop()
            inter = tuple(tuple(sorted((members[local] for members in intra), key=lambda g: self.ranks[g]))
                          for local in range(r))
        object.__setattr__(self, "node_ids", node_ids)
        object.__setattr__(self, "intra", intra)
        object.__setattr__(self, "inter", inter)

    @property
    def world(self) -> int:
        return len(self.ranks)

    @property
    def num_nodes(self) -> int:
        return len(self.node_ids)

    @property
    def ranks_per_node(self) -> int:
        return len(self.intra[0])

    def problem(self) -> str | None:
        """Why a hierarchy cannot run on this layout (None when it can)."""
        counts = {self.node_ids[j]: len(m) for j, m in enumerate(self.intra)}
        if len(counts) == 1:
            return f"all {self.world} ranks lie in one node (node {self.node_ids[0]})"
        if not self.inter:
            return f"the nodes hold different numbers of the group's ranks ({counts} ranks per node)"
        if self.ranks_per_node == 1:
            return f"each of its {self.num_nodes} nodes holds one rank of the group"
        return None

    def local_index(self, g: int) -> int:
        return next(m.index(g) for m in self.intra if g in m)

    def node_position(self, g: int) -> int:
        return next(j for j, m in enumerate(self.intra) if g in m)

    def permutation(self) -> list[int]:
        """``perm[l * q + t]``: the group rank at position ``t`` of inter-node sub-group ``l`` (the order an
        inter-node phase then an intra-node phase leave the blocks in)."""
        return [g for members in self.inter for g in members]


def check_layout(layout: NodeLayout, *, group_name: str, cluster_name: str) -> NodeLayout:
    """``layout``, or a ValueError naming the plan field, the group, the layout and the fix."""
    problem = layout.problem()
    if problem is not None:
        raise ValueError(
            f"plan.hierarchy='intra_first' on group {group_name!r} (global ranks {list(layout.ranks)}, nodes "
            f"{list(layout.nodes)} in cluster {cluster_name!r}): {problem}; a hierarchy needs a group that spans "
            f"at least two nodes with the same number (at least two) of its ranks on each. Use hierarchy=None, or "
            f"describe the nodes the ranks run on with HOCKET_CLUSTER=<preset or YAML> (e.g. cpu-2node: gloo "
            f"world 4 as two nodes of two ranks)")
    return layout


# -- sub-groups, cached per (flat group, layout) -------------------------------------------------
class SubGroups:
    """This rank's intra-node and inter-node sub-groups of one flat group, and their scratch buffers."""

    def __init__(self, flat: GroupHandle, layout: NodeLayout) -> None:
        self.flat, self.layout = flat, layout
        j = layout.node_position(flat.rank)
        local = layout.local_index(flat.rank)
        try:
            timeout = datetime.timedelta(seconds=wait_timeout_s())
        except ValueError:  # reported to every rank by the call's agreement
            timeout = datetime.timedelta(seconds=DEFAULT_TIMEOUT_S)
        self.intra = self._make(layout.intra[j], timeout)
        self.inter = self._make(layout.inter[local], timeout)
        self.perm = layout.permutation()
        self._perm_on: dict[str, torch.Tensor] = {}
        self._free: dict[tuple, list[torch.Tensor]] = {}
        self._closed = False

    def _make(self, members: Sequence[int], timeout: datetime.timedelta) -> GroupHandle:
        ranks = tuple(sorted(self.flat.ranks[g] for g in members))
        key = (ranks, self.flat.backend)
        made = _MADE.get(key)
        if made is not None and made[0] is dist.group.WORLD:
            return made[1]
        pg = dist.new_group(list(ranks), timeout=timeout, backend=self.flat.backend, use_local_synchronization=True)
        handle = resolve_group(pg)
        _MADE[key] = (dist.group.WORLD, handle)
        return handle

    def check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the hierarchy's sub-groups of group {self.flat.name!r} were closed "
                               f"(hocket.ops.close_contexts); call hocket.ops.dispatch.clear_prepared_cache() so the "
                               f"next call makes new ones")

    def perm_on(self, device: torch.device) -> torch.Tensor:
        key = str(device)
        perm = self._perm_on.get(key)
        if perm is None:
            perm = self._perm_on[key] = torch.tensor(self.perm, dtype=torch.long, device=device)
        return perm

    def take(self, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A flat scratch buffer of ``numel`` elements no call in flight holds."""
        self.check_open()
        free = self._free.get((numel, dtype, str(device)))
        return free.pop() if free else torch.empty(numel, dtype=dtype, device=device)

    def give(self, buf: torch.Tensor) -> None:
        if not self._closed:
            self._free.setdefault((buf.numel(), buf.dtype, str(buf.device)), []).append(buf)

    @property
    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for bufs in self._free.values() for b in bufs)

    def close(self) -> None:
        """Free the scratch buffers; the process groups stay for reuse (see the module docstring)."""
        self._free.clear()
        self._perm_on.clear()
        self._closed = True


_MADE: dict[tuple, tuple[object, GroupHandle]] = {}
"""(sorted global ranks, backend) -> (the default process group it was made under, the sub-group)."""

_SUB_GROUPS: dict[tuple, tuple[dist.ProcessGroup, SubGroups]] = {}
"""(flat group name, id of the flat group, layout) -> (the flat group, kept alive so its id is not reused;
its sub-groups)."""


def sub_groups(flat: GroupHandle, layout: NodeLayout) -> SubGroups:
    """The sub-groups of ``flat`` for ``layout`` (made on first use: collective over each sub-group)."""
    key = (flat.name, id(flat.pg), layout)
    hit = _SUB_GROUPS.get(key)
    if hit is not None and hit[0] is flat.pg and not hit[1]._closed:
        return hit[1]
    made = SubGroups(flat, layout)
    _SUB_GROUPS[key] = (flat.pg, made)
    return made


def close_sub_groups(group_name: str | None = None) -> int:
    """Close the :class:`SubGroups` of flat group ``group_name`` (all when None): their buffers are freed and
    the next hierarchical call makes a new one (over the same process groups); returns how many were closed."""
    keys = [k for k in _SUB_GROUPS if group_name is None or k[0] == group_name]
    for key in keys:
        _SUB_GROUPS.pop(key)[1].close()
    return len(keys)


# -- chained phases ---------------------------------------------------------------------------
Step = Callable[[], Pending | None]


class ChainedPending:
    """The phases of one hierarchical collective: each step issues one phase (returning its Pending, or
    None for local work); a step runs once the previous phase is waited on. ``eager`` issues every step at
    once (CUDA: a wait orders streams only); otherwise the first step runs now and the rest in
    :meth:`wait`. ``after`` runs once the last phase is done (local copies, returning scratch buffers)."""

    __slots__ = ("_steps", "_current", "_after")

    def __init__(self, steps: Sequence[Step], *, eager: bool, after: Callable[[], None] | None = None) -> None:
        self._steps = list(steps)
        self._after = after
        self._current: Pending | None = None
        self._advance(all_steps=eager)

    def _advance(self, *, all_steps: bool) -> None:
        while self._steps:
            if self._current is not None:
                self._current.wait()
            self._current = self._steps.pop(0)()
            if not all_steps:
                return

    def wait(self) -> None:
        self._advance(all_steps=True)
        if self._current is not None:
            self._current.wait()
            self._current = None
        if self._after is not None:
            after, self._after = self._after, None
            after()

    @property
    def done(self) -> bool:
        return not self._steps and self._current is None and self._after is None


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.view(-1)


class HierarchicalTransport:
    """Collectives as intra-node and inter-node phases on :class:`SubGroups` (see the module docstring);
    ``exchange`` (P2P) runs on the flat group."""

    name = "collective"
    hierarchy = "intra_first"

    def __init__(self, flat: GroupHandle, groups: SubGroups) -> None:
        self.group = flat
        self.groups = groups
        self.layout = groups.layout
        self.flat = TorchDistTransport(flat)
        self.intra = TorchDistTransport(groups.intra)
        self.inter = TorchDistTransport(groups.inter)

    def _done(self) -> Pending:
        return Pending([], what="hierarchical collective", group_name=self.group.name, on_cuda=False)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor) -> ChainedPending | Pending:
        """``out`` (``world * inp.numel()`` elements) receives every rank's ``inp``, rank-major: inter-node
        all-gather of ``inp``, intra-node all-gather of the ``q`` blocks, then the blocks into rank order."""
        self.groups.check_open()
        p, q = self.layout.world, self.layout.num_nodes
        n = inp.numel()
        if n == 0:
            return self._done()
        src = inp.reshape(-1)
        across = self.groups.take(q * n, inp.dtype, inp.device)
        node = self.groups.take(p * n, inp.dtype, inp.device)

        def after() -> None:
            _flat(out).view(p, n).index_copy_(0, self.groups.perm_on(out.device), node.view(p, n))
            self.groups.give(across)
            self.groups.give(node)

        return ChainedPending([lambda: self.inter.all_gather(across, src),
                               lambda: self.intra.all_gather(node, across)], eager=inp.is_cuda, after=after)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor) -> ChainedPending | Pending:
        """``out`` receives the sum over ranks of block ``rank`` of ``inp``: the blocks ordered by (local
        index, node), intra-node reduce-scatter, then inter-node reduce-scatter into ``out``."""
        self.groups.check_open()
        p, q = self.layout.world, self.layout.num_nodes
        n = out.numel()
        if n == 0:
            return self._done()
        ordered = self.groups.take(p * n, inp.dtype, inp.device)
        torch.index_select(inp.reshape(p, n), 0, self.groups.perm_on(inp.device), out=ordered.view(p, n))
        node = self.groups.take(q * n, inp.dtype, inp.device)

        def after() -> None:
            self.groups.give(ordered)
            self.groups.give(node)

        return ChainedPending([lambda: self.intra.reduce_scatter(node, ordered),
                               lambda: self.inter.reduce_scatter(_flat(out), node)], eager=inp.is_cuda, after=after)

    def all_reduce(self, tensor: torch.Tensor) -> ChainedPending | Pending:
        """In-place sum over ranks: intra-node reduce-scatter, inter-node all-reduce of this rank's part,
        intra-node all-gather."""
        self.groups.check_open()
        r = self.layout.ranks_per_node
        n = tensor.numel()
        if n == 0:
            return self._done()
        part_n = -(-n // r)
        padded = part_n * r != n or not tensor.is_contiguous()
        whole = self.groups.take(part_n * r, tensor.dtype, tensor.device) if padded else _flat(tensor)
        if padded:
            whole[:n].view(tensor.shape).copy_(tensor)
            whole[n:].zero_()
        part = self.groups.take(part_n, tensor.dtype, tensor.device)

        def after() -> None:
            if padded:
                tensor.copy_(whole[:n].view(tensor.shape))
                self.groups.give(whole)
            self.groups.give(part)

        return ChainedPending([lambda: self.intra.reduce_scatter(part, whole),
                               lambda: self.inter.all_reduce(part),
                               lambda: self.intra.all_gather(whole, part)], eager=tensor.is_cuda, after=after)

    def exchange(self, sends: Sequence[tuple[torch.Tensor, int]],
                 recvs: Sequence[tuple[torch.Tensor, int]]) -> Pending:
        """Point-to-point on the flat group (a P2P step has no hierarchical form)."""
        return self.flat.exchange(sends, recvs)


def hierarchical_transport(flat: GroupHandle, nodes: Sequence[int], *, cluster_name: str = "?") -> HierarchicalTransport:
    """The hierarchical transport of ``flat`` whose group rank ``g`` lies on node ``nodes[g]``; a layout it
    cannot run on raises :func:`check_layout`'s error."""
    layout = check_layout(NodeLayout(flat.ranks, tuple(int(n) for n in nodes)), group_name=flat.name,
                          cluster_name=cluster_name)
    return HierarchicalTransport(flat, sub_groups(flat, layout))

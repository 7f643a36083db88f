"""``stencil_steps``: halo-exchange stencil steps on a process grid, the exchange overlapped with compute.

``stencil_steps(fields, step_fn, radius, mesh, *, steps=1, boundary="fixed", plan=None)``: ``fields`` is
this rank's blocks (:mod:`hocket.ops.stencil_fields`: exchanged, :class:`Carried` and :class:`Static`
fields), ``mesh`` a ``DeviceMesh`` (or a tuple of process-grid dims over the default group, row-major)
whose dim ``d`` splits grid dim ``d``. ``step_fn`` is a pure torch function: it takes every exchanged
field padded by ``radius`` on each split side, reads only within ``radius`` and is translation-invariant,
so the operator may call it on any box of the block (the interior, the boundary shell). Returns the new
``fields`` tuple after ``steps`` steps; the result equals :func:`hocket.ops.stencil_fields.reference_steps`
on the whole grid.

Strategies (``Plan.strategy``; specs in :mod:`hocket.strategies.halo`):

* ``sequential``: per step, exchange (post, wait), then one ``step_fn`` call on the padded block;
* ``overlap``: per step, post the exchange, compute the interior (the cells ``radius`` or more from every
  split side), wait, compute the boundary shell (one box per side);
* ``deep_halo``: every ``s = Plan.chunks`` steps, exchange a halo ``s * radius`` wide (carried and static
  fields ``(s - 1) * radius``), then run ``s`` steps locally on shrinking boxes (the overlap is computed
  twice, by the rank and by its neighbour): ``s`` times fewer messages, each about ``s`` times larger.

Messages: all fields' regions for one neighbour are packed into one message, or with ``Plan.packing="per_face"``
each field's region is its own message, sent from and received into the padded field where the region is
contiguous (a 1-D process grid's faces: no pack copy); faces, edges and corners each go straight to their neighbour (``3^D - 1`` neighbours for ``D`` split dims). The P2P tag is the index of
the offset the message travels along (:func:`hocket.core.halo.neighbour_offsets`), so two messages to one
peer (a periodic axis of two ranks) never match the wrong receive; a neighbour that is the rank itself (a
periodic axis of one rank) is a local copy, since gloo cannot send to itself. Every wait is bounded
(``hocket.env.wait_timeout_s()``, :class:`hocket.transport.pending.Pending`).

Bad input (an uneven split, a process grid that is not the world, a radius or steps below 1, a halo wider
than a block, fields of different shapes, a ``step_fn`` that returns the wrong shapes: it is probed once on
a block of one cell per split dim) raises the same error on every rank before any exchange
(:func:`hocket.ops.agreement.settle`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from hocket.core.halo import BOUNDARIES, HALO_KIND, HaloSite, halo_problem, neighbour_offsets
from hocket.core.plan import Plan, as_plan
from hocket.ops.agreement import all_ranks_ok, mode_in_force, settle
from hocket.ops.executors import executor_for, register_executor
from hocket.ops.stencil_fields import Carried, Static, call_step, rewrap, split_fields
from hocket.transport.group import resolve_group
from hocket.transport.pending import Pending, set_current_call

__all__ = ["Carried", "Static", "block_slices", "halo_site", "stencil_steps"]

HALO_STRATEGIES = ("sequential", "overlap", "deep_halo")
"""the strategies that run a halo site, in tie-break order."""


# -- the process grid ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProcessGrid:
    """This rank's place in the process grid: its coordinate and every coordinate's global rank."""

    procs: tuple[int, ...]
    ranks: tuple[int, ...]
    """global rank of each coordinate, row-major."""
    coord: tuple[int, ...]
    periodic: bool

    @property
    def rank(self) -> int:
        return self.rank_of(self.coord)

    def rank_of(self, coord: Sequence[int]) -> int:
        index = 0
        for c, p in zip(coord, self.procs):
            index = index * p + c
        return self.ranks[index]

    def peer(self, offset: Sequence[int]) -> int | None:
        """Global rank of the neighbour along ``offset``; None outside a fixed boundary."""
        coord = []
        for o, c, p in zip(offset, self.coord, self.procs):
            q = c + o
            if not 0 <= q < p:
                if not self.periodic:
                    return None
                q %= p
            coord.append(q)
        return self.rank_of(coord)


def process_grid(mesh: object, boundary: str) -> ProcessGrid:
    """The :class:`ProcessGrid` of ``mesh`` (a DeviceMesh, or a tuple of dims over the default group)."""
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("stencil_steps: torch.distributed is not initialised; call init_process_group "
                         "(or run under torchrun) first")
    world, me = dist.get_world_size(), dist.get_rank()
    if isinstance(mesh, DeviceMesh):
        procs = tuple(int(s) for s in mesh.shape)
        ranks = tuple(int(r) for r in mesh.mesh.flatten().tolist())
        coord = mesh.get_coordinate()
        if coord is None:
            raise ValueError(f"stencil_steps: rank {me} is not in the mesh {mesh}")
        coord = tuple(int(c) for c in coord)
    else:
        try:
            procs = tuple(int(p) for p in mesh)
        except TypeError:
            raise ValueError(f"mesh={mesh!r} must be a DeviceMesh or a tuple of process-grid dims") from None
        if not procs or any(p < 1 for p in procs):
            raise ValueError(f"mesh={mesh!r}: the process grid must be non-empty dims >= 1")
        ranks = tuple(range(world))
        coord, rest = [], me
        for p in reversed(procs):
            coord.append(rest % p)
            rest //= p
        coord = tuple(reversed(coord))
    if math.prod(procs) != world or len(ranks) != world:
        raise ValueError(f"the process grid {procs} holds {math.prod(procs)} ranks but the world has {world}; "
                         f"the mesh must cover every rank once")
    return ProcessGrid(procs=procs, ranks=ranks, coord=coord, periodic=boundary == "periodic")


def block_slices(grid: Sequence[int], procs: Sequence[int], coord: Sequence[int]) -> tuple[slice, ...]:
    """The slices of the global grid that the rank at ``coord`` holds (even split, dim ``d`` by ``procs[d]``)."""
    out = []
    for d, n in enumerate(grid):
        if d < len(procs):
            b = n // procs[d]
            out.append(slice(coord[d] * b, (coord[d] + 1) * b))
        else:
            out.append(slice(None))
    return tuple(out)


# -- the transport: P2P with tags, bounded waits ------------------------------------------------------

class P2PTransport:
    """Posts one exchange as one ``batch_isend_irecv`` (receives first), returns a bounded :class:`Pending`."""

    def post(self, sends: Sequence[tuple[torch.Tensor, int, int]],
             recvs: Sequence[tuple[torch.Tensor, int, int]]) -> Pending:
        """``(tensor, global peer, tag)`` for each send and receive."""
        ops = [dist.P2POp(dist.irecv, t, peer, tag=tag) for t, peer, tag in recvs]
        ops += [dist.P2POp(dist.isend, t, peer, tag=tag) for t, peer, tag in sends]
        works = dist.batch_isend_irecv(ops) if ops else []
        on_cuda = bool(ops) and ops[0].tensor.is_cuda
        return Pending(works, what="halo exchange", group_name="world", on_cuda=on_cuda)


# -- one exchange --------------------------------------------------------------------------------------

def _box(ranges: Sequence[tuple[int, int]]) -> tuple[slice, ...]:
    return tuple(slice(a, b) for a, b in ranges)


class Exchange:
    """The halos of a set of padded fields, each ``widths[i]`` cells deep (0: not exchanged). Packed (the
    default): one message per neighbour holding every field's region, in buffers allocated once; ``per_face``:
    one message per neighbour and field (tag ``offset index + field index * number of offsets``), sent from and
    received into the padded field itself where the region is contiguous, through a buffer where it is not.
    :meth:`post` packs and posts, :meth:`finish` waits and unpacks."""

    def __init__(self, grid: ProcessGrid, block: tuple[int, ...], widths: Sequence[int], *, dtype: torch.dtype,
                 device: torch.device, per_face: bool = False) -> None:
        self.grid, self.block, self.widths = grid, block, tuple(widths)
        self.split = len(grid.procs)
        self.per_face = per_face
        self.offsets = neighbour_offsets(self.split)
        self.tag = {o: i for i, o in enumerate(self.offsets)}
        self.local: list[tuple[tuple, int]] = []
        self.sends: list[tuple[torch.Tensor, int, int, tuple]] = []
        self.recvs: list[tuple[torch.Tensor, int, int, tuple]] = []
        self.peers: list[tuple[tuple, int]] = []
        self.face_buffers: dict[tuple, torch.Tensor] = {}
        if not any(self.widths):
            return
        for o in self.offsets:
            peer = grid.peer(o)
            if peer is None:
                continue  # outside a fixed boundary: the halo stays zero
            if peer == grid.rank:
                self.local.append((o, peer))
                continue
            self.peers.append((o, peer))
            if per_face:
                continue  # regions are views of the padded fields, formed at each post
            n = sum(self._points(o, w) for w in self.widths if w)
            # the message along o goes to peer(o); the one that fills my halo on side o comes from peer(o)
            self.sends.append((torch.empty(n, dtype=dtype, device=device), peer, self.tag[o], o))
            back = tuple(-x for x in o)
            self.recvs.append((torch.empty(n, dtype=dtype, device=device), peer, self.tag[back], o))
        self._dtype, self._device = dtype, device
        self._unbuffer: list[tuple[torch.Tensor, torch.Tensor]] = []

    def _points(self, o, w) -> int:
        return math.prod(w if x else b for x, b in zip(o, self.block)) * math.prod(self.block[self.split:])

    def _inner(self, o, w) -> tuple[slice, ...]:
        """The cells of a block padded by ``w`` that a neighbour along ``o`` needs (its halo)."""
        rng = [(w, w + w) if x < 0 else (b, b + w) if x > 0 else (w, w + b) for x, b in zip(o, self.block)]
        return _box(rng)

    def _halo(self, o, w) -> tuple[slice, ...]:
        """The halo cells on side ``o`` of a block padded by ``w``."""
        rng = [(0, w) if x < 0 else (w + b, w + b + w) if x > 0 else (w, w + b) for x, b in zip(o, self.block)]
        return _box(rng)

    def _pack(self, buf: torch.Tensor, padded: Sequence[torch.Tensor], o, where) -> None:
        at = 0
        for t, w in zip(padded, self.widths):
            if not w:
                continue
            region = t[where(o, w)]
            n = region.numel()
            buf[at:at + n].view(region.shape).copy_(region)
            at += n

    def _unpack(self, buf: torch.Tensor, padded: Sequence[torch.Tensor], o) -> None:
        at = 0
        for t, w in zip(padded, self.widths):
            if not w:
                continue
            region = t[self._halo(o, w)]
            n = region.numel()
            region.copy_(buf[at:at + n].view(region.shape))
            at += n

    def _face_buffer(self, key: tuple, region: torch.Tensor) -> torch.Tensor:
        buf = self.face_buffers.get(key)
        if buf is None:
            buf = self.face_buffers[key] = torch.empty(region.shape, dtype=self._dtype, device=self._device)
        return buf

    def _faces(self, padded: Sequence[torch.Tensor]) -> tuple[list, list]:
        """``per_face``: every (neighbour, field) message, a view where the region is contiguous."""
        sends, recvs, self._unbuffer = [], [], []
        count = len(self.offsets)
        for i, (t, w) in enumerate(zip(padded, self.widths)):
            if not w:
                continue
            for o, peer in self.peers:
                back = tuple(-x for x in o)
                out = t[self._inner(o, w)]
                if not out.is_contiguous():
                    out = self._face_buffer(("send", i, o), out).copy_(out)
                sends.append((out, peer, self.tag[o] + i * count))
                into = t[self._halo(o, w)]
                if not into.is_contiguous():
                    buf = self._face_buffer(("recv", i, o), into)
                    self._unbuffer.append((into, buf))
                    into = buf
                recvs.append((into, peer, self.tag[back] + i * count))
        return sends, recvs

    def post(self, padded: Sequence[torch.Tensor], transport) -> Pending:
        """Pack the sends, copy the local halos (a neighbour that is this rank), post every message."""
        for o, _ in self.local:  # my halo on side o is my own inner region on the opposite side
            back = tuple(-x for x in o)
            for t, w in zip(padded, self.widths):
                if w:
                    t[self._halo(o, w)].copy_(t[self._inner(back, w)])
        if self.per_face:
            sends, recvs = self._faces(padded)
            return transport.post(sends, recvs)
        for buf, _, _, o in self.sends:
            self._pack(buf, padded, o, self._inner)
        return transport.post([(b, p, tag) for b, p, tag, _ in self.sends],
                              [(b, p, tag) for b, p, tag, _ in self.recvs])

    def finish(self, padded: Sequence[torch.Tensor], pending: Pending) -> None:
        pending.wait()
        if self.per_face:
            for into, buf in self._unbuffer:
                into.copy_(buf)
            return
        for buf, _, _, o in self.recvs:
            self._unpack(buf, padded, o)


# -- the executors ---------------------------------------------------------------------------------------

@dataclass
class _Call:
    """One call's state: roles, the block, the process grid, the step function and the transport."""

    tensors: list
    roles: list
    step_fn: Callable
    radius: int
    grid: ProcessGrid
    steps: int
    transport: object
    per_face: bool = False

    @property
    def block(self) -> tuple[int, ...]:
        return tuple(self.tensors[0].shape)

    @property
    def split(self) -> int:
        return len(self.grid.procs)

    def padded_shape(self, w: int) -> list[int]:
        return [b + 2 * w if d < self.split else b for d, b in enumerate(self.block)]

    def out_index(self) -> list[int]:
        return [i for i, role in enumerate(self.roles) if role != "static"]


def _region(split: int, ranges: Sequence[tuple[int, int]], shift: int, grow: int) -> tuple[slice, ...]:
    """Slices of block-coordinate ``ranges`` (split dims) shifted by ``shift`` and grown by ``grow`` each side."""
    return tuple(slice(a + shift - grow, b + shift + grow) for a, b in ranges[:split])


def _shell_boxes(block: tuple[int, ...], split: int, r: int) -> tuple[list, list]:
    """``(interior, shell)``: the interior box (cells ``r`` or more from every split side) and the boundary
    shell as disjoint boxes (per split dim ``d``: its low and high slabs, dims before ``d`` interior only)."""
    lo = [min(r, b) for b in block[:split]]
    hi = [max(low, b - r) for low, b in zip(lo, block[:split])]
    interior = list(zip(lo, hi))
    shell = []
    for d in range(split):
        for a, b in ((0, lo[d]), (hi[d], block[d])):
            if b <= a:
                continue
            box = [interior[e] if e < d else (a, b) if e == d else (0, block[e]) for e in range(split)]
            if all(y > x for x, y in box):
                shell.append(box)
    return interior, shell


def _compute(call: _Call, padded: list, w: int, box: list, outs: list) -> None:
    """``step_fn`` on ``box`` (block coordinates of split dims) of fields padded by ``w``; write ``outs``."""
    r = call.radius
    inputs = []
    for t, role in zip(padded, call.roles):
        inputs.append(t[_region(call.split, box, w, r)] if role == "exchanged" else t[_region(call.split, box, 0, 0)])
    shape = [b - a for a, b in box] + list(call.block[call.split:])
    got = call_step(call.step_fn, tuple(inputs), [shape] * len(outs))
    for out, value, role in zip(outs, got, [call.roles[i] for i in call.out_index()]):
        shift = w if role == "exchanged" else 0
        out[_region(call.split, box, shift, 0)].copy_(value)


def _buffers(call: _Call, w: int) -> list:
    """Padded buffers (width ``w``) for exchanged fields, block buffers for the others, holding the fields."""
    out = []
    for t, role in zip(call.tensors, call.roles):
        if role == "exchanged":
            buf = t.new_zeros(call.padded_shape(w))
            buf[_region(call.split, [(0, b) for b in call.block], w, 0)].copy_(t)
            out.append(buf)
        else:
            out.append(t.clone() if role == "carried" else t)
    return out


def _run_steps(call: _Call, *, overlap: bool) -> list:
    """``sequential`` (``overlap=False``) and ``overlap``: one exchange ``radius`` wide per step."""
    r = call.radius
    widths = [r if role == "exchanged" else 0 for role in call.roles]
    exchange = Exchange(call.grid, call.block, widths, dtype=call.tensors[0].dtype, device=call.tensors[0].device,
                        per_face=call.per_face)
    cur, nxt = _buffers(call, r), _buffers(call, r)
    full = [(0, b) for b in call.block[:call.split]]
    interior, shell = _shell_boxes(call.block, call.split, r)
    idx = call.out_index()
    for _ in range(call.steps):
        pending = exchange.post(cur, call.transport)
        outs = [nxt[i] for i in idx]
        if overlap:
            if all(b > a for a, b in interior):
                _compute(call, cur, r, interior, outs)
            exchange.finish(cur, pending)
            for box in shell:
                _compute(call, cur, r, box, outs)
        else:
            exchange.finish(cur, pending)
            _compute(call, cur, r, full, outs)
        for i in idx:
            cur[i], nxt[i] = nxt[i], cur[i]
    center = _region(call.split, full, r, 0)
    return [t[center].clone() if role == "exchanged" else t for t, role in zip(cur, call.roles)]


def _zero_outside(call: _Call, t: torch.Tensor, ext: int) -> None:
    """Zero the cells of ``t`` (a block extended by ``ext``) outside a fixed global grid."""
    if call.grid.periodic or ext == 0:
        return
    for d in range(call.split):
        if call.grid.coord[d] == 0:
            t.narrow(d, 0, ext).zero_()
        if call.grid.coord[d] == call.grid.procs[d] - 1:
            t.narrow(d, t.shape[d] - ext, ext).zero_()


def _run_deep(call: _Call, depth: int) -> list:
    """``deep_halo``: every ``depth`` steps one exchange ``depth * radius`` wide, then the steps locally."""
    r = call.radius
    tensors = list(call.tensors)
    exchanges: dict[int, Exchange] = {}
    done = 0
    while done < call.steps:
        s = min(depth, call.steps - done)
        widths = [s * r if role == "exchanged" else (s - 1) * r for role in call.roles]
        if s not in exchanges:
            exchanges[s] = Exchange(call.grid, call.block, widths, dtype=tensors[0].dtype, device=tensors[0].device,
                                    per_face=call.per_face)
        padded = []
        for t, w in zip(tensors, widths):
            buf = t.new_zeros(call.padded_shape(w))
            buf[_region(call.split, [(0, b) for b in call.block], w, 0)].copy_(t)
            padded.append(buf)
        exchanges[s].finish(padded, exchanges[s].post(padded, call.transport))
        cur = padded
        for j in range(1, s + 1):
            ext = (s - j) * r
            inputs = []
            for t, role in zip(cur, call.roles):
                have = (t.shape[0] - call.block[0]) // 2  # the cells t extends past the block per side
                want = ext + r if role == "exchanged" else ext
                trim = have - want
                inputs.append(t[tuple(slice(trim, t.shape[d] - trim) for d in range(call.split))] if trim else t)
            shape = [b + 2 * ext for b in call.block[:call.split]] + list(call.block[call.split:])
            got = call_step(call.step_fn, tuple(inputs), [shape] * len(call.out_index()))
            nxt = list(inputs)
            for i, value in zip(call.out_index(), got):
                _zero_outside(call, value, ext)
                nxt[i] = value
            cur = nxt
        tensors = [t.contiguous() if role != "static" else call.tensors[i]
                   for i, (t, role) in enumerate(zip(cur, call.roles))]
        done += s
    return tensors


def run_sequential(call: _Call, plan: Plan) -> list:
    return _run_steps(call, overlap=False)


def run_overlap(call: _Call, plan: Plan) -> list:
    return _run_steps(call, overlap=True)


def run_deep_halo(call: _Call, plan: Plan) -> list:
    return _run_deep(call, plan.chunks)


EXECUTORS = {"sequential": run_sequential, "overlap": run_overlap, "deep_halo": run_deep_halo}
for _name, _fn in EXECUTORS.items():
    register_executor(_name, HALO_KIND, _fn)
del _name, _fn


# -- checks, the site, the plan ---------------------------------------------------------------------------

def halo_site(tensors, roles, radius: int, grid: ProcessGrid, *, steps: int, boundary: str) -> HaloSite:
    block = tuple(tensors[0].shape)
    split = len(grid.procs)
    if split > len(block):
        raise ValueError(f"the process grid {grid.procs} has more dims than the blocks ({len(block)}-D)")
    global_grid = tuple(b * grid.procs[d] if d < split else b for d, b in enumerate(block))
    return HaloSite(grid=global_grid, procs=grid.procs, radius=radius, dtype=str(tensors[0].dtype),
                    boundary=boundary, fields=roles.count("exchanged"),
                    carried=len(roles) - roles.count("exchanged"), steps=steps, ranks=grid.ranks)


def _check_scalars(radius, steps, boundary) -> None:
    if not isinstance(radius, int) or isinstance(radius, bool) or radius < 1:
        raise ValueError(f"radius={radius!r} must be an int >= 1 (space order 2, 4, 8 is radius 1, 2, 4)")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps={steps!r} must be an int >= 1")
    if boundary not in BOUNDARIES:
        raise ValueError(f"boundary={boundary!r} must be one of {BOUNDARIES}")


def _check_plan(plan: Plan, site: HaloSite) -> None:
    executor_for(site.kind, plan.strategy)  # raises for a strategy without a halo executor
    if plan.strategy == "deep_halo":
        problem = halo_problem(site.grid, site.procs, site.radius, depth=plan.chunks)
        if problem:
            raise ValueError(f"plan {plan.describe()}: {problem}")


def _probe(step_fn: Callable, tensors, roles, radius: int, split: int) -> None:
    """Call ``step_fn`` once on a block of one cell per split dim (zeros) and check what it returns."""
    rest = list(tensors[0].shape[split:])
    inputs = []
    for t, role in zip(tensors, roles):
        n = 1 + 2 * radius if role == "exchanged" else 1
        inputs.append(t.new_zeros([n] * split + rest))
    call_step(step_fn, tuple(inputs), [[1] * split + rest] * (len(roles) - roles.count("static")))


def time_step_fn(step_fn: Callable, site: HaloSite, tensors, roles, *, repeats: int = 3) -> dict:
    """Milliseconds of ``step_fn`` on this block (the best of ``repeats``): the whole padded block, the
    interior, and the boundary shell's boxes together; the keys of :class:`hocket.cost.halo.HaloCompute`."""
    r, split, block = site.radius, site.split_dims, site.block
    fake = _Call(tensors=list(tensors), roles=list(roles), step_fn=step_fn, radius=r, grid=None, steps=1,
                 transport=None)
    fake.grid = ProcessGrid(procs=site.procs, ranks=site.group_ranks, coord=(0,) * split, periodic=True)
    padded = _buffers(fake, r)
    spare = _buffers(fake, r)
    outs = [spare[i] for i in fake.out_index()]
    interior, shell = _shell_boxes(block, split, r)

    def best(fn) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return min(times)

    full_ms = best(lambda: _compute(fake, padded, r, [(0, b) for b in block[:split]], outs))
    interior_ms = best(lambda: _compute(fake, padded, r, interior, outs)) if all(b > a for a, b in interior) else 0.0
    shell_ms = best(lambda: [_compute(fake, padded, r, box, outs) for box in shell])
    return {"full_ms": full_ms, "interior_ms": interior_ms, "shell_ms": shell_ms}


_TIMED: dict[tuple, dict] = {}
_AGREED: set[str] = set()
_PROBED: set[tuple] = set()
_CHOSEN: dict[tuple, Plan] = {}


def _device_of(fields) -> torch.device:
    """The device of the first field (the agreement exchanges there), CPU when there is none."""
    try:
        first = fields[0]
        return (first.tensor if isinstance(first, (Carried, Static)) else first).device
    except (TypeError, IndexError, KeyError, AttributeError):
        return torch.device("cpu")


def _choose(site: HaloSite, step_fn, tensors, roles) -> Plan:
    from hocket.cost.halo import HaloCompute
    from hocket.ops.live import process_planner
    from hocket.plan.halo import search_halo

    shape_key = (id(step_fn), site.block, site.dtype, site.radius, tuple(roles))
    if shape_key not in _TIMED:
        _TIMED[shape_key] = time_step_fn(step_fn, site, tensors, roles)
    compute = HaloCompute(**_TIMED[shape_key])
    planner = process_planner()
    return search_halo(site, planner.cluster, profile=planner.profile, compute=compute).chosen


def stencil_steps(fields, step_fn: Callable, radius: int, mesh, *, steps: int = 1, boundary: str = "fixed",
                  plan: Plan | dict | str | None = None, _transport: object = None) -> tuple:
    """Run ``steps`` stencil steps on this rank's blocks (module docstring); returns the new ``fields``."""
    group = resolve_group(dist.group.WORLD) if dist.is_available() and dist.is_initialized() else None
    if group is None:
        raise ValueError("stencil_steps: torch.distributed is not initialised; call init_process_group "
                         "(or run under torchrun) first")
    device = _device_of(fields)
    state: dict = {}

    def check() -> str:
        tensors, roles = split_fields(fields)
        _check_scalars(radius, steps, boundary)
        if not callable(step_fn):
            raise ValueError(f"step_fn={step_fn!r} must be callable")
        grid = process_grid(mesh, boundary)
        site = halo_site(tensors, roles, radius, grid, steps=steps, boundary=boundary)
        chosen = as_plan(plan)
        if chosen is not None:
            _check_plan(chosen, site)
        text = site.key + "|" + (chosen.to_json() if chosen is not None else "auto")
        if (text, id(step_fn)) not in _PROBED:  # once per site, plan and step_fn
            _probe(step_fn, tensors, roles, radius, len(grid.procs))
        state.update(tensors=tensors, roles=roles, grid=grid, site=site, key=text)
        return text

    local_error: Exception | None = None
    try:
        text = check()
    except Exception as exc:  # noqa: BLE001 - reported to every rank by settle, re-raised there
        local_error = exc
    if local_error is None and text in _AGREED and mode_in_force() != "always":
        key = text  # agreed at an earlier call (HOCKET_AGREEMENT=always checks every call)
    else:
        def checked() -> str:
            if local_error is not None:
                raise local_error
            return text
        key = settle(group, "stencil_steps", "checking the inputs", checked, device=device)
    mine = state["key"]
    _PROBED.add((mine, id(step_fn)))
    if key not in _AGREED:  # every rank must run the same site and plan
        if not all_ranks_ok(group, key == mine, device=device):
            raise ValueError(f"hocket.stencil_steps: ranks called with different sites or plans (rank 0: "
                             f"{key}; this rank: {mine}); every rank must pass blocks of one grid, the same "
                             f"radius, steps, boundary and plan")
        _AGREED.add(key)
    site, tensors, roles = state["site"], state["tensors"], state["roles"]
    chosen = as_plan(plan)
    if chosen is None:
        chosen = _CHOSEN.get((key, id(step_fn)))
        if chosen is None:  # decided on rank 0, once per site and step_fn
            chosen = Plan.from_json(settle(group, "stencil_steps", "choosing the plan",
                                           lambda: _choose(site, step_fn, tensors, roles).to_json(), device=device))
            _CHOSEN[(key, id(step_fn))] = chosen
    set_current_call(f"hocket.stencil_steps on {site.key} plan {chosen.describe()} rank {group.rank} of "
                     f"{group.world}")
    call = _Call(tensors=list(tensors), roles=list(roles), step_fn=step_fn, radius=radius, grid=state["grid"],
                 steps=steps, transport=_transport or P2PTransport(), per_face=chosen.packing == "per_face")
    out = executor_for(site.kind, chosen.strategy)(call, chosen)
    return rewrap(out, roles)

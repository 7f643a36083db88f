"""The stages of a halo-exchange stencil call (:class:`hocket.core.halo.HaloSite`), as its executors run them.

Exchange: one packed message per neighbour (:meth:`HaloSite.exchange_bytes`), priced as one P2P step of
:func:`hocket.cost.comm.ring_step` to all the busiest rank's neighbours at once (the P2P curve of the
calibration profile scales it), with a pack and an unpack pass over the halo bytes on the compute resource.

Compute: :class:`HaloCompute`, the milliseconds of ``step_fn`` on one block padded by ``radius``: the whole
block, the interior and the boundary shell (the shell's boxes are small calls, so eager per-call overhead
makes them cost more than their share of the cells). ``hocket.ops.stencil.time_step_fn`` times them once
per block shape; without a measurement :func:`estimated_compute` prices eager slice arithmetic as
``EAGER_FACTOR`` times the memory-bound bytes over bandwidth (bytes over bandwidth alone is about ten
times too optimistic for eager slice arithmetic). A deep halo's step on a block extended by ``e`` cells
per split side costs the whole block's time scaled by its cells.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hocket.core.halo import HaloSite
from hocket.cost.compute import memory_ms
from hocket.cost.stages import Stage

EAGER_FACTOR = 10.0
"""how much slower eager slice arithmetic runs than its memory-bound bytes over bandwidth (about 10x on CPU; used
only when no step_fn timing is given)."""
EAGER_CALL_US = 5.0
"""host overhead of one eager torch op on CPU (a shell box runs every tap as its own op)."""
COMPUTE_KEY = ("halo_compute",)
"""where a builder's :class:`HaloCompute` is kept (``StageBuilder.memo``)."""


@dataclass(frozen=True, kw_only=True)
class HaloCompute:
    """``step_fn``'s milliseconds on one block (module docstring)."""

    full_ms: float
    interior_ms: float
    shell_ms: float

    def __post_init__(self) -> None:
        for name in ("full_ms", "interior_ms", "shell_ms"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"HaloCompute.{name}={value!r} must be a finite number of ms >= 0")


def _points(site: HaloSite, ext: int) -> int:
    return math.prod(b + 2 * ext if d < site.split_dims else b for d, b in enumerate(site.block))


def estimated_compute(site: HaloSite, device) -> HaloCompute:
    """A :class:`HaloCompute` without ``step_fn``: a ``2 * radius``-order star stencil over every grid dim
    per exchanged field, each tap an eager op reading its operand and the accumulator and writing it."""
    taps = 2 * site.radius * len(site.grid) + 1
    per_point = 3 * taps * site.fields * site.itemsize

    def ms(points: int, calls: int) -> float:
        return EAGER_FACTOR * memory_ms(device, points * per_point) + calls * taps * EAGER_CALL_US / 1e3

    block = site.block
    interior = math.prod(max(0, b - 2 * site.radius) if d < site.split_dims else b for d, b in enumerate(block))
    boxes = 2 * site.split_dims
    return HaloCompute(full_ms=ms(site.block_points, 1), interior_ms=ms(interior, 1),
                       shell_ms=ms(site.block_points - interior, boxes))


def compute_of(b) -> HaloCompute:
    """The builder's :class:`HaloCompute` (set by :func:`with_compute`), else :func:`estimated_compute`."""
    found = b.memo.get(COMPUTE_KEY)
    return found if found is not None else estimated_compute(b.site, b.device)


def with_compute(b, compute: HaloCompute | None):
    if compute is not None:
        b.memo[COMPUTE_KEY] = compute
    return b


def add_compute(b, name: str, ms: float, *, deps=(), piece: int = 0) -> int:
    return b.add(Stage(name=name, resource="compute", duration_ms=ms, depends_on=tuple(deps), piece=piece,
                       op="stencil"), issue=(("launch", 1),))


def _contiguous_bytes(site: HaloSite, width: int, fields: int) -> float:
    """Bytes of the messages a ``per_face`` exchange sends straight from the padded fields (no pack copy): the
    faces of a 1-D process grid (dim 0 is outermost, so its slabs are contiguous), none on 2-D or 3-D grids."""
    if site.split_dims != 1:
        return 0.0
    return float(sum(site.exchange_bytes(width, fields)))


def post_exchange(b, width: int, *, fields: int, carried_width: int = 0, deps=(), piece: int = 0
                  ) -> tuple[int, float]:
    """Pack and the P2P exchange: ``(exchange stage, bytes)``; ``(-1, 0)`` with no message (a single rank,
    or every neighbour outside a fixed grid or the rank itself). Packed (``Plan.packing`` None): one message per
    neighbour, every byte packed and unpacked once. ``per_face``: one message per neighbour and field (more
    calls, each smaller), only the non-contiguous regions copied."""
    site = b.site
    sizes = site.exchange_bytes(width, fields)
    copied_share = 1.0
    messages_per_peer = 1
    if carried_width and site.carried:
        sizes = tuple(a + c for a, c in zip(sizes, site.exchange_bytes(carried_width, site.carried)))
    total = float(sum(sizes))
    if not sizes or total == 0:
        return -1, 0.0
    if b.plan.packing == "per_face":
        messages_per_peer = fields + (site.carried if carried_width else 0)
        straight = _contiguous_bytes(site, width, fields) + (
            _contiguous_bytes(site, carried_width, site.carried) if carried_width and site.carried else 0.0)
        copied_share = max(0.0, 1.0 - straight / total)
    deps = tuple(deps)
    if copied_share > 0:
        deps = (b.add_memory(f"pack[{piece}]", 2 * total * copied_share, deps=deps, piece=piece, op="pack"),)
    peers = len(sizes) * messages_per_peer
    transfer = b.ring_step(total / peers, peers=peers)
    x = b.add_transfer(f"halo[{piece}]", transfer, deps=deps, piece=piece, op="send_recv", nbytes=total)
    return x, total * copied_share


def finish_exchange(b, posted: tuple[int, float], *, deps=(), piece: int = 0) -> int:
    """The wait and the unpack of :func:`post_exchange`'s exchange (-1 with none)."""
    x, total = posted
    if x < 0:
        return -1
    if total == 0:  # per_face with every region contiguous: received in place, nothing to unpack
        return x
    return b.add_memory(f"unpack[{piece}]", 2 * total, deps=(x, *deps), piece=piece, op="unpack")


def deep_step_ms(site: HaloSite, compute: HaloCompute, ext: int) -> float:
    """One step on the block extended by ``ext`` cells per split side."""
    return compute.full_ms * _points(site, ext) / site.block_points


def _deps(*items: int) -> tuple[int, ...]:
    return tuple(i for i in items if i >= 0)


def sequential_stages(b) -> None:
    """Per step: pack, exchange, unpack, then ``step_fn`` on the padded block."""
    site, compute = b.site, compute_of(b)
    last = -1
    for step in range(site.steps):
        posted = post_exchange(b, site.radius, fields=site.fields, deps=_deps(last), piece=step)
        unpack = finish_exchange(b, posted, deps=_deps(last), piece=step)
        last = add_compute(b, f"step[{step}]", compute.full_ms, deps=_deps(unpack, last), piece=step)


def overlap_stages(b) -> None:
    """Per step: pack, post the exchange, the interior beside it, then unpack and the shell."""
    site, compute = b.site, compute_of(b)
    last = -1
    for step in range(site.steps):
        posted = post_exchange(b, site.radius, fields=site.fields, deps=_deps(last), piece=step)
        inner = add_compute(b, f"interior[{step}]", compute.interior_ms, deps=_deps(last), piece=step)
        unpack = finish_exchange(b, posted, deps=(inner,), piece=step)
        last = add_compute(b, f"shell[{step}]", compute.shell_ms, deps=_deps(unpack, inner), piece=step)


def deep_halo_stages(b) -> None:
    """Every ``s = plan.chunks`` steps: one exchange ``s * radius`` wide (carried ``(s - 1) * radius``), then
    ``s`` steps on blocks extended by ``(s - j) * radius``."""
    site, compute = b.site, compute_of(b)
    depth = b.plan.chunks
    last, done, piece = -1, 0, 0
    while done < site.steps:
        s = min(depth, site.steps - done)
        posted = post_exchange(b, s * site.radius, fields=site.fields, carried_width=(s - 1) * site.radius,
                               deps=_deps(last), piece=piece)
        last = max(last, finish_exchange(b, posted, deps=_deps(last), piece=piece))
        for j in range(1, s + 1):
            last = add_compute(b, f"step[{done + j - 1}]", deep_step_ms(site, compute, (s - j) * site.radius),
                               deps=_deps(last), piece=piece)
        done += s
        piece += 1

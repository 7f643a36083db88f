"""HaloSite: one halo-exchange stencil call (``hocket.ops.stencil_steps``) and everything needed to price it.

The matrix kinds' m/k/n do not describe a stencil, so a halo site has its own fields: the global ``grid``,
the process grid ``procs`` (``len(procs) <= len(grid)``; mesh dim ``d`` splits grid dim ``d``), the stencil
radius ``radius`` (space order ``2 * radius``: orders 2/4/8 are radii 1/2/4), the ``dtype``, the
``boundary`` (``fixed``: cells outside the grid read as zero; ``periodic``: they wrap), how many fields are
exchanged per step (``fields``), how many more travel with them without an exchange (``carried``: a
previous time level or a static coefficient; only ``deep_halo`` exchanges them, ``(s - 1) * radius``
wide) and the ``steps`` per call. The per-rank block is ``grid[d] // procs[d]`` on split dims (an uneven
split is refused) and ``grid[d]`` elsewhere.

Neighbours: every offset of ``{-1, 0, 1}`` per split dim but all zeros (2 per dim for a 1-D process grid,
8 for a 2-D one: faces, and corners for 2-D / edges for 3-D blocks). With ``fixed`` a neighbour outside
the process grid does not exist (its halo is zeros); with ``periodic`` it wraps, and a neighbour that is
the rank itself (a periodic axis of size 1) is a local copy, not a message.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import asdict, dataclass, field

from hocket.core.site import DTYPE_BYTES, canonical_dtype

HALO_KIND = "halo"
BOUNDARIES = ("fixed", "periodic")
HALO_SITE_VERSION = 1


def neighbour_offsets(ndim: int) -> tuple[tuple[int, ...], ...]:
    """Every offset in ``{-1, 0, 1}^ndim`` but the zero offset, in a fixed order (its index is the P2P tag
    of the message that travels along it)."""
    return tuple(o for o in itertools.product((-1, 0, 1), repeat=ndim) if any(o))


def _positive_ints(name: str, value: object) -> tuple[int, ...]:
    try:
        if isinstance(value, (str, bytes)):
            raise TypeError
        values = tuple(value)
    except TypeError:
        raise ValueError(f"HaloSite.{name}={value!r} must be a tuple of positive ints") from None
    if not values or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
        raise ValueError(f"HaloSite.{name}={value!r} must be a non-empty tuple of positive ints")
    return values


def _ranks(ranks: object) -> tuple[int, ...]:
    try:
        if isinstance(ranks, (str, bytes)):
            raise TypeError
        values = tuple(ranks)
    except TypeError:
        values = None
    if values is None or any(not isinstance(r, int) or isinstance(r, bool) or r < 0 for r in values):
        raise ValueError(f"HaloSite.ranks={ranks!r} must be global ranks (ints >= 0), one per process-grid cell")
    return values


def halo_problem(grid: tuple[int, ...], procs: tuple[int, ...], radius: int, *, depth: int = 1) -> str | None:
    """Why ``grid`` cannot run over ``procs`` with halo ``depth * radius``, or None.

    Rules: ``1 <= len(procs) <= len(grid)``; every split dim divides evenly (uneven blocks are refused, not
    padded); ``radius >= 1``; the halo ``depth * radius`` is at most the block on every split dim where a
    neighbour exists (a rank reads only its direct neighbours)."""
    if not isinstance(radius, int) or isinstance(radius, bool) or radius < 1:
        return f"radius={radius!r} must be an int >= 1 (space order 2, 4, 8 is radius 1, 2, 4)"
    if len(procs) > len(grid):
        return f"the process grid {tuple(procs)} has more dims than the grid {tuple(grid)}"
    for d, (n, p) in enumerate(zip(grid, procs)):
        if n % p:
            return (f"grid dim {d} ({n} cells) does not divide over {p} ranks of process-grid dim {d}; "
                    f"uneven blocks are not supported: pick a grid that {p} divides")
        block = n // p
        if depth * radius > block:
            wide = f"a deep halo {depth} x {radius} = {depth * radius}" if depth > 1 else f"the halo {radius}"
            return (f"{wide} is wider than a rank's block ({block} cells on grid dim {d}); a rank reads only its "
                    f"direct neighbours: use fewer ranks on dim {d} or a smaller radius")
    return None


@dataclass(frozen=True, kw_only=True)
class HaloSite:
    """One ``stencil_steps`` call (module docstring). ``key`` is stable: caches key decisions by it."""

    grid: tuple[int, ...]
    procs: tuple[int, ...]
    radius: int
    dtype: str = "float32"
    boundary: str = "fixed"
    fields: int = 1
    """fields exchanged every step."""
    carried: int = 0
    """fields passed unexchanged (previous time levels, static coefficients)."""
    steps: int = 1
    ranks: tuple[int, ...] = ()
    """global ranks of the process grid in row-major order; empty means ``range(world)``."""
    count: int = 1
    name: str = ""
    version: int = field(default=HALO_SITE_VERSION)

    kind = HALO_KIND

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", _positive_ints("grid", self.grid))
        object.__setattr__(self, "procs", _positive_ints("procs", self.procs))
        problem = halo_problem(self.grid, self.procs, self.radius)
        if problem:
            raise ValueError(f"HaloSite: {problem}")
        if self.boundary not in BOUNDARIES:
            raise ValueError(f"HaloSite.boundary={self.boundary!r} must be one of {BOUNDARIES}")
        for attr, least in (("fields", 1), ("carried", 0), ("steps", 1), ("count", 1)):
            value = getattr(self, attr)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"HaloSite.{attr}={value!r} must be an int >= {least}")
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        object.__setattr__(self, "ranks", _ranks(self.ranks))
        if self.ranks and len(self.ranks) != self.world:
            raise ValueError(f"HaloSite.ranks has {len(self.ranks)} entries but the process grid "
                             f"{self.procs} holds {self.world} ranks")

    # -- derived quantities -------------------------------------------------
    @property
    def world(self) -> int:
        return math.prod(self.procs)

    @property
    def group_ranks(self) -> tuple[int, ...]:
        return self.ranks or tuple(range(self.world))

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def split_dims(self) -> int:
        return len(self.procs)

    @property
    def block(self) -> tuple[int, ...]:
        """One rank's block: ``grid[d] // procs[d]`` on split dims, ``grid[d]`` elsewhere."""
        return tuple(n // self.procs[d] if d < self.split_dims else n for d, n in enumerate(self.grid))

    @property
    def block_points(self) -> int:
        return math.prod(self.block)

    def max_depth(self) -> int:
        """The widest deep halo (in multiples of ``radius``) the blocks allow (at least 1)."""
        return max(1, min(b // self.radius for b in self.block[:self.split_dims]))

    def region_points(self, offset: tuple[int, ...], width: int) -> int:
        """Cells of the halo region along ``offset`` (one entry per split dim) ``width`` cells deep."""
        extent = [width if o else b for o, b in zip(offset, self.block)] + list(self.block[self.split_dims:])
        return math.prod(extent)

    def messages(self) -> tuple[tuple[int, ...], ...]:
        """The offsets the busiest rank sends along (coordinate 1 on axes of 3 or more ranks, else 0): a
        neighbour outside a fixed boundary does not exist, one that is the rank itself (a periodic axis of
        size 1) is a local copy, not a message."""
        coord = tuple(1 if p >= 3 else 0 for p in self.procs)
        out = []
        for offset in neighbour_offsets(self.split_dims):
            peer = []
            for o, c, p in zip(offset, coord, self.procs):
                q = c + o
                if self.boundary == "fixed" and not 0 <= q < p:
                    break
                peer.append(q % p)
            else:
                if tuple(peer) != coord:
                    out.append(offset)
        return tuple(out)

    def exchange_bytes(self, width: int, fields: int | None = None) -> tuple[int, ...]:
        """Bytes of each message of one exchange ``width`` cells deep (all ``fields`` packed per neighbour)."""
        fields = self.fields if fields is None else fields
        return tuple(self.region_points(o, width) * fields * self.itemsize for o in self.messages())

    @property
    def key(self) -> str:
        payload = {"kind": self.kind, "grid": list(self.grid), "procs": list(self.procs), "r": self.radius,
                   "dtype": self.dtype, "boundary": self.boundary, "fields": self.fields,
                   "carried": self.carried, "steps": self.steps, "ranks": list(self.group_ranks), "v": self.version}
        digest = hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]
        grid = "x".join(map(str, self.grid))
        procs = "x".join(map(str, self.procs))
        return f"halo:{grid}/{procs}:r{self.radius}:{self.dtype}:{self.boundary}:s{self.steps}:{digest}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["grid"], d["procs"], d["ranks"] = list(self.grid), list(self.procs), list(self.ranks)
        d["kind"] = self.kind
        return d

    @classmethod
    def from_dict(cls, data: dict) -> HaloSite:
        if not isinstance(data, dict):
            raise TypeError(f"a HaloSite dict was expected, got {type(data).__name__}: {data!r:.80}")
        data = dict(data)
        kind = data.pop("kind", HALO_KIND)
        if kind != HALO_KIND:
            raise ValueError(f"HaloSite dict has kind={kind!r}; expected {HALO_KIND!r}")
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"HaloSite fields {sorted(unknown)} are unknown; known fields: {sorted(known)}")
        for name in ("grid", "procs", "ranks"):
            if isinstance(data.get(name), list):
                data[name] = tuple(data[name])
        return cls(**data)

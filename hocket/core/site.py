"""Site: one communication+compute pair and everything needed to cost it.

Shape convention (DESIGN.md section 2), per-rank operands, world size ``w``:

* ``ag_mm``: ``A_shard [m/w, k]``, ``B [k, n]``, output ``[m, n]`` (``m`` = rows after the gather);
* ``mm_rs``: ``A [m, k]``, ``B [k, n]`` (``k`` local), output ``[m/w, n]``;
* ``mm_ar``: ``A [m, k]``, ``B [k, n]`` (``k`` local), output ``[m, n]``.

Always m, k, n in that order. Leading batch dims fold into ``m``.

Uneven shards (``Site.shard_rows``, empty = even): the size of each rank's shard of the sharded
dimension, in group-rank order. ``ag_mm`` and ``mm_rs``: rows of the canonical 2-D matrix (the gather or
scatter dim times the other leading dims), summing to ``m``; along the last dim (``dim=-1``) columns,
summing to ``k`` (``ag_mm``: K gathered) or ``n`` (``mm_rs``: N scattered). ``mm_ar``: each rank's local
``k``, whose largest is ``Site.k`` (the slowest rank's GEMM). Zeros are allowed, one positive entry is
required; equal entries are stored as ``()`` (the even site, same key).
"""

from __future__ import annotations

import hashlib
import json
import operator
from dataclasses import asdict, dataclass, field

SITE_VERSION = 1

SITE_KINDS = ("ag_mm", "mm_rs", "mm_ar", "a2a_mm", "mm_a2a", "h2d_mm", "mm_d2h", "halo")
"""``h2d_mm``: ``A [m, k]`` arrives from pinned host memory, then ``@ B``; ``mm_d2h``: ``A @ B``
goes to pinned host memory (single-device offload, ``world=1``; hocket.ops.offload). ``halo``: a halo-exchange
stencil, described by :class:`hocket.core.halo.HaloSite` (no m/k/n), not by a Site."""
DIRECTIONS = ("forward", "backward")

_DTYPE_ALIASES = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "torch.bfloat16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "float16": "float16",
    "torch.float16": "float16",
    "fp32": "float32",
    "float": "float32",
    "float32": "float32",
    "torch.float32": "float32",
    "fp8": "float8_e4m3fn",
    "float8_e4m3fn": "float8_e4m3fn",
    "torch.float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
    "torch.float8_e5m2": "float8_e5m2",
    "fp64": "float64",
    "float64": "float64",
    "torch.float64": "float64",
}

DTYPE_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "float64": 8,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


def _global_ranks(ranks: object) -> tuple[int, ...]:
    """``Site.ranks`` as a tuple of ints, refused with the value when it is not a sequence of ranks >= 0."""
    try:
        if isinstance(ranks, (str, bytes)) or any(isinstance(r, bool) for r in ranks):
            raise TypeError
        values = tuple(operator.index(r) for r in ranks)
    except TypeError:
        raise ValueError(f"Site.ranks={ranks!r} must be global ranks (ints >= 0), one per group member") from None
    if any(r < 0 for r in values):
        raise ValueError(f"Site.ranks={ranks!r} must be global ranks (ints >= 0), one per group member")
    return values


def canonical_dtype(dtype: object) -> str:
    """Return hocket's dtype name ("bfloat16", "float32", ...) for a torch dtype or alias."""
    name = str(dtype)
    try:
        return _DTYPE_ALIASES[name]
    except KeyError:
        raise ValueError(
            f"dtype={dtype!r} is not supported; use one of {sorted(set(_DTYPE_ALIASES.values()))} "
            f"(aliases: bf16, fp16, fp32, fp8)"
        ) from None


@dataclass(frozen=True, kw_only=True)
class Site:
    """One communication+compute pair, in per-rank shapes (see module docstring)."""

    kind: str
    m: int
    k: int
    n: int
    dtype: str = "bfloat16"
    world: int = 2
    num_b: int = 1
    dim: int = 0
    """gather dim (``ag_mm``) or scatter dim (``mm_rs``) of the operator call."""
    ranks: tuple[int, ...] = ()
    """global ranks of the group; empty means ``range(world)``."""
    direction: str = "forward"
    count: int = 1
    """how many times this site occurs per training step."""
    name: str = ""
    version: int = field(default=SITE_VERSION)
    shard_rows: tuple[int, ...] = ()
    """per-rank sizes of the sharded dimension, group-rank order (module docstring); empty = even."""

    def __post_init__(self) -> None:
        if self.kind not in SITE_KINDS:
            raise ValueError(f"Site.kind={self.kind!r} is unknown; use one of {SITE_KINDS}")
        if self.kind == "halo":
            raise ValueError("Site.kind='halo' has no m/k/n: a halo-exchange stencil is a hocket.core.halo.HaloSite")
        for attr in ("m", "k", "n", "world", "num_b", "count"):
            value = getattr(self, attr)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Site.{attr}={value!r} must be a positive int (per-rank shapes, m k n order)")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"Site.direction={self.direction!r} must be one of {DIRECTIONS}")
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        object.__setattr__(self, "ranks", _global_ranks(self.ranks))
        if self.ranks and len(self.ranks) != self.world:
            raise ValueError(
                f"Site.ranks has {len(self.ranks)} entries but world={self.world}; give one global rank per member"
            )
        object.__setattr__(self, "shard_rows", _shard_rows(self))

    @property
    def uneven(self) -> bool:
        """Whether the ranks' shards differ in size (``shard_rows`` non-empty)."""
        return bool(self.shard_rows)

    @property
    def sharded_total(self) -> int:
        """The extent ``shard_rows`` splits: ``m``, or ``k`` / ``n`` along the last dim (``mm_ar``: ``k``)."""
        return sharded_extent(self.kind, self.dim, self.m, self.k, self.n)

    @property
    def max_shard(self) -> int:
        """The largest rank's shard (the even share, rounded up, for an even site)."""
        if self.shard_rows:
            return max(self.shard_rows)
        total = self.sharded_total
        return total if self.kind == "mm_ar" else -(-total // self.world)

    # -- derived quantities -------------------------------------------------
    @property
    def group_ranks(self) -> tuple[int, ...]:
        return self.ranks or tuple(range(self.world))

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def flops(self) -> int:
        """Matmul FLOPs one rank performs (2*m*k*n per B matrix)."""
        return 2 * self.m * self.k * self.n * self.num_b

    @property
    def comm_bytes(self) -> int:
        """Bytes of the collective's full per-rank buffer (gathered A or the un-scattered output)."""
        if self.kind in ("ag_mm", "h2d_mm"):
            return self.m * self.k * self.itemsize
        return self.m * self.n * self.num_b * self.itemsize

    @property
    def key(self) -> str:
        """Stable identity used by caches: everything that changes the best plan, nothing else."""
        payload = {
            "kind": self.kind, "m": self.m, "k": self.k, "n": self.n, "dtype": self.dtype,
            "world": self.world, "num_b": self.num_b, "dim": self.dim,
            "ranks": list(self.group_ranks), "direction": self.direction, "v": self.version,
        }
        if self.shard_rows:  # even sites keep the key they always had
            payload["shard_rows"] = list(self.shard_rows)
        digest = hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]
        shards = f":rows{'-'.join(map(str, self.shard_rows))}" if self.shard_rows else ""
        return f"{self.kind}:{self.m}x{self.k}x{self.n}:{self.dtype}:w{self.world}{shards}:{self.direction}:{digest}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ranks"] = list(self.ranks)
        if self.shard_rows:
            d["shard_rows"] = list(self.shard_rows)
        else:  # even sites keep the dict (and JSON) they always had
            del d["shard_rows"]
        return d

    @classmethod
    def from_dict(cls, data: dict) -> Site:
        if not isinstance(data, dict):
            raise TypeError(f"a Site dict was expected, got {type(data).__name__}: {data!r:.80}")
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"Site fields {sorted(unknown)} are unknown; known fields: {sorted(known)}")
        data = dict(data)
        if isinstance(data.get("ranks"), list):
            data["ranks"] = tuple(data["ranks"])
        if isinstance(data.get("shard_rows"), list):
            data["shard_rows"] = tuple(data["shard_rows"])
        return cls(**data)

    def backward_sites(self) -> tuple[Site, ...]:
        """The Sites the backward of this operator runs (shapes swap, so plans differ).

        ag_mm forward (A_shard[m/w,k] gathered, @ each of num_b B[k,n]) has input gradient
        ``dA_shard = reduce_scatter(sum_i dC_i @ B_i^T)``: an ``mm_rs`` with (m, k=n*num_b, n=k).
        mm_rs forward (A[m,k] @ B[k,n], scattered rows) has input gradient
        ``dA = all_gather(dC_shard) @ B^T``: an ``ag_mm`` with (m, k=n, n=k).
        mm_ar's input gradient is another all-reduce-free matmul (the gradient of an
        all-reduced sum is replicated), so it has no communicating backward site.
        """
        common = dict(dtype=self.dtype, world=self.world, ranks=self.ranks, direction="backward",
                      count=self.count, name=f"{self.name}.grad_input" if self.name else "")
        if self.shard_rows and self.kind in ("ag_mm", "mm_rs"):  # the gradient is sharded as the operand was
            common.update(shard_rows=self.shard_rows, dim=self.dim)
        if self.kind == "ag_mm":
            # sum_i dC_i @ B_i^T is one matmul over the concatenated widths: k = n * num_b
            return (Site(kind="mm_rs", m=self.m, k=self.n * self.num_b, n=self.k, **common),)
        if self.kind == "mm_rs":
            return (Site(kind="ag_mm", m=self.m, k=self.n, n=self.k, **common),)
        return ()


UNEVEN_KINDS = ("ag_mm", "mm_rs", "mm_ar")
"""the kinds whose shards may differ in size (``Site.shard_rows``)."""


def sharded_extent(kind: str, dim: int, m: int, k: int, n: int) -> int:
    """The extent a site's shards split: ``m`` rows, or along the last dim K (``ag_mm``) or N (``mm_rs``);
    ``mm_ar``: the local ``k``."""
    if kind == "mm_ar":
        return k
    if dim == -1:
        return k if kind == "ag_mm" else n
    return m


def _shard_rows(site: Site) -> tuple[int, ...]:
    """``site.shard_rows`` checked (one int >= 0 per rank, adding up to the sharded extent), ``()`` when even."""
    raw = site.shard_rows
    if raw is None or (isinstance(raw, (tuple, list)) and len(raw) == 0):
        return ()
    try:
        if isinstance(raw, (str, bytes)) or any(isinstance(r, bool) for r in raw):
            raise TypeError
        sizes = tuple(operator.index(r) for r in raw)
    except TypeError:
        raise ValueError(f"Site.shard_rows={raw!r} must be ints >= 0, one per rank (or empty for even shards)"
                         ) from None
    if site.kind not in UNEVEN_KINDS:
        raise ValueError(f"Site.shard_rows={sizes!r}: kind {site.kind!r} has no uneven shards; "
                         f"only {UNEVEN_KINDS} do (leave it empty)")
    if len(sizes) != site.world:
        raise ValueError(f"Site.shard_rows={sizes!r} has {len(sizes)} entries but world={site.world}; "
                         f"give one size per rank")
    if any(r < 0 for r in sizes):
        raise ValueError(f"Site.shard_rows={sizes!r} has a negative size; every rank holds >= 0 rows")
    extent = sharded_extent(site.kind, site.dim, site.m, site.k, site.n)
    if site.kind == "mm_ar":
        if max(sizes) != extent:
            raise ValueError(f"Site.shard_rows={sizes!r}: an mm_ar site's k ({extent}) is its largest local k; "
                             f"set k={max(sizes)}")
    elif sum(sizes) != extent:
        what = {"ag_mm": "k", "mm_rs": "n"}[site.kind] if site.dim == -1 else "m"
        raise ValueError(f"Site.shard_rows={sizes!r} adds up to {sum(sizes)} but {what}={extent}; the shards "
                         f"must add up to the sharded extent")
    if len(set(sizes)) == 1:
        return ()
    return sizes

"""MoeSite: one expert-parallel MoE call (``hocket.ops.moe_experts``) and everything needed to price it.

Expert parallelism (EP) over ``world`` ranks: ``experts`` routed experts, ``experts // world`` on each rank
(experts ``r * e_local ... (r + 1) * e_local - 1`` live on rank ``r``). Every rank holds ``tokens`` tokens
of width ``hidden``; the router sends each token to ``topk`` distinct experts. The two sites of one layer:

* ``a2a_mm``: dispatch (all-to-all of the routed rows, ``hidden`` wide) + the first grouped GEMM
  (``[rows, hidden] @ w_gate_up[e] -> [rows, 2 * ffn]``);
* ``mm_a2a``: the second grouped GEMM (``[rows, ffn] @ w_down[e] -> [rows, hidden]``) + combine
  (the all-to-all back, ``hidden`` wide).

Routing is data: ``counts[r][e]`` is how many of rank ``r``'s tokens chose expert ``e`` (``world x experts``
ints; every row sums to ``tokens * topk``). Empty ``counts`` means uniform routing. Caches key a site by its
:attr:`skew_class` (max over mean tokens per expert, from the global counts, rounded to a power of two), not by
the counts themselves, so every rank (all hold the same global counts after the split exchange) agrees.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from functools import cached_property

from hocket.core.site import DIRECTIONS, DTYPE_BYTES, canonical_dtype

MOE_KINDS = ("a2a_mm", "mm_a2a")
MOE_SITE_VERSION = 1


def _int(name: str, value: object, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"MoeSite.{name}={value!r} must be an int >= {least}")
    return value


def uniform_counts(tokens: int, topk: int, experts: int, world: int) -> tuple[tuple[int, ...], ...]:
    """Counts of a uniform router: each rank's ``tokens * topk`` choices spread as evenly as ints allow
    (the remainder on the lowest experts, rotated by rank so the global counts stay even)."""
    total = tokens * topk
    base, extra = divmod(total, experts)
    rows = []
    for r in range(world):
        row = [base] * experts
        for i in range(extra):
            row[(r * extra + i) % experts] += 1
        rows.append(tuple(row))
    return tuple(rows)


def zipf_counts(tokens: int, topk: int, experts: int, world: int, *, s: float = 1.0) -> tuple[tuple[int, ...], ...]:
    """Counts of a Zipf-skewed router (expert ``e``'s share is proportional to ``1 / (e + 1) ** s``), the same
    popularity on every rank. A token picks ``topk`` distinct experts, so no expert takes more than ``tokens``
    of one rank's rows: the excess goes to the next most popular experts."""
    if topk > experts:
        raise ValueError(f"topk={topk} is above experts={experts}: a token picks topk distinct experts")
    weights = [1.0 / (e + 1) ** s for e in range(experts)]
    total_w = sum(weights)
    total = tokens * topk
    row = [min(tokens, int(total * w / total_w)) for w in weights]
    left = total - sum(row)
    e = 0
    while left > 0:
        room = tokens - row[e % experts]
        if room > 0:
            take = min(room, left)
            row[e % experts] += take
            left -= take
        e += 1
    return tuple(tuple(row) for _ in range(world))


def parse_skew(text: str) -> tuple[str, float]:
    """``"uniform"`` -> ``("uniform", 0.0)``; ``"zipf:S"`` -> ``("zipf", S)`` (``S >= 0``, finite)."""
    if not isinstance(text, str):
        raise ValueError(f"skew={text!r} must be 'uniform' or 'zipf:S' (e.g. 'zipf:1.0')")
    name, _, arg = text.strip().partition(":")
    if name == "uniform" and not arg:
        return "uniform", 0.0
    if name == "zipf":
        try:
            value = float(arg)
        except ValueError:
            value = float("nan")
        if math.isfinite(value) and value >= 0:
            return "zipf", value
    raise ValueError(f"skew={text!r} is not 'uniform' or 'zipf:S' with a number S >= 0 (e.g. 'zipf:1.0')")


def routing_counts(skew: str, *, tokens: int, topk: int, experts: int, world: int) -> tuple[tuple[int, ...], ...]:
    """Counts of the router ``skew`` names (:func:`parse_skew`): ``()`` (uniform) or :func:`zipf_counts`."""
    name, value = parse_skew(skew)
    if name == "uniform":
        return ()
    return zipf_counts(tokens, topk, experts, world, s=value)


def skew_class(expert_totals: tuple[int, ...] | list[int]) -> int:
    """Max over mean tokens per expert, rounded to the nearest power of two (1 for uniform or empty routing)."""
    total = sum(expert_totals)
    if not expert_totals or total == 0:
        return 1
    ratio = max(expert_totals) * len(expert_totals) / total
    return max(1, 2 ** round(math.log2(max(ratio, 1.0))))


@dataclass(frozen=True, kw_only=True)
class MoeSite:
    """One ``a2a_mm`` or ``mm_a2a`` site (module docstring). ``key`` is stable: caches key decisions by it."""

    kind: str
    tokens: int
    """tokens per rank (the busiest rank's, when they differ)."""
    hidden: int
    ffn: int
    """the expert's intermediate width (``w_gate_up`` is ``hidden x 2 * ffn``)."""
    experts: int
    topk: int
    world: int = 2
    dtype: str = "bfloat16"
    counts: tuple[tuple[int, ...], ...] = ()
    """``counts[r][e]``: rank ``r``'s tokens routed to expert ``e``; empty: uniform."""
    shared_ffn: int = 0
    """the shared expert's intermediate width (0: none), computed beside the routed ones."""
    direction: str = "forward"
    ranks: tuple[int, ...] = ()
    count: int = 1
    name: str = ""
    version: int = field(default=MOE_SITE_VERSION)

    def __post_init__(self) -> None:
        if self.kind not in MOE_KINDS:
            raise ValueError(f"MoeSite.kind={self.kind!r} must be one of {MOE_KINDS}")
        for attr, least in (("tokens", 0), ("hidden", 1), ("ffn", 1), ("experts", 1), ("topk", 1),
                            ("world", 1), ("shared_ffn", 0), ("count", 1)):
            _int(attr, getattr(self, attr), least)
        if self.experts % self.world:
            raise ValueError(f"MoeSite.experts={self.experts} does not divide over world={self.world} ranks; "
                             f"expert parallelism puts experts // world on each rank: pick a degree that divides it")
        if self.topk > self.experts:
            raise ValueError(f"MoeSite.topk={self.topk} is above experts={self.experts}: a token picks topk "
                             f"distinct experts")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"MoeSite.direction={self.direction!r} must be one of {DIRECTIONS}")
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        counts = tuple(tuple(int(c) for c in row) for row in self.counts)
        if counts:
            if len(counts) != self.world or any(len(row) != self.experts for row in counts):
                raise ValueError(f"MoeSite.counts must be world x experts = {self.world} x {self.experts} ints "
                                 f"(rank r's tokens per expert), got {len(counts)} rows")
            if any(c < 0 for row in counts for c in row):
                raise ValueError("MoeSite.counts has negative entries; counts are tokens per expert")
        object.__setattr__(self, "counts", counts)
        ranks = tuple(self.ranks)
        if ranks and len(ranks) != self.world:
            raise ValueError(f"MoeSite.ranks has {len(ranks)} entries but world={self.world}")
        object.__setattr__(self, "ranks", ranks)

    # -- derived quantities -------------------------------------------------
    @property
    def e_local(self) -> int:
        return self.experts // self.world

    @property
    def group_ranks(self) -> tuple[int, ...]:
        return self.ranks or tuple(range(self.world))

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @cached_property
    def routing(self) -> tuple[tuple[int, ...], ...]:
        """``counts``, or the uniform router's counts when none were given."""
        return self.counts or uniform_counts(self.tokens, self.topk, self.experts, self.world)

    @cached_property
    def expert_totals(self) -> tuple[int, ...]:
        """Tokens per expert over all ranks."""
        return tuple(sum(col) for col in zip(*self.routing))

    @property
    def skew_class(self) -> int:
        return skew_class(self.expert_totals)

    def sent_rows(self, rank: int) -> tuple[int, ...]:
        """Rows ``rank`` sends to each rank in the dispatch (its tokens routed to that rank's experts)."""
        row, e = self.routing[rank], self.e_local
        return tuple(sum(row[d * e:(d + 1) * e]) for d in range(self.world))

    def received_rows(self, rank: int) -> tuple[int, ...]:
        """Rows ``rank`` receives from each rank in the dispatch (for its own experts)."""
        e = self.e_local
        return tuple(sum(self.routing[s][rank * e:(rank + 1) * e]) for s in range(self.world))

    def local_expert_rows(self, rank: int) -> tuple[int, ...]:
        """Rows each of ``rank``'s experts computes (summed over sources)."""
        e = self.e_local
        return self.expert_totals[rank * e:(rank + 1) * e]

    @property
    def busiest_rank(self) -> int:
        """The rank whose experts compute the most rows (the one that sets the step's pace)."""
        loads = [sum(self.local_expert_rows(r)) for r in range(self.world)]
        return loads.index(max(loads))

    @property
    def padded_rows(self) -> int:
        """Rows of the dropless padded layout per rank: ``world x tokens x min(topk, e_local)``."""
        return self.world * self.tokens * min(self.topk, self.e_local)

    @property
    def gemm_k_n(self) -> tuple[int, int]:
        """(k, n) of this site's grouped GEMM."""
        return (self.hidden, 2 * self.ffn) if self.kind == "a2a_mm" else (self.ffn, self.hidden)

    @property
    def row_bytes(self) -> int:
        """Bytes of one row the all-to-all moves (``hidden`` wide both ways)."""
        return self.hidden * self.itemsize

    @property
    def flops(self) -> int:
        """Grouped-GEMM FLOPs of the busiest rank."""
        k, n = self.gemm_k_n
        return 2 * sum(self.local_expert_rows(self.busiest_rank)) * k * n

    @property
    def key(self) -> str:
        payload = {"kind": self.kind, "tokens": self.tokens, "hidden": self.hidden, "ffn": self.ffn,
                   "experts": self.experts, "topk": self.topk, "world": self.world, "dtype": self.dtype,
                   "skew": self.skew_class, "shared_ffn": self.shared_ffn, "direction": self.direction,
                   "ranks": list(self.group_ranks), "v": self.version}
        digest = hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]
        return (f"{self.kind}:t{self.tokens}:h{self.hidden}:f{self.ffn}:e{self.experts}k{self.topk}:"
                f"skew{self.skew_class}:{self.dtype}:w{self.world}:{self.direction}:{digest}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["counts"] = [list(row) for row in self.counts]
        d["ranks"] = list(self.ranks)
        return d

    @classmethod
    def from_dict(cls, data: dict) -> MoeSite:
        if not isinstance(data, dict):
            raise TypeError(f"a MoeSite dict was expected, got {type(data).__name__}")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"MoeSite fields {sorted(unknown)} are unknown; known: {sorted(cls.__dataclass_fields__)}")
        data = dict(data)
        data["counts"] = tuple(tuple(row) for row in data.get("counts", ()))
        data["ranks"] = tuple(data.get("ranks", ()))
        return cls(**data)

    def pair(self) -> MoeSite:
        """The layer's other site (``a2a_mm`` <-> ``mm_a2a``), same routing."""
        from dataclasses import replace
        return replace(self, kind="mm_a2a" if self.kind == "a2a_mm" else "a2a_mm")

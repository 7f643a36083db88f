"""Shape sets of the multi-GPU benchmark (``benchmarks/bench_multigpu.py --cases NAME``).

Sites use docs/operators.md's per-rank convention (m, k, n): ``ag_mm`` gathers ``A_shard [m/w, k]``,
``mm_rs`` scatters the rows of ``[m, n]``. Model sets are Megatron sequence-parallel tensor
parallelism at ``tokens`` tokens over ``world`` ranks: QKV and gate+up are all-gather + matmul
(columns split over ranks), attention-out and down are matmul + reduce-scatter (rows of the
weight split over ranks).
"""

from __future__ import annotations

from dataclasses import dataclass

from hocket.core.site import Site

ISSUE6 = (
    ("ag_mm", 8192, 8192, 7168), ("ag_mm", 4096, 12288, 24576), ("ag_mm", 8192, 4096, 1536),
    ("mm_rs", 8192, 14336, 8192), ("mm_rs", 4096, 24576, 12288), ("mm_rs", 8192, 2048, 4096),
)
"""the six 2xH200 cases of benchmarks/results/h200x2/2026-12-01_nvlink-eager.md (measured at world 2)."""
GPT3 = (("ag_mm", 4096, 12288, 6144), ("mm_rs", 4096, 6144, 12288))
"""GPT-3-style layers (d_model 12288, FFN 49152 over 8 ranks), per rank."""


@dataclass(frozen=True, kw_only=True)
class TransformerTP:
    """A decoder layer's tensor-parallel GEMMs: hidden size, FFN size, attention heads, KV heads."""

    name: str
    hidden: int
    ffn: int
    heads: int
    kv_heads: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def sites(self, *, world: int, tokens: int, dtype: str = "bfloat16") -> tuple[Site, ...]:
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
        split = {"qkv": qkv, "gate_up": 2 * self.ffn, "attn_out": self.hidden, "down": self.ffn}
        for what, size in split.items():
            if size % world:
                raise ValueError(f"{self.name}: {what} size {size} does not split over world={world}; use a world "
                                 f"size that divides it")
        if tokens % world:
            raise ValueError(f"tokens={tokens} must be a multiple of world={world} (sequence-parallel shards)")
        common = dict(dtype=dtype, world=world)
        return (
            Site(kind="ag_mm", m=tokens, k=self.hidden, n=qkv // world, name=f"{self.name}.qkv", **common),
            Site(kind="ag_mm", m=tokens, k=self.hidden, n=2 * self.ffn // world, name=f"{self.name}.gate_up",
                 **common),
            Site(kind="mm_rs", m=tokens, k=self.hidden // world, n=self.hidden, name=f"{self.name}.attn_out",
                 **common),
            Site(kind="mm_rs", m=tokens, k=self.ffn // world, n=self.hidden, name=f"{self.name}.down", **common),
        )


LLAMA3_70B = TransformerTP(name="llama3-70b", hidden=8192, ffn=28672, heads=64, kv_heads=8)
LLAMA3_405B = TransformerTP(name="llama3-405b", hidden=16384, ffn=53248, heads=128, kv_heads=8)
CASE_SETS = ("issue6", "llama70b", "llama405b", "gpt3")


def case_sites(name: str, *, world: int, tokens: int = 8192, dtype: str = "bfloat16") -> tuple[Site, ...]:
    """The sites of shape set ``name`` (one of ``CASE_SETS``) at ``world`` ranks."""
    if name == "issue6":
        return tuple(Site(kind=k, m=m, k=kk, n=n, dtype=dtype, world=world, name=f"issue6.{i}")
                     for i, (k, m, kk, n) in enumerate(ISSUE6))
    if name == "gpt3":
        return tuple(Site(kind=k, m=m, k=kk, n=n, dtype=dtype, world=world, name=f"gpt3.{k}")
                     for k, m, kk, n in GPT3)
    if name == "llama70b":
        return LLAMA3_70B.sites(world=world, tokens=tokens, dtype=dtype)
    if name == "llama405b":
        return LLAMA3_405B.sites(world=world, tokens=tokens, dtype=dtype)
    raise ValueError(f"--cases {name!r} is unknown; use one of {CASE_SETS} (comma-separated for several)")

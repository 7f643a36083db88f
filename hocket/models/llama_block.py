"""A Llama-style decoder block in plain ``torch.nn`` and its tensor-parallel plan.

The client of :func:`hocket.compile`: RMSNorm, attention with rotary embeddings and
grouped key/value heads, a SwiGLU MLP, residual connections. Nothing in the layer code
knows about hocket; :func:`parallelize_llama_block` shards it the usual PyTorch way
(``ColwiseParallel`` / ``RowwiseParallel`` with sequence parallelism, ``SequenceParallel``
for the norms), so the block's input and output are this rank's slice of the sequence
(``[batch, seq / world, dim]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True, kw_only=True)
class LlamaBlockConfig:
    """Sizes of one decoder block (defaults: small enough for CPU tests)."""

    dim: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    hidden_dim: int = 128
    """width of the SwiGLU MLP."""
    max_seq_len: int = 128
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("dim", "n_heads", "n_kv_heads", "hidden_dim", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"LlamaBlockConfig.{name}={value!r} must be a positive int")
        if self.dim % self.n_heads:
            raise ValueError(f"LlamaBlockConfig.dim={self.dim} must be a multiple of n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"LlamaBlockConfig.n_heads={self.n_heads} must be a multiple of "
                             f"n_kv_heads={self.n_kv_heads} (grouped KV heads)")
        if (self.dim // self.n_heads) % 2:
            raise ValueError(f"head_dim={self.dim // self.n_heads} must be even for rotary embeddings; "
                             f"choose dim and n_heads accordingly")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def check_world(self, world: int) -> None:
        """Raise ValueError when the block cannot be split over ``world`` ranks."""
        for name in ("n_heads", "n_kv_heads", "hidden_dim"):
            if getattr(self, name) % world:
                raise ValueError(f"LlamaBlockConfig.{name}={getattr(self, name)} is not divisible by the "
                                 f"tensor-parallel world size {world}; choose a multiple of {world}")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (x.float() * scale).type_as(x) * self.weight


def rotary_tables(config: LlamaBlockConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of shape ``[max_seq_len, head_dim / 2]``."""
    half = config.head_dim // 2
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(half, dtype=torch.float64) / half))
    angles = torch.outer(torch.arange(config.max_seq_len, dtype=torch.float64), inv_freq)
    return angles.cos().float(), angles.sin().float()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (first half, second half) of ``x [batch, seq, heads, head_dim]``."""
    first, second = x.float().chunk(2, dim=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1).type_as(x)


class Attention(nn.Module):
    def __init__(self, config: LlamaBlockConfig) -> None:
        super().__init__()
        self.head_dim = config.head_dim
        self.n_rep = config.n_heads // config.n_kv_heads
        self.wq = nn.Linear(config.dim, config.n_heads * config.head_dim, bias=False)
        self.wk = nn.Linear(config.dim, config.n_kv_heads * config.head_dim, bias=False)
        self.wv = nn.Linear(config.dim, config.n_kv_heads * config.head_dim, bias=False)
        self.wo = nn.Linear(config.n_heads * config.head_dim, config.dim, bias=False)
        cos, sin = rotary_tables(config)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq = x.shape[0], x.shape[1]
        # head counts come from the (possibly sharded) projections: -1 keeps them local
        q = self.wq(x).view(batch, seq, -1, self.head_dim)
        k = self.wk(x).view(batch, seq, -1, self.head_dim)
        v = self.wv(x).view(batch, seq, -1, self.head_dim)
        cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        k = k.repeat_interleave(self.n_rep, dim=2)
        v = v.repeat_interleave(self.n_rep, dim=2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``."""

    def __init__(self, config: LlamaBlockConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.hidden_dim, bias=False)
        self.w2 = nn.Linear(config.hidden_dim, config.dim, bias=False)
        self.w3 = nn.Linear(config.dim, config.hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Module):
    """``h = x + attention(norm(x)); out = h + mlp(norm(h))``."""

    def __init__(self, config: LlamaBlockConfig) -> None:
        super().__init__()
        self.config = config
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.feed_forward = FeedForward(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


def tensor_parallel_plan() -> dict:
    """The sequence-parallel tensor-parallel plan of one block (torchtitan's layout)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel

    gather_input = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return {
        "attention_norm": SequenceParallel(),
        "attention": gather_input,
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        "feed_forward.w3": ColwiseParallel(),
    }


def parallelize_llama_block(block: LlamaBlock, mesh: object) -> LlamaBlock:
    """Shard ``block`` in place over the 1-D DeviceMesh ``mesh`` and return it.

    Afterwards the block takes and returns this rank's sequence slice
    ``[batch, seq / world, dim]`` (plain tensors).
    """
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import parallelize_module

    if not isinstance(block, LlamaBlock):
        raise TypeError(f"block must be a LlamaBlock, got {type(block).__name__}")
    if not isinstance(mesh, DeviceMesh) or mesh.ndim != 1:
        raise TypeError(f"mesh must be a 1-D torch DeviceMesh (init_device_mesh(device, (world,))), got {mesh!r}")
    block.config.check_world(mesh.size())
    return parallelize_module(block, mesh, tensor_parallel_plan())


def shard_sequence(x: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """This rank's slice of the sequence dim (dim 1) of a full ``[batch, seq, dim]`` input."""
    if x.dim() != 3 or x.shape[1] % world:
        raise ValueError(f"x of shape {tuple(x.shape)} must be [batch, seq, dim] with seq divisible by "
                         f"world={world}")
    return x.chunk(world, dim=1)[rank].contiguous()

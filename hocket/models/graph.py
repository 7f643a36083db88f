"""StepGraph: one training step as plain data (Sites, other compute, other communication).

For each pipeline stage the graph holds the nodes of ONE micro-batch on one rank of the
stage (forward then backward, in issue order), the pipeline send/recv between stages,
and the data-parallel gradient synchronisation that closes the step. The simulator
repeats a stage's nodes per micro-batch under its pipeline schedule (1F1B) and prices
each node: a ``Site`` with the cost model, an expert-parallel ``MoeSite`` (``hocket.core.moe``) with the MoE
cost model, a ``ComputeOp`` with the GEMM/memory model, a
``CommOp`` with the communication model.

Node order inside a stage is issue order: a resource runs its nodes in that order, a
node starts once its ``depends_on`` (indices into the same stage's ``nodes``) are done.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hocket.core.moe import MoeSite
from hocket.core.site import Site

COMPUTE_KINDS = ("gemm", "attention", "elementwise")
COMM_OPS = ("all_gather", "reduce_scatter", "all_reduce", "send_recv")
AXES = ("tp", "pp", "dp", "cp")
"""cp: the context-parallel group (ranks holding one sequence's shards, next to tp in rank order)."""
PHASES = ("forward", "backward", "step")


@dataclass(frozen=True, kw_only=True)
class ComputeOp:
    """Compute that communicates nothing: weight-gradient GEMMs, attention cores, norms."""

    name: str
    kind: str
    flops: float
    nbytes: float
    """memory traffic (bytes read + written)."""
    dtype: str
    m: int | None = None
    k: int | None = None
    n: int | None = None
    """GEMM shape when ``kind == "gemm"`` (``[m, k] @ [k, n]``)."""

    def __post_init__(self) -> None:
        if self.kind not in COMPUTE_KINDS:
            raise ValueError(f"ComputeOp {self.name!r}: kind={self.kind!r} must be one of {COMPUTE_KINDS}")
        if self.flops < 0 or self.nbytes < 0:
            raise ValueError(f"ComputeOp {self.name!r}: flops and nbytes must be >= 0")


@dataclass(frozen=True, kw_only=True)
class CommOp:
    """Communication that no matmul overlaps by construction (pipeline, gradients, embedding)."""

    name: str
    op: str
    nbytes: int
    """the collective's whole per-rank buffer (Site.comm_bytes convention); for send_recv
    the bytes one rank sends."""
    axis: str
    ranks: tuple[int, ...]
    """the group (send_recv: sender then receiver), global ranks of DP replica 0."""
    dtype: str

    def __post_init__(self) -> None:
        if self.op not in COMM_OPS:
            raise ValueError(f"CommOp {self.name!r}: op={self.op!r} must be one of {COMM_OPS}")
        if self.axis not in AXES:
            raise ValueError(f"CommOp {self.name!r}: axis={self.axis!r} must be one of {AXES}")


@dataclass(frozen=True, kw_only=True)
class StepNode:
    name: str
    op: Site | MoeSite | ComputeOp | CommOp
    depends_on: tuple[int, ...] = ()
    phase: str = "forward"
    layer: int | None = None
    """global layer index; None for embedding, head, pipeline and gradient nodes."""


@dataclass(frozen=True, kw_only=True)
class PipelineStage:
    index: int
    first_layer: int
    layers: int
    ranks: tuple[int, ...]
    """global ranks of this stage's TP group in DP replica 0."""
    dp_ranks: tuple[int, ...]
    """global ranks of the DP group of the stage's first rank."""
    nodes: tuple[StepNode, ...]
    """one micro-batch, forward then backward."""
    step_nodes: tuple[StepNode, ...]
    """once per step, after the last micro-batch's backward (gradient sync)."""
    params: int
    """parameters one rank of the stage holds (TP-sharded)."""
    has_embedding: bool = False
    has_head: bool = False


@dataclass(frozen=True, kw_only=True)
class StepGraph:
    model: object
    tp: int
    pp: int
    dp: int
    seq: int
    batch: int
    """sequences per micro-batch."""
    micro_batches: int
    """micro-batches per step per DP replica."""
    dtype: str
    stages: tuple[PipelineStage, ...]
    schedule: str = "1f1b"
    notes: tuple[str, ...] = field(default_factory=tuple)
    cp: int = 1
    """context-parallel degree: each sequence is split over ``cp`` ranks (rank order tp, cp, dp, pp)."""
    virtual: int = 1
    """virtual stages per pipeline rank: ``stages`` holds ``pp * virtual`` of them (interleaved 1F1B)."""
    recompute: str = "none"
    """activation recomputation: ``none``, ``selective`` (attention core, MLP activation) or ``full``."""
    ep: int = 1
    """expert-parallel degree (MoE models): the EP group is ``ep`` ranks of one DP group (``ep`` divides ``dp``)."""

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    def sites(self) -> list[Site]:
        """Unique Sites (by ``Site.key``) with ``count`` = occurrences per step on one rank of their stage."""
        merged: dict[str, Site] = {}
        order: list[str] = []
        for stage in self.stages:
            for node in stage.nodes:
                if isinstance(node.op, Site):
                    key = node.op.key
                    if key in merged:
                        old = merged[key]
                        merged[key] = Site.from_dict({**old.to_dict(), "count": old.count + node.op.count})
                    else:
                        merged[key] = node.op
                        order.append(key)
        return [merged[k] for k in order]

    def moe_sites(self) -> list[MoeSite]:
        """Unique MoeSites (by ``MoeSite.key``) with ``count`` = occurrences per step on one rank of their stage."""
        from dataclasses import replace

        merged: dict[str, MoeSite] = {}
        for stage in self.stages:
            for node in stage.nodes:
                if isinstance(node.op, MoeSite):
                    old = merged.get(node.op.key)
                    merged[node.op.key] = node.op if old is None else replace(old, count=old.count + node.op.count)
        return list(merged.values())

    def to_dict(self) -> dict:
        def op_dict(op):
            if isinstance(op, Site):
                return {"type": "site", **op.to_dict()}
            if isinstance(op, MoeSite):
                return {"type": "moe_site", **op.to_dict()}
            data = {k: getattr(op, k) for k in op.__dataclass_fields__}
            if "ranks" in data:
                data["ranks"] = list(data["ranks"])
            return {"type": "compute" if isinstance(op, ComputeOp) else "comm", **data}

        def node_dict(node: StepNode) -> dict:
            return {"name": node.name, "phase": node.phase, "layer": node.layer,
                    "depends_on": list(node.depends_on), "op": op_dict(node.op)}

        return {
            "model": getattr(self.model, "name", str(self.model)),
            "parallel": {"tp": self.tp, "pp": self.pp, "dp": self.dp, "seq": self.seq, "batch": self.batch,
                         "micro_batches": self.micro_batches, "schedule": self.schedule,
                         "cp": self.cp, "recompute": self.recompute, "virtual": self.virtual, "ep": self.ep},
            "dtype": self.dtype,
            "stages": [{"index": s.index, "first_layer": s.first_layer, "layers": s.layers, "ranks": list(s.ranks),
                        "dp_ranks": list(s.dp_ranks), "params": s.params, "has_embedding": s.has_embedding,
                        "has_head": s.has_head, "nodes": [node_dict(n) for n in s.nodes],
                        "step_nodes": [node_dict(n) for n in s.step_nodes]} for s in self.stages],
            "notes": list(self.notes),
        }

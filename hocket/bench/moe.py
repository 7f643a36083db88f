"""The expert-parallel MoE benchmark (``hocket bench moe``): every MoE strategy against sequential EP and torchtitan.

One routed-experts block of a MoE layer (``hocket.ops.moe_experts``'s math: ``h = x @ w_gate_up[e]``,
``a = silu(h[:, :ffn]) * h[:, ffn:]``, ``y = sum_j topk_weights[:, j] * (a @ w_down[e_j])``) under expert
parallelism over the ranks of the default group: ``experts // world`` experts per rank, ``tokens`` tokens per rank,
the router drawn per token (``uniform``: ``topk`` distinct experts, all equally likely; ``zipf:S``: expert ``e``
chosen with weight ``1 / (e + 1) ** S``, the same popularity on every rank, so rank 0's experts are the busiest).

What runs on every rank, each checked against the single-process reference of the whole layer first
(:func:`reference_layer`, within :func:`hocket.ops.tolerance.within_tolerance`), then timed interleaved
(``hocket.timing``: a barrier before each sample, the slowest rank's time, medians):

* ``sequential_ep``: the plain expert-parallel path on ``torch.distributed``: sort the token copies by expert, one
  ``all_to_all_single`` of the counts and a host read of the split sizes, the dispatch ``all_to_all_single``, the
  rows into expert-major order, the two grouped GEMMs (:func:`vendor_grouped_mm`), back into source order, the
  combine ``all_to_all_single``, the weighted sum per token;
* ``hocket`` plans: ``hocket.ops.moe_experts(..., plan=...)`` under every strategy of
  ``hocket.strategies.strategies_for("a2a_mm")`` (chunked ones at each ``chunks``), and ``plan=None``;
* ``torchtitan``: torchtitan's own EP path (``RoutedExperts``: ``AllToAllTokenDispatcher`` + ``GroupedExperts``,
  which computes in bf16) holding the same experts, where torchtitan imports; ``torchtitan+hocket``: that module
  through hocket's drop-in (``hocket.graph.moe``, ``plan=None``);
* ``compute_alone``: the two grouped GEMMs (the vendor's ``torch._grouped_mm`` where it runs) and the activation on
  the rows this rank receives, expert-major, nothing else; ``comm_alone``: the dispatch and combine all-to-alls
  alone, on the same split sizes.

With ``MoeBenchSpec.backward`` every candidate is its forward and backward together (``torch.autograd.grad`` of
the output for a fixed output gradient, to ``x``, ``topk_weights`` and both expert weights), checked on the output
and every gradient (:func:`reference_grads`: the weight gradients of a rank's experts gather every rank's rows);
``sequential_ep`` then uses torch's differentiable all-to-all, ``compute_alone`` is the grouped GEMMs' forward and
backward, ``comm_alone`` the four all-to-alls.

Each candidate's overlap efficiency is :func:`hocket.bench.efficiency.overlap_score` against the ``hocket``
``sequential`` plan (``sequential_ep`` where that plan did not run), ``compute_alone`` and ``comm_alone``; the
report also gives every candidate's speedup over ``sequential_ep`` and over ``torchtitan``.

Layers come from the model presets (``hocket.models``: ``mixtral-8x7b``, ``qwen3-30b-a3b``, ``deepseek-v3``) or
explicit sizes; :meth:`MoeLayer.scaled` divides ``hidden``, ``ffn`` and ``shared_ffn`` by a factor (rounded to a
multiple of 16, at least 16) to fit a CPU, keeping the experts and ``topk``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import torch
import torch.distributed as dist

from hocket.core.moe import parse_skew

ALIGN = 16
"""scaled widths are multiples of this (``torch._grouped_mm`` needs 16-byte row strides: 8 bf16 elements)."""
SCHEMA = "hocket.bench.moe/1"
"""the ``schema`` field of every results line of this benchmark."""
SCALES = {"mixtral-8x7b": 16, "qwen3-30b-a3b": 8, "deepseek-v3": 16}
"""the factors the dated CPU report scales each preset by (hidden 256 / 256 / 448)."""


# -- the layer -----------------------------------------------------------------------------------------------

def _positive(name: str, value: object, least: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{name}={value!r} must be an int >= {least}")
    return value


@dataclass(frozen=True, kw_only=True)
class MoeLayer:
    """One MoE layer's routed (and shared) experts."""

    name: str
    hidden: int
    ffn: int
    """one routed expert's intermediate width (``w_gate_up`` is ``hidden x 2 * ffn``)."""
    experts: int
    topk: int
    shared_ffn: int = 0
    """the shared experts' intermediate width together (0: none)."""
    scale: int = 1
    """the factor the widths were divided by (1: the model's own)."""

    def __post_init__(self) -> None:
        for attr in ("hidden", "ffn", "experts", "topk", "scale"):
            _positive(f"MoeLayer.{attr}", getattr(self, attr))
        _positive("MoeLayer.shared_ffn", self.shared_ffn, 0)
        if self.topk > self.experts:
            raise ValueError(f"MoeLayer.topk={self.topk} is above experts={self.experts}: a token picks topk "
                             f"distinct experts (use --topk <= --experts)")

    def scaled(self, factor: int) -> MoeLayer:
        """Widths divided by ``factor``, each rounded to a multiple of :data:`ALIGN` (at least :data:`ALIGN`)."""
        _positive("scale", factor)

        def div(v: int) -> int:
            return 0 if v == 0 else max(ALIGN, round(v / factor / ALIGN) * ALIGN)
        if factor == 1:
            return self
        return replace(self, hidden=div(self.hidden), ffn=div(self.ffn), shared_ffn=div(self.shared_ffn),
                       scale=self.scale * factor)

    def check_world(self, world: int) -> int:
        """Local experts per rank; ``experts`` must divide over ``world``."""
        if self.experts % world:
            raise ValueError(f"experts={self.experts} does not divide over {world} ranks: expert parallelism puts "
                             f"experts // world on each rank (pick a world that divides {self.experts})")
        return self.experts // world

    def label(self) -> str:
        shared = f" shared {self.shared_ffn}" if self.shared_ffn else ""
        scale = f" (/{self.scale})" if self.scale > 1 else ""
        return f"{self.name}{scale}: hidden {self.hidden} ffn {self.ffn} E {self.experts} top-{self.topk}{shared}"


def layer_from_preset(name: str) -> MoeLayer:
    """The MoE layer of a model preset (``hocket.models``); a dense model is an error naming the MoE presets."""
    from hocket.models.catalog import list_models, load_preset_model

    model = load_preset_model(name)
    if not model.is_moe:
        moe = [m for m in list_models() if load_preset_model(m).is_moe]
        raise ValueError(f"model {name!r} has no MoE layers; use one of {moe}")
    return MoeLayer(name=name, hidden=model.hidden_size, ffn=model.expert_ffn, experts=model.num_experts,
                    topk=model.num_experts_per_tok, shared_ffn=model.shared_ffn)


# -- the spec ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class MoeBenchSpec:
    """One benchmark run: a layer, its routing, the candidates and the timing."""

    layer: MoeLayer
    tokens: int
    """tokens per rank."""
    skew: str = "uniform"
    dtype: str = "bfloat16"
    plans: tuple[dict | None, ...] = ()
    """hocket plans to run (None: ``plan=None``, the planner's choice)."""
    torchtitan: bool = True
    backward: bool = False
    """time (and check) the forward and its backward together."""
    iters: int = 10
    warmup: int = 2
    rounds: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        _positive("tokens", self.tokens, 0)
        _positive("iters", self.iters)
        _positive("warmup", self.warmup, 0)
        parse_skew(self.skew)
        if self.dtype not in ("bfloat16", "float32", "float16"):
            raise ValueError(f"dtype={self.dtype!r} must be bfloat16, float32 or float16")


def bench_plans(strategies: tuple[str, ...] = ("all",), chunks: tuple[int, ...] = (2, 4),
                splits: tuple[str, ...] = ("exchanged",), *, planner: bool = True) -> tuple[dict | None, ...]:
    """The hocket plans of every MoE strategy (``strategies_for("a2a_mm")``, or the named ones): a strategy whose
    spec fixes its chunks once, the others at each of ``chunks`` at or above their ``min_chunks``; each at every
    split mode of ``splits``; then None (``plan=None``) when ``planner``."""
    from hocket.core.plan import SPLITS
    from hocket.strategies import spec as spec_of
    from hocket.strategies import strategies_for

    known = strategies_for("a2a_mm")
    names = known if "all" in strategies else tuple(strategies)
    unknown = [s for s in names if s not in known]
    if unknown:
        raise ValueError(f"strategies {unknown} do not run MoE sites; use 'all' or some of {known}")
    for mode in splits:
        if mode not in SPLITS or mode is None:
            raise ValueError(f"splits {mode!r} is unknown; use exchanged and/or padded")
    for c in chunks:
        _positive("chunks", c)
    plans: list[dict | None] = []
    for name in names:
        s = spec_of(name)
        counts = (None,) if s.fixed_chunks else tuple(c for c in chunks if c >= s.min_chunks)
        for c in counts:
            for mode in splits:
                plan = {"strategy": name, "splits": mode}
                if c is not None:
                    plan["chunks"] = c
                plans.append(plan)
    if planner:
        plans.append(None)
    return tuple(plans)


def plan_label(plan: dict | None) -> str:
    """``sequential``, ``token_blocks(4)``, ``... padded``, or ``plan=None``."""
    if plan is None:
        return "plan=None"
    text = plan["strategy"] + (f"({plan['chunks']})" if "chunks" in plan else "")
    return text + (" padded" if plan.get("splits") == "padded" else "")


# -- operands and the reference ------------------------------------------------------------------------------

@dataclass
class MoeOperands:
    """This rank's inputs: tokens, routing, its local experts (and the shared expert, the same on every rank)."""

    x: torch.Tensor
    topk_ids: torch.Tensor
    topk_weights: torch.Tensor
    w_gate_up: torch.Tensor
    w_down: torch.Tensor
    shared_gate_up: torch.Tensor | None = None
    shared_down: torch.Tensor | None = None
    experts_of: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = field(default=None, repr=False)
    """every expert's ``(w_gate_up, w_down)`` (regenerated: the reference only)."""


def draw_routing(tokens: int, experts: int, topk: int, skew: str, *, generator: torch.Generator
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(topk_ids int64 [tokens, topk], topk_weights float32 [tokens, topk])``: distinct experts per token drawn
    with the skew's popularity, weights a softmax over ``topk`` random logits."""
    name, s = parse_skew(skew)
    popularity = torch.ones(experts) if name == "uniform" else 1.0 / (torch.arange(experts) + 1.0) ** s
    if tokens == 0:
        return torch.zeros(0, topk, dtype=torch.int64), torch.zeros(0, topk)
    ids = torch.multinomial(popularity.expand(tokens, experts), topk, replacement=False, generator=generator)
    weights = torch.softmax(torch.randn(tokens, topk, generator=generator), dim=-1)
    return ids, weights


def _expert_weights(layer: MoeLayer, e: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert ``e``'s ``(w_gate_up [hidden, 2 ffn], w_down [ffn, hidden])`` in float32: the same on every rank."""
    g = torch.Generator().manual_seed(seed * 100_003 + 7919 * (e + 1))
    gate_up = torch.randn(layer.hidden, 2 * layer.ffn, generator=g) / math.sqrt(layer.hidden)
    down = torch.randn(layer.ffn, layer.hidden, generator=g) / math.sqrt(layer.ffn)
    return gate_up, down


def rank_tokens(layer: MoeLayer, *, tokens: int, skew: str, rank: int, seed: int = 0
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s ``(x, topk_ids, topk_weights)`` in float32 (any rank can draw any rank's)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    x = torch.randn(tokens, layer.hidden, generator=g)
    ids, weights = draw_routing(tokens, layer.experts, layer.topk, skew, generator=g)
    return x, ids, weights


def output_grad(layer: MoeLayer, *, tokens: int, rank: int, seed: int = 0) -> torch.Tensor:
    """Rank ``rank``'s gradient of the layer's output (float32, ``[tokens, hidden]``) for backward runs."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + 500_009 + rank)
    return torch.randn(tokens, layer.hidden, generator=g)


def make_operands(layer: MoeLayer, *, tokens: int, skew: str, rank: int, world: int, dtype: torch.dtype,
                  device: torch.device, seed: int = 0) -> MoeOperands:
    """This rank's operands: routing and tokens seeded by rank, experts by their global index (module docstring)."""
    e_local = layer.check_world(world)
    x, ids, weights = rank_tokens(layer, tokens=tokens, skew=skew, rank=rank, seed=seed)
    mine = [_expert_weights(layer, rank * e_local + j, seed) for j in range(e_local)]

    def experts_of() -> tuple[torch.Tensor, torch.Tensor]:
        every = [_expert_weights(layer, e, seed) for e in range(layer.experts)]
        return torch.stack([a for a, _ in every]), torch.stack([b for _, b in every])

    ops = MoeOperands(x=x.to(device, dtype), topk_ids=ids.to(device), topk_weights=weights.to(device, dtype),
                      w_gate_up=torch.stack([a for a, _ in mine]).to(device, dtype),
                      w_down=torch.stack([b for _, b in mine]).to(device, dtype), experts_of=experts_of)
    if layer.shared_ffn:
        gs = torch.Generator().manual_seed(seed * 1_000_003 + 999_983)
        ops.shared_gate_up = (torch.randn(layer.hidden, 2 * layer.shared_ffn, generator=gs)
                              / math.sqrt(layer.hidden)).to(device, dtype)
        ops.shared_down = (torch.randn(layer.shared_ffn, layer.hidden, generator=gs)
                           / math.sqrt(layer.shared_ffn)).to(device, dtype)
    return ops


def swiglu(h: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of ``h = [gate | up]`` (the first half of the columns is the gate)."""
    f = h.shape[-1] // 2
    return torch.nn.functional.silu(h[:, :f]) * h[:, f:]


def shared_expert(ops: MoeOperands) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The shared expert as ``shared(x)`` (a SwiGLU MLP), None when the layer has none."""
    if ops.shared_gate_up is None:
        return None
    gate_up, down = ops.shared_gate_up, ops.shared_down
    return lambda x: swiglu(x @ gate_up) @ down


def reference_layer(ops: MoeOperands, *, with_shared: bool) -> torch.Tensor:
    """The whole layer for this rank's tokens in one process, float32, from every expert's weights (no
    communication), cast to the operands' dtype."""
    gate_up, down = ops.experts_of()
    with torch.no_grad():
        y = _layer(ops.x.detach().float().cpu(), ops.topk_ids.cpu(), ops.topk_weights.detach().float().cpu(),
                   gate_up, down, _shared_fp32(ops) if with_shared else None)
    return y.to(ops.x.device, ops.x.dtype)


def _shared_fp32(ops: MoeOperands) -> tuple[torch.Tensor, torch.Tensor] | None:
    if ops.shared_gate_up is None:
        return None
    return ops.shared_gate_up.detach().float().cpu(), ops.shared_down.detach().float().cpu()


def _layer(x, ids, weights, gate_up, down, shared) -> torch.Tensor:
    """``y_t = sum_j weights[t, j] * swiglu(x_t @ gate_up[e]) @ down[e]`` (+ the shared expert), differentiable."""
    y = torch.zeros_like(x)
    for e in torch.unique(ids).tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        out = swiglu(x[tok] @ gate_up[e]) @ down[e]
        y = y.index_add(0, tok, out * weights[tok, slot].unsqueeze(1))
    if shared is not None:
        y = y + swiglu(x @ shared[0]) @ shared[1]
    return y


def reference_grads(layer: MoeLayer, ops: MoeOperands, *, tokens: int, skew: str, rank: int, world: int,
                    seed: int, with_shared: bool) -> tuple[torch.Tensor, ...]:
    """float32 ``(d x, d topk_weights, d w_gate_up, d w_down)`` of this rank for the loss ``sum_r <y_r, g_r>``
    over every rank's tokens (:func:`rank_tokens`) and output gradient (:func:`output_grad`): the weight
    gradients of this rank's experts gather every rank's rows."""
    gate_up, down = ops.experts_of()
    gate_up.requires_grad_(True)
    down.requires_grad_(True)
    shared = _shared_fp32(ops) if with_shared else None
    e_local = layer.experts // world
    loss, mine = 0.0, None
    for r in range(world):
        x, ids, weights = rank_tokens(layer, tokens=tokens, skew=skew, rank=r, seed=seed)
        x.requires_grad_(r == rank)
        weights.requires_grad_(r == rank)
        if r == rank:
            mine = (x, weights)
        y = _layer(x, ids, weights, gate_up, down, shared)
        loss = loss + (y * output_grad(layer, tokens=tokens, rank=r, seed=seed)).sum()
    inputs = [mine[0], mine[1], gate_up, down]
    if not loss.requires_grad:  # no token anywhere: every gradient is zero
        dx, dw, dgu, dd = (torch.zeros_like(t) for t in inputs)
    else:
        dx, dw, dgu, dd = torch.autograd.grad(loss, inputs, allow_unused=True, materialize_grads=True)
    sl = slice(rank * e_local, (rank + 1) * e_local)
    return dx, dw, dgu[sl], dd[sl]


# -- sequential EP and the baselines -------------------------------------------------------------------------

def vendor_grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """``torch._grouped_mm`` where this build runs it for the device, dtype and strides
    (``hocket.ops.grouped_mm.grouped_mm_backend``), else ``hocket.ops.grouped_mm``'s loop of ``torch.mm``.
    Every row is routed here (``offs[-1]`` is the row count), so no row needs zeroing."""
    from hocket.ops.grouped_mm import GROUPED, grouped_mm, grouped_mm_backend

    if x.shape[0] and grouped_mm_backend(x.device, x.dtype) == GROUPED and x.shape[1] * x.element_size() % 16 == 0 \
            and w.shape[2] * w.element_size() % 16 == 0:
        return torch._grouped_mm(x, w, offs=offs)
    return grouped_mm(x, w, offs)


class SequentialEP:
    """The plain expert-parallel layer on ``torch.distributed`` (module docstring, ``sequential_ep``). After a
    call, ``state`` holds what the baselines reuse: split sizes, expert-major rows and their group offsets."""

    def __init__(self, ops: MoeOperands, group=None, *, with_shared: bool = False, autograd: bool = False) -> None:
        self.ops, self.group = ops, group
        self.autograd = autograd
        """the two data all-to-alls through torch's differentiable functional collective (backward runs)."""
        self.world = dist.get_world_size(group)
        self.e_local = ops.w_gate_up.shape[0]
        self.shared = shared_expert(ops) if with_shared else None
        self.state: dict = {}

    def __call__(self) -> torch.Tensor:
        grouped_mm = vendor_grouped_mm
        ops, world, e_local = self.ops, self.world, self.e_local
        k = ops.topk_ids.shape[1]
        flat = ops.topk_ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        token = order // k
        send = ops.x.index_select(0, token)
        counts = torch.bincount(flat, minlength=world * e_local)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=self.group)
        in_splits = counts.view(world, e_local).sum(1).tolist()
        out_splits = recv_counts.view(world, e_local).sum(1).tolist()  # the host sync of the split sizes
        recv = self._a2a(send, out_splits, in_splits)
        expert_of_row = torch.arange(e_local, device=recv.device).repeat(world).repeat_interleave(recv_counts)
        perm = torch.argsort(expert_of_row, stable=True)
        rows = recv.index_select(0, perm)
        offs = torch.cumsum(recv_counts.view(world, e_local).sum(0), 0).to(torch.int32)
        out_rows = grouped_mm(swiglu(grouped_mm(rows, ops.w_gate_up, offs)), ops.w_down, offs)
        back = out_rows.index_select(0, torch.argsort(perm))
        combined = self._a2a(back, in_splits, out_splits)
        y = torch.zeros_like(ops.x).index_add(
            0, token, combined * ops.topk_weights.reshape(-1).index_select(0, order).unsqueeze(1))
        if self.shared is not None:
            y = y + self.shared(ops.x)
        self.state = {"in_splits": in_splits, "out_splits": out_splits, "rows": rows.detach(), "offs": offs,
                      "send": send.detach(), "back": back.detach()}
        return y

    def _a2a(self, inp: torch.Tensor, out_splits: list[int], in_splits: list[int]) -> torch.Tensor:
        if self.autograd:  # torch's differentiable all-to-all (functional collectives)
            from torch.distributed._functional_collectives import all_to_all_single_autograd, wait_tensor

            return wait_tensor(all_to_all_single_autograd(inp.contiguous(), out_splits, in_splits,
                                                          self.group or dist.group.WORLD))
        out = inp.new_empty((sum(out_splits), inp.shape[1]))
        dist.all_to_all_single(out, inp, out_splits, in_splits, group=self.group)
        return out


def compute_alone(seq: SequentialEP, *, backward: bool = False) -> Callable[[], object]:
    """The two grouped GEMMs and the activation on the rows this rank received, expert-major (run ``seq``
    once first); with the shared expert when ``seq`` has one. ``backward``: and their backward (the gradients
    of the rows and both weights for a fixed output gradient)."""
    grouped_mm = vendor_grouped_mm
    st, ops = seq.state, seq.ops
    rows, offs, shared = st["rows"].clone().requires_grad_(backward), st["offs"], seq.shared
    grad_out = torch.randn(rows.shape[0], ops.w_down.shape[2], generator=torch.Generator().manual_seed(5)) \
        .to(rows.device, rows.dtype)

    def run() -> object:
        out = grouped_mm(swiglu(grouped_mm(rows, ops.w_gate_up, offs)), ops.w_down, offs)
        extra = shared(ops.x) if shared is not None else None
        if not backward:
            return out
        outs, grads = [out], [grad_out]
        if extra is not None:
            outs.append(extra)
            grads.append(torch.ones_like(extra))
        return torch.autograd.grad(outs, [rows, ops.w_gate_up, ops.w_down], grads, allow_unused=True)
    return run


def comm_alone(seq: SequentialEP, *, backward: bool = False) -> Callable[[], None]:
    """The dispatch and the combine all-to-alls alone, on ``seq``'s split sizes (run ``seq`` once first);
    ``backward``: twice (the backward's two all-to-alls move the same rows the other way)."""
    st, group = seq.state, seq.group
    send, back = st["send"], st["back"]
    recv, combined = back.new_empty(back.shape), send.new_empty(send.shape)
    in_splits, out_splits = st["in_splits"], st["out_splits"]

    def run() -> None:
        for _ in range(2 if backward else 1):
            dist.all_to_all_single(recv, send, out_splits, in_splits, group=group)
            dist.all_to_all_single(combined, back, in_splits, out_splits, group=group)
    return run


# -- hocket's operator and torchtitan's path -----------------------------------------------------------------

def moe_experts_available() -> bool:
    """Whether ``hocket.ops.moe_experts`` exists in this build."""
    import hocket.ops as hops

    return callable(getattr(hops, "moe_experts", None))


def hocket_call(ops: MoeOperands, plan: dict | None, group=None, *, with_shared: bool) -> Callable[[], torch.Tensor]:
    """``hocket.ops.moe_experts`` on ``ops`` under ``plan`` (None: the planner's choice)."""
    import hocket.ops as hops

    shared = shared_expert(ops) if with_shared else None
    group = group if group is not None else dist.group.WORLD
    return lambda: hops.moe_experts(ops.x, ops.topk_ids, ops.topk_weights, ops.w_gate_up, ops.w_down, group,
                                    shared=shared, plan=plan)


def torchtitan_available() -> str | None:
    """None when torchtitan's EP modules import, else the reason."""
    try:
        import torchtitan.distributed.utils  # noqa: F401
        from torchtitan.models.common.moe import GroupedExperts, RoutedExperts  # noqa: F401
        from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means the path does not run here
        return f"{type(exc).__name__}: {exc}"
    return None


def torchtitan_module(ops: MoeOperands, layer: MoeLayer, world: int):
    """torchtitan's ``RoutedExperts`` (its dispatcher over an ``ep`` mesh of the default group, its
    ``GroupedExperts``) holding this rank's experts of ``ops``, and its forward arguments."""
    import torchtitan.distributed.utils as tt_utils
    from torch.distributed.device_mesh import init_device_mesh
    from torchtitan.models.common.moe import GroupedExperts, RoutedExperts
    from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher

    tt_utils.set_spmd_backend("partial_dtensor")  # its default (spmd_types) reads a mesh only its trainer sets
    e_local = ops.w_gate_up.shape[0]
    config = RoutedExperts.Config(
        inner_experts=GroupedExperts.Config(dim=layer.hidden, hidden_dim=layer.ffn, num_experts=e_local),
        token_dispatcher=AllToAllTokenDispatcher.Config(num_experts=layer.experts, top_k=layer.topk))
    module = config.build().to(ops.x.device)
    inner = module.inner_experts
    with torch.no_grad():  # w1/w3 [E, F, D] (gate, up), w2 [E, D, F], in the operands' dtype
        inner.w1_EFD.data = ops.w_gate_up[:, :, :layer.ffn].detach().transpose(1, 2).contiguous()
        inner.w3_EFD.data = ops.w_gate_up[:, :, layer.ffn:].detach().transpose(1, 2).contiguous()
        inner.w2_EDF.data = ops.w_down.detach().transpose(1, 2).contiguous()
    mesh = init_device_mesh(ops.x.device.type, (world,), mesh_dim_names=("ep",))
    module.token_dispatcher.wire_meshes(ep_mesh=mesh)
    counts = torch.bincount(ops.topk_ids.reshape(-1), minlength=layer.experts)
    return module, (ops.x.unsqueeze(0), ops.topk_weights.unsqueeze(0), ops.topk_ids.unsqueeze(0), counts)


def torchtitan_calls(ops: MoeOperands, layer: MoeLayer, world: int, *, with_shared: bool, backward: bool = False
                     ) -> dict[str, Callable[[], torch.Tensor]]:
    """``torchtitan``: its ``RoutedExperts`` as it is; ``torchtitan+hocket``: the same module through hocket's
    drop-in (``hocket.graph.moe.hocket_experts_for``, ``plan=None``) where this build has it. Each returns
    ``[tokens, hidden]`` (plus the shared expert, computed outside torchtitan, when ``with_shared``); under
    ``backward`` with autograd on (the module's parameters are its weight leaves: :func:`torchtitan_leaves`)."""
    import contextlib
    import importlib.util

    module, args = torchtitan_module(ops, layer, world)
    grad_mode = contextlib.nullcontext if backward else torch.no_grad
    shared = shared_expert(ops) if with_shared else None
    modules = {"torchtitan": module}
    if importlib.util.find_spec("hocket.graph.moe") is not None:
        from hocket.graph.moe import hocket_experts_for

        modules["torchtitan+hocket"] = hocket_experts_for(module, plan=None)

    def call(m) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            with grad_mode():
                y = m(*args).view(ops.x.shape)
                return y + shared(ops.x) if shared is not None else y
        run.module = module
        return run
    return {name: call(m) for name, m in modules.items()}


def torchtitan_leaves(module, ops: MoeOperands):
    """``(leaves, canonical)``: the inputs whose gradients a backward run takes through torchtitan's module
    (``x``, ``topk_weights``, ``w1``, ``w3``, ``w2``) and the map of their gradients to ``(d x, d topk_weights,
    d w_gate_up, d w_down)`` (``w_gate_up = [w1^T | w3^T]``, ``w_down = w2^T``)."""
    inner = module.inner_experts
    leaves = [ops.x, ops.topk_weights, inner.w1_EFD, inner.w3_EFD, inner.w2_EDF]

    def canonical(grads):
        dx, dw, d1, d3, d2 = grads
        return dx, dw, torch.cat([d1.transpose(1, 2), d3.transpose(1, 2)], dim=2), d2.transpose(1, 2)
    return leaves, canonical


# -- one run on every rank -----------------------------------------------------------------------------------

def _agree_error(value: float) -> float:
    """The largest of every rank's ``value`` (inf stays inf), so every rank takes the same branch."""
    t = torch.tensor([value if math.isfinite(value) else 1e300], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _check(fn: Callable[[], object], want, world: int, device: torch.device) -> tuple[float, str | None]:
    """(max error over every rank, None or the reason it failed on some rank); ``want`` is a tensor or a tuple
    of tensors (a backward run's output and gradients), each compared in its own dtype's tolerance."""
    from hocket.ops.tolerance import max_error, within_tolerance

    err, reason = 0.0, None
    try:
        got = fn()
        pairs = list(zip(got, want)) if isinstance(want, tuple) else [(got, want)]
        if isinstance(want, tuple) and len(got) != len(want):
            raise ValueError(f"{len(got)} results, expected {len(want)}")
        for i, (g, w) in enumerate(pairs):
            if g is None or g.shape != w.shape:
                err, reason = float("inf"), f"result {i}: {None if g is None else tuple(g.shape)}, expected " \
                                            f"{tuple(w.shape)}"
                break
            w = w.to(g.dtype)
            err = max(err, max_error(g, w))
            if not within_tolerance(g, w, world=world) and reason is None:
                reason = f"result {i}: max error {max_error(g, w):.3g} outside the {g.dtype} tolerance"
    except (ValueError, TypeError, NotImplementedError, RuntimeError) as exc:
        err, reason = float("inf"), f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    flag = torch.tensor([0 if reason is None else 1], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    agreed = _agree_error(err)
    if reason is None and int(flag.item()):
        reason = "failed on another rank"
    return agreed, reason


def _with_backward(forward: Callable[[], torch.Tensor], leaves: list, grad_y: torch.Tensor,
                   canonical: Callable = tuple) -> Callable[[], tuple]:
    """A call that runs ``forward`` and its backward for ``grad_y``: ``(y, d x, d topk_weights, d w_gate_up,
    d w_down)`` (``canonical`` maps the gradients of ``leaves`` to the last four)."""
    def run() -> tuple:
        y = forward()
        if not y.requires_grad:  # nothing reached the output (no token on any rank)
            return (y, *canonical(tuple(torch.zeros_like(t) for t in leaves)))
        return (y.detach(), *canonical(torch.autograd.grad(y, leaves, grad_y, allow_unused=True,
                                                           materialize_grads=True)))
    return run


def run_on_rank(spec: MoeBenchSpec, *, device: torch.device | None = None) -> dict:
    """Check and time every candidate of ``spec`` on this rank (every rank calls it; the result is the same
    on every rank): ``{"times": {label: summary}, "errors": {label: max error}, "skipped": {label: reason},
    ...}``. Under ``spec.backward`` every candidate is the forward and its backward together, checked on the
    output and the gradients of ``x``, ``topk_weights`` and both expert weights (:func:`reference_grads`)."""
    from hocket.core.site import canonical_dtype
    from hocket.timing.timer import TimingConfig, time_interleaved

    device = device or torch.device("cpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, canonical_dtype(spec.dtype))
    layer, backward = spec.layer, spec.backward
    e_local = layer.check_world(world)
    with_shared = layer.shared_ffn > 0
    ops = make_operands(layer, tokens=spec.tokens, skew=spec.skew, rank=rank, world=world, dtype=dtype,
                        device=device, seed=spec.seed)
    want = reference_layer(ops, with_shared=with_shared)
    leaves = [ops.x, ops.topk_weights, ops.w_gate_up, ops.w_down]
    grad_y = None
    if backward:
        for t in leaves:
            t.requires_grad_(True)
        grads = reference_grads(layer, ops, tokens=spec.tokens, skew=spec.skew, rank=rank, world=world,
                                seed=spec.seed, with_shared=with_shared)
        want = (want, *(g.to(device, dtype) for g in grads))
        grad_y = output_grad(layer, tokens=spec.tokens, rank=rank, seed=spec.seed).to(device, dtype)

    def timed(forward: Callable[[], torch.Tensor], these=None, canonical: Callable = tuple) -> Callable:
        return _with_backward(forward, these or leaves, grad_y, canonical) if backward else forward

    seq = SequentialEP(ops, with_shared=with_shared, autograd=backward)
    fns: dict[str, Callable] = {}
    errors: dict[str, float] = {}
    skipped: dict[str, str] = {}
    err, reason = _check(timed(seq), want, world, device)
    if reason is not None:
        raise RuntimeError(f"sequential_ep is off the reference ({reason}): the benchmark's own path is wrong")
    fns["sequential_ep"], errors["sequential_ep"] = timed(seq), err
    base = {"compute_alone": compute_alone(seq, backward=backward), "comm_alone": comm_alone(seq, backward=backward)}
    if moe_experts_available():
        for plan in spec.plans:
            label = plan_label(plan)
            fn = timed(hocket_call(ops, plan, with_shared=with_shared))
            err, reason = _check(fn, want, world, device)
            if reason is None:
                fns[label], errors[label] = fn, err
            else:
                skipped[label] = reason
    else:
        skipped["hocket plans"] = "hocket.ops.moe_experts is not in this build"
    if spec.torchtitan:
        missing = torchtitan_available()
        if missing is None:
            for label, forward in torchtitan_calls(ops, layer, world, with_shared=with_shared,
                                                   backward=backward).items():
                tt_leaves, canonical = torchtitan_leaves(forward.module, ops)
                fn = timed(forward, tt_leaves, canonical)
                err, reason = _check(fn, want, world, device)
                if reason is None:
                    fns[label], errors[label] = fn, err
                else:
                    skipped[label] = reason
        else:
            skipped["torchtitan"] = missing
    timing = TimingConfig(warmup=spec.warmup, iters=spec.iters)
    summaries = time_interleaved({**fns, **base}, config=timing, rounds=spec.rounds or spec.iters, device=device)
    rows_in = torch.tensor([float(sum(seq.state["out_splits"]))])
    dist.all_reduce(rows_in, op=dist.ReduceOp.MAX)
    return {"schema": SCHEMA, "layer": asdict(layer), "tokens": spec.tokens, "skew": spec.skew,
            "dtype": canonical_dtype(spec.dtype), "world": world, "e_local": e_local,
            "direction": "forward+backward" if backward else "forward",
            "busiest_rank_rows": int(rows_in.item()), "threads_per_rank": torch.get_num_threads(),
            "times": {k: s.to_dict() for k, s in summaries.items()}, "errors": errors, "skipped": skipped}


def score(result: dict) -> list[dict]:
    """One row per timed candidate: median, overlap efficiency (or speedup), speedups over ``sequential_ep``
    and ``torchtitan``, sorted as measured (baselines last)."""
    from hocket.bench.efficiency import overlap_score

    times = {k: v["median_ms"] for k, v in result["times"].items()}
    sequential = times.get("sequential", times["sequential_ep"])
    compute, comm = times["compute_alone"], times["comm_alone"]
    rows = []
    for label, ms in times.items():
        if label in ("compute_alone", "comm_alone"):
            continue
        s = overlap_score(measured_ms=ms, sequential_ms=sequential, compute_alone_ms=compute, comm_alone_ms=comm)
        rows.append({"candidate": label, "median_ms": ms, "p10_ms": result["times"][label]["p10_ms"],
                     "p90_ms": result["times"][label]["p90_ms"], "metric": s.metric, "score": s.label(),
                     "overlap_efficiency": s.overlap_efficiency, "hidden_fraction": s.hidden_fraction,
                     "vs_sequential_ep": times["sequential_ep"] / ms,
                     "vs_torchtitan": times["torchtitan"] / ms if "torchtitan" in times else None,
                     "max_error": result["errors"].get(label)})
    return rows


def table_lines(result: dict) -> list[str]:
    """A markdown table of :func:`score` with the run's baselines in its caption."""
    layer = MoeLayer(**result["layer"])
    t = result["times"]
    lines = [f"**{layer.label()}**, {result.get('direction', 'forward')}, {result['tokens']} tokens/rank, "
             f"{result['skew']}, {result['dtype']}, world "
             f"{result['world']} ({result['e_local']} experts/rank, busiest rank receives "
             f"{result['busiest_rank_rows']} rows): compute alone {t['compute_alone']['median_ms']:.2f} ms, comm "
             f"alone {t['comm_alone']['median_ms']:.2f} ms", "",
             "| candidate | median ms | p10-p90 | efficiency (or speedup) | vs sequential_ep | vs torchtitan | "
             "max err |", "|---|---|---|---|---|---|---|"]
    for r in score(result):
        tt = f"{r['vs_torchtitan']:.2f}x" if r["vs_torchtitan"] else "-"
        err = f"{r['max_error']:.1e}" if r["max_error"] is not None else "-"
        lines.append(f"| {r['candidate']} | {r['median_ms']:.2f} | {r['p10_ms']:.2f}-{r['p90_ms']:.2f} | {r['score']} "
                     f"| {r['vs_sequential_ep']:.2f}x | {tt} | {err} |")
    for label, why in result["skipped"].items():
        lines.append(f"| {label} | not run: {why} | | | | | |")
    return lines


def rank_entry(rank: int, world_size: int, specs: tuple[MoeBenchSpec, ...]) -> list[dict]:
    """Target of ``hocket.launch.spawn``: every spec in turn on the default group (CPU ranks)."""
    del rank, world_size
    return [run_on_rank(spec) for spec in specs]


def run_specs(specs: tuple[MoeBenchSpec, ...], *, world: int = 2, threads_per_rank: int = 1,
              timeout_s: float = 1800.0) -> list[dict]:
    """Spawn ``world`` gloo ranks and run every spec; rank 0's results."""
    from hocket.launch.spawn import spawn

    results = spawn(rank_entry, world_size=world, backend="gloo", args=(tuple(specs),), timeout_s=timeout_s,
                    threads_per_rank=threads_per_rank)
    return results[0]

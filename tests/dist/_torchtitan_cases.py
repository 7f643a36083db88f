"""torchtitan's expert-parallel MoE (``AllToAllTokenDispatcher`` + ``GroupedExperts``) as hocket's client.

Builders shared by the rank tests (tests/dist/test_torchtitan_moe.py) and the graph tests (tests/graph/
test_moe_*.py): torchtitan's own modules at tiny shapes, routing drawn per rank, and the checks run on every rank.
torchtitan 0.3 runs outside its trainer once its SPMD backend is ``partial_dtensor`` (the default,
``spmd_types``, reads a mesh only its trainer sets).
"""

from __future__ import annotations

import copy
import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class MoeCase:
    seed: int
    experts: int = 4
    hidden: int = 16
    ffn: int = 8
    topk: int = 2
    tokens: int = 6
    """tokens on every rank (torchtitan pads the sequence so ranks agree)."""
    skew: str = "uniform"
    """``uniform``: any distinct experts; ``one``: every token's first choice is expert 0; ``local``: rank r's
    tokens all go to rank r's experts (no rows cross)."""
    shared: bool = False
    """torchtitan's full ``MoE`` (router and shared expert) instead of ``RoutedExperts`` alone."""
    strategy: str | None = None
    """the plan hocket runs (None: the planner's)."""
    layers: int = 1
    """full MoE layers in sequence (``shared`` cases)."""


def _torchtitan() -> None:
    import torchtitan.distributed.utils as tt_utils

    tt_utils.set_spmd_backend("partial_dtensor")


def ep_mesh(world: int) -> object:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (world,), mesh_dim_names=("ep",))


def build_routed_experts(case: MoeCase, mesh: object, *, rank: int = 0) -> torch.nn.Module:
    """torchtitan's ``RoutedExperts`` with this rank's ``experts // world`` experts, wired to ``mesh``."""
    _torchtitan()
    from torchtitan.models.common.moe import GroupedExperts, RoutedExperts
    from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher

    world = mesh.size()
    config = RoutedExperts.Config(
        inner_experts=GroupedExperts.Config(dim=case.hidden, hidden_dim=case.ffn, num_experts=case.experts // world),
        token_dispatcher=AllToAllTokenDispatcher.Config(num_experts=case.experts, top_k=case.topk))
    module = config.build()
    generator = torch.Generator().manual_seed(case.seed * 100 + rank)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.2)
    module.token_dispatcher.wire_meshes(ep_mesh=mesh)
    return module


def build_moe(case: MoeCase, mesh: object, *, rank: int = 0) -> torch.nn.Module:
    """torchtitan's full ``MoE`` layer (router, routed experts, a shared expert), EP over ``mesh``."""
    _torchtitan()
    from torchtitan.models.common.linear import Linear
    from torchtitan.models.common.moe import MoE, TokenChoiceTopKRouter

    routed = build_routed_experts(case, mesh, rank=rank)
    config = MoE.Config(
        num_experts=case.experts, routed_experts=_routed_config(case, mesh.size()),
        router=TokenChoiceTopKRouter.Config(num_experts=case.experts, top_k=case.topk, score_func="softmax",
                                            gate=Linear.Config(in_features=case.hidden, out_features=case.experts,
                                                               bias=False)),
        load_balance_coeff=None,
        shared_experts=_feed_forward(case) if case.shared else None)
    moe = config.build()
    moe.routed_experts = routed
    generator = torch.Generator().manual_seed(case.seed * 100 + 50)  # router and shared expert: same on every rank
    with torch.no_grad():
        for name, param in moe.named_parameters():
            if not name.startswith("routed_experts."):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.2)
    return moe


def build_model(case: MoeCase, mesh: object, *, rank: int = 0) -> torch.nn.Module:
    """``RoutedExperts`` alone, or ``case.layers`` full ``MoE`` layers in sequence (each its own weights)."""
    if not case.shared:
        return build_routed_experts(case, mesh, rank=rank)
    layers = [build_moe(dataclasses.replace(case, seed=case.seed + i), mesh, rank=rank) for i in range(case.layers)]
    return layers[0] if case.layers == 1 else torch.nn.Sequential(*layers)


def rewire(model: torch.nn.Module, mesh: object) -> torch.nn.Module:
    """Point every dispatcher of ``model`` (a deep copy) back at ``mesh``."""
    for module in model.modules():
        dispatcher = getattr(module, "token_dispatcher", None)
        if dispatcher is not None:
            dispatcher.ep_mesh = mesh
    return model


def _feed_forward(case: MoeCase) -> object:
    from torchtitan.models.common.feed_forward import FeedForward
    from torchtitan.models.common.linear import Linear

    def linear(i: int, o: int) -> object:
        return Linear.Config(in_features=i, out_features=o, bias=False)

    return FeedForward.Config(w1=linear(case.hidden, case.ffn), w2=linear(case.ffn, case.hidden),
                              w3=linear(case.hidden, case.ffn))


def _routed_config(case: MoeCase, world: int) -> object:
    from torchtitan.models.common.moe import GroupedExperts, RoutedExperts
    from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher

    return RoutedExperts.Config(
        inner_experts=GroupedExperts.Config(dim=case.hidden, hidden_dim=case.ffn, num_experts=case.experts // world),
        token_dispatcher=AllToAllTokenDispatcher.Config(num_experts=case.experts, top_k=case.topk))


def routing(case: MoeCase, *, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x [1, T, hidden], scores [1, T, k], expert ids [1, T, k], tokens per expert [E]) of this rank."""
    generator = torch.Generator().manual_seed(case.seed * 1000 + rank)
    t, k, e = case.tokens, case.topk, case.experts
    x = torch.randn(1, t, case.hidden, generator=generator)
    scores = torch.rand(1, t, k, generator=generator)
    rows = []
    e_local = e // world
    for _ in range(t):
        order = torch.randperm(e, generator=generator)
        if case.skew == "one":
            order = torch.cat([torch.tensor([0]), order[order != 0]])
        elif case.skew == "local":
            mine = torch.arange(rank * e_local, (rank + 1) * e_local)
            order = mine[torch.randperm(e_local, generator=generator)]
        rows.append(order[:k])
    ids = torch.stack(rows).view(1, t, k)
    counts = torch.bincount(ids.view(-1), minlength=e)
    return x, scores, ids, counts


def clone_module(module: torch.nn.Module) -> torch.nn.Module:
    """A deep copy sharing no parameters (the dispatcher's mesh is kept, not copied)."""
    dispatcher = getattr(getattr(module, "token_dispatcher", None), "ep_mesh", None)
    copied = copy.deepcopy(module)
    if dispatcher is not None:
        copied.token_dispatcher.ep_mesh = dispatcher
    return copied


# -- checks run on every rank ------------------------------------------------------------------

def _plan(case: MoeCase) -> object:
    from hocket.core.plan import Plan

    if case.strategy is None:
        return None
    chunks = 2 if case.strategy in ("token_blocks", "expert_groups") else 1
    return Plan(strategy=case.strategy, chunks=chunks, splits="exchanged")


def _step(module: torch.nn.Module, case: MoeCase, inputs: tuple, *, full: bool) -> dict[str, torch.Tensor]:
    """One forward and backward (a fixed, non-uniform output gradient); the output and every gradient."""
    x, scores, ids, counts = inputs
    x = x.clone().requires_grad_()
    scores = scores.clone().requires_grad_()
    out = module(x) if full else module(x, scores, ids, counts)
    weight = torch.arange(out.numel(), dtype=out.dtype).view_as(out).sin()
    (out * weight).sum().backward()
    got = {"out": out.detach(), "x.grad": x.grad}
    if not full:
        got["scores.grad"] = scores.grad
    for name, param in module.named_parameters():
        got[f"{name.removeprefix('_orig_mod.')}.grad"] = param.grad
    return got


def compare(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], *, world: int) -> dict[str, float]:
    """Assert every entry of ``actual`` is within bfloat16's tolerance of ``expected`` (both compute the experts
    in bfloat16); returns the errors."""
    from hocket.ops.tolerance import assert_close, max_error

    assert set(actual) == set(expected), (sorted(actual), sorted(expected))
    errors = {}
    for name, want in expected.items():
        got = actual[name]
        assert got is not None and want is not None, f"{name} is missing"
        assert_close(got.bfloat16(), want.bfloat16(), world=world, what=name)
        errors[name] = max_error(got.float(), want.float())
    return errors


def eager_matches_torchtitan(case: MoeCase) -> dict[str, float]:
    """torchtitan's dispatch + experts vs the hocket drop-in on the same weights and routing."""
    import torch.distributed as dist

    from hocket.graph.moe import hocket_experts_for, use_hocket_experts

    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = ep_mesh(world)
    inputs = routing(case, rank=rank, world=world)
    if case.shared:
        ref = build_moe(case, mesh, rank=rank)
        mine = copy.deepcopy(ref)
        mine.routed_experts.token_dispatcher.ep_mesh = mesh
        assert use_hocket_experts(mine, plan=_plan(case)) == 1
    else:
        ref = build_routed_experts(case, mesh, rank=rank)
        mine = hocket_experts_for(clone_module(ref), plan=_plan(case))
    expected = _step(ref, case, inputs, full=case.shared)
    actual = _step(mine, case, inputs, full=case.shared)
    return compare(actual, expected, world=world)


def compiled_matches_torchtitan(case: MoeCase) -> dict:
    """``hocket.compile`` of torchtitan's module vs torchtitan eager, two steps (the second with another
    routing, no recompile expected); what explain says."""
    import torch.distributed as dist

    import hocket
    from hocket.graph import PassConfig
    from hocket.graph.moe import capture_split_sizes
    from hocket.ops.moe_trace import recording

    rank, world = dist.get_rank(), dist.get_world_size()
    torch._dynamo.reset()
    mesh = ep_mesh(world)
    ref = build_model(case, mesh, rank=rank)
    mine = rewire(copy.deepcopy(ref), mesh)
    plan = _plan(case)
    if plan is None:  # the planner's choice, rewritten even when sequential: every call re-plans its routing
        options = {"config": PassConfig(rewrite_sequential=True)}
    else:
        options = {"plan_for": lambda site: plan}
    compiled = hocket.compile(mine, backend="aot_eager", cluster="cpu-host", dynamic=False, **options)
    errors: dict[str, float] = {}
    for step in range(2):
        inputs = routing(dataclasses.replace(case, seed=case.seed + 17 * step), rank=rank, world=world)
        for module in (ref, compiled):
            module.zero_grad(set_to_none=True)
        expected = _step(ref, case, inputs, full=case.shared)
        with capture_split_sizes(), recording() as events:
            actual = _step(compiled, case, inputs, full=case.shared)
        if step == 1:
            trace = [tuple(e) for e in events]
        for name, error in compare(actual, expected, world=world).items():
            errors[name] = max(error, errors.get(name, 0.0))
    report = hocket.explain(compiled)
    torch._dynamo.reset()
    return {"errors": errors, "moe": [m.to_dict() for m in report.moe_sites],
            "gaps": [g.to_dict() for g in report.gaps], "left_alone": [x.to_dict() for x in report.left_alone],
            "graphs": [g.graph for g in report.graphs], "text": report.format(), "trace": trace}


def graph_break_left_alone(case: MoeCase) -> dict:
    """``hocket.compile`` without ``capture_scalar_outputs``: the split sizes' ``.tolist()`` breaks the graph inside
    torchtitan's mesh context, Dynamo runs the layer eagerly, and it must compute exactly what torchtitan
    computes; ``hocket.graph.moe_compile.compile_moe`` (the same compile, split sizes traced) finds and rewrites it."""
    import torch.distributed as dist

    import hocket
    from hocket.graph.moe_compile import compile_moe

    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = ep_mesh(world)
    inputs = routing(case, rank=rank, world=world)
    ref = build_routed_experts(case, mesh, rank=rank)
    expected = _step(ref, case, inputs, full=False)
    found = {}
    for how in ("compile", "compile_moe"):
        torch._dynamo.reset()
        entry = hocket.compile if how == "compile" else compile_moe
        compiled = entry(clone_module(ref), backend="aot_eager", cluster="cpu-host",
                         plan_for=lambda site: _plan(case), dynamic=False)
        with torch._dynamo.config.patch(capture_scalar_outputs=False):
            actual = _step(compiled, case, inputs, full=False)
        report = hocket.explain(compiled)
        if how == "compile":
            for name, want in expected.items():
                assert torch.equal(actual[name], want), f"{name} changed although the layer ran as torchtitan's"
        else:
            compare(actual, expected, world=world)
        found[how] = [m.to_dict() for m in report.moe_sites]
    torch._dynamo.reset()
    return found

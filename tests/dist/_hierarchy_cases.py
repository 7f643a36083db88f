"""Rank side of tests/dist/test_hierarchy_*.py: hierarchical (``hierarchy="intra_first"``) plans on gloo world 4
described as two nodes of two ranks (the ``cpu-2node`` preset), against the one-process reference; a recorder
of the process group every torch.distributed collective runs on; the bad-input cases."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist

import hocket.ops as H
from hocket.core.plan import Plan
from hocket.hardware import load_cluster
from hocket.launch.same_case import rank_generator
from hocket.ops import planning
from hocket.ops.dispatch import clear_prepared_cache
from hocket.ops.live import LivePlanner, plan_for_call, set_process_planner
from hocket.ops.reference import all_gather_matmul_global, matmul_all_reduce_global, matmul_reduce_scatter_global
from hocket.transport import torch_dist
from hocket.transport.hierarchical import _SUB_GROUPS

TWO_NODES = "cpu-2node"


def operand(seed: int, rank: int, shape, dtype: str, salt: int = 0) -> torch.Tensor:
    gen = rank_generator(seed * 11 + salt, rank=rank)
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float32).to(getattr(torch, dtype))


@contextmanager
def on_cluster(name: str, backward: dict | None = None) -> Iterator[None]:
    """Within the block the process planner describes cluster ``name``; ``backward`` (site kind -> plan dict)
    is what ``plan=None`` calls (the backward's) run. Prepared calls and chosen plans are dropped on entry and
    exit, so no call outside the block reuses the block's layout."""
    set_process_planner(LivePlanner(cluster=load_cluster(name)))
    clear_prepared_cache()
    planning.clear_plan_cache()
    if backward is not None:
        planning.set_call_planner(lambda site, **options: Plan.from_dict(backward[site.kind]))
    try:
        yield
    finally:
        planning.set_call_planner(lambda site, **options: plan_for_call(site, **options))
        set_process_planner(None)
        clear_prepared_cache()
        planning.clear_plan_cache()


def _plan(case: dict, *, hierarchical: bool = True) -> dict:
    """``case``'s plan (with ``hierarchy="intra_first"`` unless ``hierarchical`` is False)."""
    plan = {"strategy": case["strategy"], "chunks": case.get("chunks", 1),
            "hierarchy": "intra_first" if hierarchical else None}
    if case.get("order", "natural") != "natural":
        plan["order"] = case["order"]
    if case["strategy"] == "substituted":
        plan["substitute"] = "rs_ag"
    return plan


def backward_plans(case: dict, *, hierarchical: bool = True) -> dict:
    """The plan each backward site kind runs for ``case`` (substituted serves mm_ar only, so the other kinds
    run chunked with the same pieces)."""
    plans = {}
    for kind in ("ag_mm", "mm_rs", "mm_ar"):
        strategy = case["strategy"] if case["strategy"] != "substituted" or kind == "mm_ar" else "chunked"
        plans[kind] = _plan({**case, "strategy": strategy}, hierarchical=hierarchical)
    return plans


def forward_case(case: dict) -> float:
    """Two calls of ``case``'s operator with its hierarchical plan (the second reuses the sub-groups and the
    scratch buffers, with fresh inputs); returns the worst error against the reference."""
    w, rank = dist.get_world_size(), dist.get_rank()
    kind, shape, dim, dtype = case["kind"], list(case["shape"]), case["dim"], case["dtype"]
    plan = _plan(case)
    worst = 0.0
    with on_cluster(TWO_NODES):
        for call in range(2):
            seed = case["seed"] + call
            if kind == "ag_mm":
                shards = [operand(seed, r, shape, dtype) for r in range(w)]
                K = shape[-1] * (w if dim == len(shape) - 1 else 1)
                Bs = [operand(seed, rank, (K, n), dtype, 1 + i) for i, n in enumerate(case["ns"])]
                eA, eouts = all_gather_matmul_global(shards, Bs, dim)
                A, outs = H.all_gather_matmul(shards[rank], Bs, dim, dist.group.WORLD, return_A=True, plan=plan)
                pairs = [(A, eA), *zip(outs, eouts)]
            elif kind == "mm_rs":
                As = [operand(seed, r, shape, dtype) for r in range(w)]
                Bs = [operand(seed, r, (shape[-1], case["ns"][0]), dtype, 1) for r in range(w)]
                expected = matmul_reduce_scatter_global(As, Bs, case["reduce_op"], dim)[rank]
                out = H.matmul_reduce_scatter(As[rank], Bs[rank], case["reduce_op"], dim, dist.group.WORLD, plan=plan)
                pairs = [(out, expected)]
            else:
                As = [operand(seed, r, shape, dtype) for r in range(w)]
                Bs = [operand(seed, r, (shape[-1], case["ns"][0]), dtype, 1) for r in range(w)]
                expected = matmul_all_reduce_global(As, Bs, case["reduce_op"])
                out = H.matmul_all_reduce(As[rank], Bs[rank], case["reduce_op"], dist.group.WORLD, plan=plan)
                pairs = [(out, expected)]
            for got, expected in pairs:
                H.assert_close(got, expected, world=w, what=f"call {call} {case}")
                worst = max(worst, H.max_error(got, expected))
    return worst


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True)


def _forward_backward(case: dict, seed: int, *, hierarchical: bool = True) -> list[tuple[str, torch.Tensor,
                                                                                         torch.Tensor]]:
    """This rank's gradients from hocket (the case's forward plan; the backward's come from the call planner)
    and from plain autograd over every rank's operands in float64, as (what, got, expected)."""
    w, rank = dist.get_world_size(), dist.get_rank()
    kind, shape, dim, dtype = case["kind"], list(case["shape"]), case["dim"], case["dtype"]
    group, n = dist.group.WORLD, case["ns"][0]
    plan = _plan(case, hierarchical=hierarchical)
    if kind == "ag_mm":
        K = shape[-1] * (w if dim == len(shape) - 1 else 1)
        shards = [operand(seed, r, shape, dtype) for r in range(w)]
        Bs = [operand(seed, r, (K, n), dtype, 1) for r in range(w)]
        full = list(shape)
        full[dim] *= w
        Gs = [operand(seed, r, (*full[:-1], n), dtype, 10) for r in range(w)]
        A, B = _leaf(shards[rank]), _leaf(Bs[rank])
        _, (out,) = H.all_gather_matmul(A, [B], dim, group, return_A=False, plan=plan,
                                        save_gathered=case.get("save_gathered", True))
        (out * Gs[rank]).sum().backward()
        ref_A, ref_B = [_leaf(s.double()) for s in shards], [_leaf(b.double()) for b in Bs]
        A_full = torch.cat(ref_A, dim=dim)
        sum((A_full @ b * g.double()).sum() for b, g in zip(ref_B, Gs)).backward()
        return [("dA_shard", A.grad, ref_A[rank].grad), ("dB", B.grad, ref_B[rank].grad)]
    As = [operand(seed, r, shape, dtype) for r in range(w)]
    Bs = [operand(seed, r, (shape[-1], n), dtype, 1) for r in range(w)]
    A, B = _leaf(As[rank]), _leaf(Bs[rank])
    ref_A, ref_B = [_leaf(a.double()) for a in As], [_leaf(b.double()) for b in Bs]
    scale = 1.0 / w if case["reduce_op"] == "avg" else 1.0
    total = sum(a @ b for a, b in zip(ref_A, ref_B)) * scale
    out_shape = [*shape[:-1], n]
    if kind == "mm_rs":
        out_shape[dim] //= w
        Gs = [operand(seed, r, out_shape, dtype, 10) for r in range(w)]
        out = H.matmul_reduce_scatter(A, B, case["reduce_op"], dim, group, plan=plan)
        (out * Gs[rank]).sum().backward()
        sum((blk * g.double()).sum() for blk, g in zip(total.chunk(w, dim=dim), Gs)).backward()
    else:  # mm_ar: the incoming gradient is replicated (identity backward)
        G = operand(seed, 0, out_shape, dtype, 10)
        out = H.matmul_all_reduce(A, B, case["reduce_op"], group, plan=plan)
        (out * G).sum().backward()
        (total * G.double()).sum().backward()
    return [("dA", A.grad, ref_A[rank].grad), ("dB", B.grad, ref_B[rank].grad)]


def grads_case(case: dict) -> int:
    """Forward and backward of ``case`` with hierarchical plans in both directions; returns the checks made."""
    w = dist.get_world_size()
    checks = 0
    with on_cluster(TWO_NODES, backward=backward_plans(case)):
        for what, got, expected in _forward_backward(case, case["seed"]):
            H.assert_close(got, expected.to(got.dtype), world=w, what=f"{what} {case}")
            checks += 1
    return checks


# -- which group each collective runs on -------------------------------------------------------
def _group_name(args: tuple, kwargs: dict) -> str:
    group = kwargs.get("group")
    if group is None:
        group = next((a for a in args if isinstance(a, dist.ProcessGroup)), None)
    return (group or dist.group.WORLD).group_name


@contextmanager
def recording_collectives() -> Iterator[list[tuple[str, str]]]:
    """Every collective and P2P batch torch.distributed runs inside the block, as (op, process group name):
    the functions hocket's transports call (the tensor all-gather / reduce-scatter as
    :mod:`hocket.transport.torch_dist` resolved them, all_reduce, batch_isend_irecv) and the list forms."""
    seen: list[tuple[str, str]] = []
    patched: list[tuple[object, str, object]] = []

    def wrap(owner: object, attr: str, op: str) -> None:
        original = getattr(owner, attr)

        def recorded(*args, **kwargs):
            seen.append((op, _group_name(args, kwargs)))
            return original(*args, **kwargs)

        patched.append((owner, attr, original))
        setattr(owner, attr, recorded)

    def wrap_batch() -> None:
        original = dist.batch_isend_irecv

        def recorded(ops):
            seen.extend(("p2p", op.group.group_name if op.group is not None else dist.group.WORLD.group_name)
                        for op in ops)
            return original(ops)

        patched.append((dist, "batch_isend_irecv", original))
        dist.batch_isend_irecv = recorded

    wrap(torch_dist, "_all_gather_into", "all_gather")
    wrap(torch_dist, "_reduce_scatter_into", "reduce_scatter")
    for name in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all_single", "all_gather_into_tensor",
                 "reduce_scatter_tensor"):
        wrap(dist, name, name)
    wrap_batch()
    try:
        yield seen
    finally:
        for owner, attr, original in reversed(patched):
            setattr(owner, attr, original)


def groups_used(case: dict) -> dict:
    """The process groups the collectives of one forward + backward of ``case`` ran on (after a first call
    that makes the sub-groups and agrees), with this rank's flat and sub-group names. ``case["flat"]``: run
    the plans without the hierarchy (the recorder's control)."""
    hierarchical = not case.get("flat", False)
    w = dist.get_world_size()
    with on_cluster(TWO_NODES, backward=backward_plans(case, hierarchical=hierarchical)):
        _forward_backward(case, case["seed"], hierarchical=hierarchical)  # sub-groups made, descriptors agreed
        with recording_collectives() as seen:
            for what, got, expected in _forward_backward(case, case["seed"] + 1, hierarchical=hierarchical):
                H.assert_close(got, expected.to(got.dtype), world=w, what=f"{what} {case}")
        subs = [entry[1] for entry in _SUB_GROUPS.values() if entry[0] is dist.group.WORLD and not entry[1]._closed]
        names = {"intra": sorted({s.intra.name for s in subs}), "inter": sorted({s.inter.name for s in subs})}
    return {"seen": seen, "flat": dist.group.WORLD.group_name, **names}


# -- bad input ----------------------------------------------------------------------------------
def hierarchy_on_cluster(case: dict) -> None:
    """One call of ``case["kind"]`` with a hierarchical plan while the planner describes ``case["cluster"]``
    (expected to raise on every rank)."""
    w, rank = dist.get_world_size(), dist.get_rank()
    plan = {"strategy": case.get("strategy", "bulk"), "hierarchy": "intra_first",
            "transport": case.get("transport", "collective")}
    with on_cluster(case["cluster"]):
        A = operand(0, rank, (4 * w, 3), "float32")
        B = operand(0, rank, (3, 2), "float32", 1)
        if case["kind"] == "ag_mm":
            H.all_gather_matmul(A, [B], 0, dist.group.WORLD, plan=plan)
        elif case["kind"] == "mm_rs":
            H.matmul_reduce_scatter(A, B, "sum", 0, dist.group.WORLD, plan=plan)
        else:
            H.matmul_all_reduce(A, B, "sum", dist.group.WORLD, plan=plan)


def hierarchy_on_mixed_clusters(case: dict) -> None:
    """Rank 0 describes two nodes of two ranks, the others one node: an explicit hierarchical plan must raise
    on every rank (the others' own error, rank 0 the RankInputError quoting it), none waiting."""
    mixed = dict(case, cluster=TWO_NODES if dist.get_rank() == 0 else "cpu-host")
    hierarchy_on_cluster(mixed)


def hierarchy_chosen_on_cluster(case: dict) -> dict:
    """A ``plan=None`` call for which the call planner returns a hierarchical plan while the cluster says the
    group lies in one node: it must run flat on every rank, with a PlannerWarning, and match the reference."""
    import warnings

    from hocket.ops.live import PlannerWarning

    w, rank = dist.get_world_size(), dist.get_rank()
    chosen = {kind: {"strategy": "bulk", "hierarchy": "intra_first"} for kind in ("ag_mm", "mm_rs", "mm_ar")}
    As = [operand(3, r, (4 * w, 3), "float32") for r in range(w)]
    Bs = [operand(3, r, (3, 2), "float32", 1) for r in range(w)]
    with on_cluster(case["cluster"], backward=chosen), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = H.matmul_reduce_scatter(As[rank], Bs[rank], "sum", 0, dist.group.WORLD, plan=None)
        with recording_collectives() as seen:
            again = H.matmul_reduce_scatter(As[rank], Bs[rank], "sum", 0, dist.group.WORLD, plan=None)
    expected = matmul_reduce_scatter_global(As, Bs, "sum", 0)[rank]
    H.assert_close(out, expected, world=w, what="the flat fallback")
    H.assert_close(again, expected, world=w, what="the flat fallback, second call")
    warned = [str(c.message) for c in caught if issubclass(c.category, PlannerWarning)]
    return {"warned": warned, "groups": sorted({name for _, name in seen}), "flat": dist.group.WORLD.group_name}


def closed_and_made_again(case: dict) -> dict:
    """A hierarchical call, ``close_contexts()`` (which closes the call's SubGroups and frees their buffers), then
    the same call again: a new SubGroups over the same process groups, still matching the reference. Returns
    the sub-group names before and after."""
    w, rank = dist.get_world_size(), dist.get_rank()
    As = [operand(5, r, (4 * w, 3), "float32") for r in range(w)]
    Bs = [operand(5, r, (3, 2), "float32", 1) for r in range(w)]
    expected = matmul_all_reduce_global(As, Bs, "sum")
    names = []
    with on_cluster(TWO_NODES):
        for _ in range(2):
            out = H.matmul_all_reduce(As[rank], Bs[rank], "sum", dist.group.WORLD,
                                      plan={"strategy": "chunked", "chunks": 2, "hierarchy": "intra_first"})
            H.assert_close(out, expected, world=w, what="after close_contexts")
            subs = [e[1] for e in _SUB_GROUPS.values() if e[0] is dist.group.WORLD and not e[1]._closed]
            names.append(sorted({s.intra.name for s in subs} | {s.inter.name for s in subs}))
            closed = subs[0]
            H.close_contexts()
            clear_prepared_cache()
            assert closed._closed and not any(e[1] is closed for e in _SUB_GROUPS.values())
    return {"before": names[0], "after": names[1]}

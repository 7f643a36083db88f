"""Find expert-parallel MoE layers (torchtitan's ``AllToAllTokenDispatcher`` + ``GroupedExperts``) in fx graphs.

The pattern is matched on Dynamo's graph (before AOTAutograd: ``call_method`` and Python-operator nodes);
:func:`op_name` also names the ATen spellings (post-autograd graphs price their all-to-alls with it; there the
unpermute is an ``index_put``, reported as unsupported). The pattern, through views and dtype casts:

1. ``s = argsort(ids.view(-1), stable=True)`` (or ``sort(...)[1]``), ``t = s // k``, rows ``x[t]``;
2. ``recv = all_to_all_single(x[t], out_splits, in_splits, group)`` + ``wait_tensor``;
3. ``xe = recv[perm, :]`` (rank-major to expert-major), then three ``_grouped_mm`` on one ``offs``:
   ``gate = xe @ B_gate``, ``up = xe @ B_up``, ``y = (silu(gate) * up) @ B_down``;
4. ``buf = new_empty(...)``; ``buf[perm, :] = y``; ``back = all_to_all_single(buf, in_splits, out_splits, group)``
   (the dispatch's split lists swapped) + ``wait_tensor``;
5. ``out = scatter_add(zeros_like(x), t.view(-1, 1).expand(-1, hidden), back * scores.view(-1)[s].view(-1, 1))``.

Every all-to-all with split lists that is not such a layer is reported with the first step that did not match.
The finder only reads the graph; :mod:`hocket.graph.moe_rewrite` acts on its :class:`MoeMatch`.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import fx

_FUNCTION_NAMES: dict[object, str] = {
    operator.getitem: "getitem", operator.setitem: "setitem", operator.mul: "mul", torch.mul: "mul",
    operator.add: "add", torch.add: "add",
    operator.floordiv: "floordiv", torch.floor_divide: "floordiv", torch._grouped_mm: "grouped_mm",
    F.silu: "silu", torch.argsort: "argsort", torch.sort: "sort", torch.zeros_like: "zeros_like",
    torch.reshape: "reshape", torch.transpose: "transpose", torch.scatter_add: "scatter_add",
}
_OP_NAMES = {
    "_c10d_functional::all_to_all_single": "a2a", "_c10d_functional::wait_tensor": "wait",
    "aten::_grouped_mm": "grouped_mm", "aten::silu": "silu", "aten::mul": "mul", "aten::add": "add",
    "aten::view": "view",
    "aten::reshape": "reshape", "aten::_unsafe_view": "view", "aten::_to_copy": "cast",
    "prims::convert_element_type": "cast", "aten::index": "index", "aten::floor_divide": "floordiv",
    "aten::sort": "sort", "aten::argsort": "argsort", "aten::zeros_like": "zeros_like",
    "aten::scatter_add": "scatter_add", "torchtitan::deterministic_scatter_add": "scatter_add",
    "aten::new_empty": "new_empty", "aten::transpose": "transpose", "aten::expand": "expand",
    "aten::index_put": "index_put",
}
_METHOD_NAMES = {
    "view": "view", "reshape": "reshape", "bfloat16": "cast", "float": "cast", "half": "cast", "to": "cast",
    "type_as": "cast", "contiguous": "contiguous", "transpose": "transpose", "new_empty": "new_empty",
    "expand": "expand", "scatter_add": "scatter_add", "argsort": "argsort", "sort": "sort",
}
PASS_THROUGH = frozenset({"view", "reshape", "cast", "contiguous"})
"""Ops that keep rows in order: a chain of them is the same rows (another shape or dtype)."""


def op_name(node: object) -> str | None:
    """The canonical name of what ``node`` computes (one name per Dynamo, Python and ATen spelling)."""
    if not isinstance(node, fx.Node):
        return None
    if node.op == "call_method":
        return _METHOD_NAMES.get(str(node.target))
    if node.op != "call_function":
        return None
    target = node.target
    try:
        if target in _FUNCTION_NAMES:
            return _FUNCTION_NAMES[target]
    except TypeError:  # unhashable target
        return None
    if isinstance(target, torch._ops.OpOverload):
        return _OP_NAMES.get(target._schema.name)
    if isinstance(target, torch._ops.OpOverloadPacket):
        return _OP_NAMES.get(target._qualified_op_name)
    return None


def value(node: object) -> object:
    """The example (fake) value of a node: ``meta['val']`` (AOTAutograd) or ``meta['example_value']`` (Dynamo)."""
    if not isinstance(node, fx.Node):
        return None
    meta = node.meta
    return meta["val"] if "val" in meta else meta.get("example_value")


def shape_of(node: object) -> tuple[int, ...] | None:
    """Static shape of a tensor node (None when unknown or symbolic)."""
    v = value(node)
    if not isinstance(v, torch.Tensor):
        return None
    dims = tuple(v.shape)
    return dims if all(isinstance(d, int) for d in dims) else None


def dtype_of(node: object) -> torch.dtype | None:
    v = value(node)
    return v.dtype if isinstance(v, torch.Tensor) else None


def _is_cast_like(node: fx.Node) -> bool:
    """A pass-through op; a method ``.to(...)`` only when it names no device (a dtype-only cast)."""
    if op_name(node) not in PASS_THROUGH:
        return False
    if node.op == "call_method" and node.target == "to":
        return not any(isinstance(a, (torch.device, str)) for a in (*node.args[1:], *node.kwargs.values()))
    return True


def source(node: object) -> object:
    """Walk up through pass-through ops (and waits on waits) to the node that produced the rows."""
    while isinstance(node, fx.Node) and (_is_cast_like(node) or (op_name(node) == "wait"
                                                                 and op_name(node.args[0]) == "wait")):
        node = node.args[0]
    return node


def reachable(node: fx.Node) -> list[fx.Node]:
    """``node`` and every node derived from it through pass-through ops, in discovery order."""
    found, stack = [node], [node]
    while stack:
        current = stack.pop()
        for user in current.users:
            if user not in found and (_is_cast_like(user) or (op_name(user) == "wait"
                                                               and op_name(current) == "wait")):
                found.append(user)
                stack.append(user)
    return found


def _users_named(node: fx.Node, name: str) -> list[fx.Node]:
    return [u for n in reachable(node) for u in n.users if op_name(u) == name]


def _arg(node: fx.Node, index: int, name: str, default: object = None) -> object:
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[index] if len(node.args) > index else default


def a2a_parts(node: fx.Node) -> tuple[fx.Node, object, object, object]:
    """(input, output split sizes, input split sizes, group) of an ``all_to_all_single`` node."""
    return (_arg(node, 0, "input"), _arg(node, 1, "output_split_sizes"), _arg(node, 2, "input_split_sizes"),
            _arg(node, 3, "group_name"))


def has_split_lists(node: fx.Node) -> bool:
    """An all-to-all whose split sizes are given (uneven rows per peer), not the even default."""
    _, out_splits, in_splits, _ = a2a_parts(node)
    return isinstance(out_splits, (list, tuple)) and isinstance(in_splits, (list, tuple))


def _wait_of(node: fx.Node) -> fx.Node | None:
    waits = [u for u in node.users if op_name(u) == "wait"]
    if len(waits) != 1:
        return None
    wait = waits[0]
    while len(wait.users) == 1 and op_name(next(iter(wait.users))) == "wait":
        wait = next(iter(wait.users))
    return wait


def _row_index(node: fx.Node) -> tuple[fx.Node, fx.Node] | None:
    """``base[idx]`` or ``base[idx, :]`` (Python indexing or ``aten.index``) -> (base, idx)."""
    name = op_name(node)
    if name == "getitem":
        base, index = node.args[0], node.args[1]
        if isinstance(index, tuple):
            if len(index) != 2 or index[1] != slice(None, None, None):
                return None
            index = index[0]
        return (base, index) if isinstance(index, fx.Node) and isinstance(value(index), torch.Tensor) else None
    if name == "index":
        indices = node.args[1]
        if len(indices) == 1 and isinstance(indices[0], fx.Node):
            return node.args[0], indices[0]
    return None


@dataclass(frozen=True, kw_only=True)
class MoeUnmatched:
    """An all-to-all with split sizes that is not (all of) an MoE layer the pass rewrites, and why."""

    node: fx.Node
    reason: str


@dataclass(frozen=True, kw_only=True)
class MoeMatch:
    """One expert-parallel MoE layer (module docstring): the nodes the rewrite reads and replaces."""

    dispatch: fx.Node
    combine: fx.Node
    x: fx.Node
    """the tokens ``[T, hidden]`` before routing."""
    ids: fx.Node
    """expert ids; ``[T, k]`` or any shape with ``T * k`` elements."""
    scores: fx.Node
    """routing weights, as many as ``ids``."""
    topk: int
    b_gate: fx.Node
    """``[E_local, hidden, ffn]`` (as the grouped GEMM reads it)."""
    b_up: fx.Node
    b_down: fx.Node
    """``[E_local, ffn, hidden]``."""
    out: fx.Node
    """the combined ``[T, hidden]`` result (the scatter-add)."""
    group_name: str
    world: int
    tokens: int
    hidden: int
    ffn: int
    e_local: int
    compute_dtype: torch.dtype
    """the grouped GEMMs' dtype (torchtitan casts to bfloat16)."""

    @property
    def experts(self) -> int:
        return self.e_local * self.world


def _sorted_order(sort_idx: fx.Node) -> fx.Node | None:
    """``argsort(v, stable=True)`` or ``sort(v, stable=True)[1]`` -> ``v`` (None otherwise)."""
    name = op_name(sort_idx)
    if name == "getitem" and sort_idx.args[1] == 1 and op_name(sort_idx.args[0]) == "sort":
        sort_idx = sort_idx.args[0]
    elif name != "argsort":
        return None
    if sort_idx.kwargs.get("stable") is not True or sort_idx.kwargs.get("descending", False):
        return None
    return sort_idx.args[0]


def _dispatch_rows(node: fx.Node) -> tuple[fx.Node, fx.Node, fx.Node, fx.Node, int] | str:
    """The dispatched rows ``x[argsort(ids.view(-1)) // k]`` -> (x, ids, sort index, token index, k) or why not."""
    taken = _row_index(source(node))
    if taken is None:
        return ("the dispatched rows are not x[argsort(ids) // k] in this graph (a graph break before the "
                "dispatch, e.g. the split sizes' .tolist(): set torch._dynamo.config.capture_scalar_outputs = "
                "True: hocket.graph.moe.capture_split_sizes() or hocket.graph.moe_compile.compile_moe())")
    x, token_idx = taken
    if op_name(token_idx) != "floordiv" or not isinstance(token_idx.args[1], int):
        return "the dispatched rows are not indexed by argsort(ids) // k"
    sort_idx, k = token_idx.args
    flat_ids = _sorted_order(sort_idx)
    if flat_ids is None:
        return "the dispatch order is not a stable argsort of the expert ids"
    ids = source(flat_ids)
    ids_shape, x_shape = shape_of(ids), shape_of(x)
    if ids_shape is None or x_shape is None or len(x_shape) != 2:
        return "the tokens' or expert ids' shape is unknown (symbolic) or the tokens are not [T, hidden]"
    if torch.Size(ids_shape).numel() != x_shape[0] * k:
        return f"expert ids {list(ids_shape)} are not tokens x k = {x_shape[0]} x {k}"
    return x, ids, sort_idx, token_idx, k


def _grouped(node: fx.Node) -> tuple[fx.Node, fx.Node, object]:
    return node.args[0], node.args[1], _arg(node, 2, "offs")


def _experts(recv: fx.Node) -> tuple[fx.Node, fx.Node, fx.Node, fx.Node, fx.Node] | str:
    """From the received rows: (perm, gate mm, up mm, down mm, the written-back rows) or why not."""
    permuted = [u for u in _users_named(recv, "getitem") + _users_named(recv, "index") if _row_index(u)]
    if len(permuted) != 1:
        return "the received rows are not permuted once into expert order (recv[perm, :])"
    xe = permuted[0]
    perm = _row_index(xe)[1]
    firsts = _users_named(xe, "grouped_mm")
    if len(firsts) != 2 or any(source(_grouped(mm)[0]) is not xe for mm in firsts):
        return f"{len(firsts)} grouped GEMM(s) read the expert-ordered rows; the pattern has two (gate and up)"
    gates = [mm for mm in firsts if _users_named(mm, "silu")]
    if len(gates) != 1:
        return "no silu(gate) * up: the expert activation is not SwiGLU"
    gate = gates[0]
    up = firsts[0] if firsts[1] is gate else firsts[1]
    silu = _users_named(gate, "silu")[0]
    muls = [m for m in _users_named(silu, "mul") if any(source(a) is up for a in m.args[:2])]
    if len(muls) != 1:
        return "no silu(gate) * up: the expert activation is not SwiGLU"
    downs = _users_named(muls[0], "grouped_mm")
    if len(downs) != 1 or source(_grouped(downs[0])[0]) is not muls[0]:
        return "the SwiGLU activation does not feed exactly one grouped GEMM (the down projection)"
    down = downs[0]
    if len({id(_grouped(mm)[2]) for mm in (gate, up, down)}) != 1 or not isinstance(_grouped(gate)[2], fx.Node):
        return "the three grouped GEMMs do not share one offs (tokens per expert)"
    return perm, gate, up, down, xe


def _written_back(down: fx.Node, perm: fx.Node) -> fx.Node | str:
    """The buffer ``buf`` with ``buf[perm, :] = down's rows`` (the unpermute) or why not."""
    for node in reachable(down):
        for user in node.users:
            if op_name(user) == "setitem" and user.args[2] is node:
                taken = _row_index_of_setitem(user)
                if taken is None or taken[1] is not perm:
                    return "the expert output is written back with another index than the dispatch's permutation"
                return taken[0]
            if op_name(user) == "index_put" and user.args[2] is node:
                return "the unpermute is an ATen index_put (the pass reads graphs before AOTAutograd)"
    return "the expert output is not written back into a buffer by the dispatch's permutation"


def _row_index_of_setitem(node: fx.Node) -> tuple[fx.Node, fx.Node] | None:
    base, index = node.args[0], node.args[1]
    if isinstance(index, tuple):
        if len(index) != 2 or index[1] != slice(None, None, None):
            return None
        index = index[0]
    return (base, index) if isinstance(index, fx.Node) else None


def _combine_after(buf: fx.Node, graph_nodes: list[fx.Node]) -> fx.Node | None:
    position = {n: i for i, n in enumerate(graph_nodes)}
    combines = [u for n in reachable(buf) for u in n.users if op_name(u) == "a2a" and source(u.args[0]) is buf]
    combines.sort(key=position.__getitem__)
    return combines[0] if combines else None


def _combined_output(back: fx.Node, x: fx.Node, sort_idx: fx.Node,
                     token_idx: fx.Node) -> tuple[fx.Node, fx.Node] | str:
    """``scatter_add(zeros_like(x), t, back * scores.view(-1)[s].view(-1, 1))`` -> (scores, out) or why not."""
    muls = _users_named(back, "mul")
    if len(muls) != 1:
        return "the combined rows are not weighted by the routing scores (one multiply)"
    mul = muls[0]
    other = mul.args[1] if source(mul.args[0]) is back else mul.args[0]
    taken = _row_index(source(other))
    if taken is None or taken[1] is not sort_idx:
        return "the combine weights are not scores.view(-1)[argsort(ids)]"
    scores = source(taken[0])
    adds = _users_named(mul, "scatter_add")
    if len(adds) != 1:
        return "the weighted rows are not scatter-added back to the tokens"
    out = adds[0]
    base = source(out.args[0])
    if op_name(base) != "zeros_like" or source(base.args[0]) is not source(x):
        return "the scatter-add does not start from zeros_like(tokens)"
    index = out.args[1]
    if op_name(index) == "expand":
        index = index.args[0]
    if source(index) is not token_idx or source(out.args[2]) is not mul:
        return "the weighted rows are not scatter-added to the tokens they came from (argsort(ids) // k)"
    return scores, out


def match_moe(dispatch: fx.Node, graph_nodes: list[fx.Node]) -> MoeMatch | MoeUnmatched | None:
    """The MoE layer whose dispatch is ``dispatch``; None when ``dispatch`` feeds no grouped GEMM (not a
    dispatch: a count exchange or a combine); :class:`MoeUnmatched` when it does but the rest differs."""
    rows, out_splits, in_splits, group = a2a_parts(dispatch)
    recv = _wait_of(dispatch)
    if recv is None:
        return None
    if not any(_users_named(u, "grouped_mm") for u in _users_named(recv, "getitem") + _users_named(recv, "index")):
        return None
    experts = _experts(recv)
    if isinstance(experts, str):
        return MoeUnmatched(node=dispatch, reason=experts)
    perm, gate, up, down, xe = experts
    buf = _written_back(down, perm)
    if isinstance(buf, str):
        return MoeUnmatched(node=dispatch, reason=buf)
    combine = _combine_after(buf, graph_nodes)
    if combine is None:
        return MoeUnmatched(node=dispatch, reason="no all-to-all sends the expert output back")
    _, back_out, back_in, back_group = a2a_parts(combine)
    if not has_split_lists(combine) or list(back_out) != list(in_splits) or list(back_in) != list(out_splits):
        return MoeUnmatched(node=dispatch, reason="the combine's split sizes are not the dispatch's swapped")
    if back_group != group or not isinstance(group, (str, int)):
        return MoeUnmatched(node=dispatch, reason="the dispatch and the combine run on different groups")
    back = _wait_of(combine)
    if back is None:
        return MoeUnmatched(node=dispatch, reason="the combine is not read through one wait_tensor")
    routed = _dispatch_rows(rows)
    if isinstance(routed, str):
        return MoeUnmatched(node=dispatch, reason=routed)
    x, ids, sort_idx, token_idx, k = routed
    combined = _combined_output(back, x, sort_idx, token_idx)
    if isinstance(combined, str):
        return MoeUnmatched(node=dispatch, reason=combined)
    scores, out = combined
    b_gate, b_up, b_down = (_grouped(mm)[1] for mm in (gate, up, down))
    shapes = [shape_of(b) for b in (b_gate, b_up, b_down)]
    x_shape = shape_of(x)
    if any(s is None or len(s) != 3 for s in shapes):
        return MoeUnmatched(node=dispatch, reason="an expert weight's shape is unknown or not [E_local, in, out]")
    (e_local, hidden, ffn), up_shape, down_shape = shapes
    if up_shape != (e_local, hidden, ffn) or down_shape != (e_local, ffn, hidden) or x_shape[1] != hidden:
        return MoeUnmatched(node=dispatch, reason=f"expert weights {shapes} and tokens {list(x_shape)} do not "
                                                  "agree on hidden and ffn")
    world = len(out_splits)
    dtypes = {dtype_of(n) for n in (b_gate, b_up, b_down, gate.args[0], up.args[0], down.args[0])}
    if len(dtypes) != 1 or None in dtypes:
        return MoeUnmatched(node=dispatch, reason=f"the grouped GEMMs mix dtypes {sorted(map(str, dtypes))}")
    if shape_of(scores) is None or torch.Size(shape_of(scores)).numel() != x_shape[0] * k:
        return MoeUnmatched(node=dispatch, reason="the routing scores are not tokens x k")
    return MoeMatch(dispatch=dispatch, combine=combine, x=x, ids=ids, scores=scores, topk=k, b_gate=b_gate,
                    b_up=b_up, b_down=b_down, out=out, group_name=str(group), world=world, tokens=x_shape[0],
                    hidden=hidden, ffn=ffn, e_local=e_local, compute_dtype=next(iter(dtypes)))


def find_moe_layers(graph: fx.Graph) -> list[MoeMatch | MoeUnmatched]:
    """Every MoE layer of ``graph`` (its dispatch all-to-all), and every split-size all-to-all that is none."""
    nodes = list(graph.nodes)
    found: list[MoeMatch | MoeUnmatched] = []
    claimed: set[fx.Node] = set()
    a2as = [n for n in nodes if op_name(n) == "a2a" and has_split_lists(n)]
    for node in a2as:
        item = match_moe(node, nodes)
        if item is None:
            continue
        found.append(item)
        if isinstance(item, MoeMatch):
            claimed.add(item.combine)
    seen = {f.dispatch if isinstance(f, MoeMatch) else f.node for f in found}
    dispatch_splits = [tuple(a2a_parts(n)[2]) for n in seen]
    for node in a2as:
        _, out_splits, _, _ = a2a_parts(node)
        if node in claimed or node in seen or tuple(out_splits) in dispatch_splits:
            continue
        if any(isinstance(s, fx.Node) for s in out_splits) and not _is_count_exchange(node):
            found.append(MoeUnmatched(node=node, reason="an all-to-all with data-dependent split sizes that is "
                                                        "neither the dispatch nor the combine of an MoE layer"))
    return found


def _is_count_exchange(node: fx.Node) -> bool:
    """The exchange of tokens-per-expert counts (integer rows): part of a layer, not a site of its own."""
    dtype = dtype_of(node.args[0])
    return dtype is not None and not dtype.is_floating_point

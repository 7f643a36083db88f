"""Finders: functional collectives and the matmuls around them, in post-autograd ATen graphs.

DTensor (sequence parallelism) emits a gather along dim ``d > 0`` as
``all_gather_into_tensor`` (which stacks shards along dim 0) + ``wait_tensor`` +
``split`` into ``world`` pieces + ``cat(dim=d)``, and a reduce-scatter along ``d > 0`` as
``split(dim=d)`` + ``cat(dim=0)`` + ``reduce_scatter_tensor`` + ``wait_tensor``; both are
recognised, with reshapes (``view``/``reshape``/``_unsafe_view``), transposes and (for
gathers, where a cast commutes with the gather) dtype casts in between. Every finder
returns either a match or an :class:`~hocket.graph.matches.Unmatched` with the reason.
"""

from __future__ import annotations

import operator

import torch
from torch import fx

from hocket.graph.matches import AllGatherMatch, ConsumerMatmul, GatherUses, ProducerMatmul, ScatterMatch, Unmatched
from hocket.graph.nodes import (
    ALL_GATHER,
    ALL_REDUCE,
    REDUCE_SCATTER,
    SPLIT_TARGETS,
    TRANSPOSE_TARGETS,
    VIEW_TARGETS,
    aten,
    getitem_index,
    group_args,
    is_call,
    is_noop_wait,
    is_plain_cast,
    numel,
    reduce_op_of,
    single_wait,
    static_shape,
    val,
)

SUPPORTED_REDUCE_OPS = ("sum", "avg")


def _world_of(group_name: str) -> int | None:
    from torch.distributed.distributed_c10d import _get_group_size_by_name

    try:
        return int(_get_group_size_by_name(group_name))
    except (RuntimeError, ValueError, KeyError):
        return None


def _split_pieces(split: fx.Node, world: int) -> list[fx.Node] | None:
    """The ``world`` getitems of ``split``, in order, or None when the split is read otherwise."""
    pieces: dict[int, fx.Node] = {}
    for user in split.users:
        index = getitem_index(user)
        if index is None or index in pieces:
            return None
        pieces[index] = user
    if sorted(pieces) != list(range(world)):
        return None
    return [pieces[i] for i in range(world)]


def _split_dim(split: fx.Node) -> int:
    return split.kwargs.get("dim", split.args[2] if len(split.args) > 2 else 0)


def _even_split(split: fx.Node, whole: tuple[int, ...], world: int, dim: int) -> bool:
    size = whole[dim] // world
    arg = split.args[1]
    if split.target is aten.split.Tensor:
        return arg == size and whole[dim] % world == 0
    return list(arg) == [size] * world


# -- all-gather ----------------------------------------------------------------------------

def find_all_gathers(graph: fx.Graph) -> list[AllGatherMatch | Unmatched]:
    """Every ``all_gather_into_tensor`` of the graph, matched with its wait (and split/cat)."""
    found: list[AllGatherMatch | Unmatched] = []
    for node in graph.nodes:
        if is_call(node, ALL_GATHER):
            found.append(_match_all_gather(node))
    return found


def _match_all_gather(start: fx.Node) -> AllGatherMatch | Unmatched:
    world, group_name = group_args(start)
    if world is None or group_name is None:
        return Unmatched(node=start, reason="group size or name is not a constant")
    wait = single_wait(start)
    if wait is None:
        return Unmatched(node=start, reason="the all-gather is not read through exactly one wait_tensor")
    shard = start.args[0]
    wait_shape = static_shape(wait)
    if static_shape(shard) is None or wait_shape is None:
        return Unmatched(node=start, reason="shape unknown (symbolic or missing metadata)")
    users = list(wait.users)
    if len(users) == 1 and is_call(users[0], SPLIT_TARGETS) and _split_dim(users[0]) == 0:
        split = users[0]
        pieces = _split_pieces(split, world)
        if pieces is None or not _even_split(split, wait_shape, world, 0):
            return Unmatched(node=start, reason="the gathered tensor is split in a way DTensor does not emit")
        cats = {user for piece in pieces for user in piece.users}
        if len(cats) != 1 or any(len(p.users) != 1 for p in pieces):
            return Unmatched(node=start, reason="the gathered pieces are read by more than one concatenation")
        cat = next(iter(cats))
        if not is_call(cat, aten.cat.default) or list(cat.args[0]) != pieces:
            return Unmatched(node=start, reason="the gathered pieces are not concatenated in rank order")
        ndim = len(wait_shape)
        dim = cat.kwargs.get("dim", cat.args[1] if len(cat.args) > 1 else 0) % ndim
        return AllGatherMatch(start=start, wait=wait, result=cat, shard=shard, gather_dim=dim,
                              group_name=group_name, world=world, pattern=(start, wait, split, *pieces, cat))
    return AllGatherMatch(start=start, wait=wait, result=wait, shard=shard, gather_dim=0, group_name=group_name,
                          world=world, pattern=(start, wait))


def _is_flat_2d(node: fx.Node, gathered_shape: tuple[int, ...]) -> bool:
    shape = static_shape(node)
    k = gathered_shape[-1]
    return shape is not None and len(shape) == 2 and shape[1] == k and shape[0] * k == numel(gathered_shape)


def _is_2d_transpose(node: fx.Node, source: fx.Node) -> bool:
    if not is_call(node, TRANSPOSE_TARGETS) or node.args[0] is not source:
        return False
    if node.target is aten.t.default:
        return True
    if node.target is aten.transpose.int:
        return sorted(int(d) % 2 for d in node.args[1:3]) == [0, 1]
    return [int(d) % 2 for d in node.args[1]] == [1, 0]


def _plain_addmm(node: fx.Node) -> bool:
    return is_call(node, aten.addmm.default) and not node.kwargs and len(node.args) == 3


def find_consumer_matmuls(match: AllGatherMatch) -> GatherUses:
    """Walk reshapes and casts from the gathered tensor; collect the matmuls it feeds as A.

    A matmul qualifies when it reads the gathered tensor flattened to ``[rows, k]``
    (``k`` its last dim) as its left operand (``mm``/``addmm``), or that flattened
    tensor transposed as its right operand. Every other read is kept in ``others``.
    """
    gathered_shape = static_shape(match.result)
    derived = [match.result]
    consumers: list[ConsumerMatmul] = []
    others: list[fx.Node] = []
    seen: set[fx.Node] = set()
    for source in derived:  # grows while walking
        is_other = False
        flat = _is_flat_2d(source, gathered_shape)
        for user in source.users:
            if user in seen:
                continue
            if is_call(user, VIEW_TARGETS) or is_plain_cast(user) or is_noop_wait(user):
                seen.add(user)
                derived.append(user)
            elif flat and is_call(user, aten.mm.default) and user.args[0] is source and user.args[1] is not source:
                seen.add(user)
                consumers.append(ConsumerMatmul(mm=user, source=source, b=user.args[1]))
            elif flat and _plain_addmm(user) and user.args[1] is source and source not in (user.args[0],
                                                                                           user.args[2]):
                seen.add(user)
                consumers.append(ConsumerMatmul(mm=user, source=source, b=user.args[2], bias=user.args[0]))
            elif flat and _is_2d_transpose(user, source):
                transposed_reads = [u for u in user.users
                                    if is_call(u, aten.mm.default) and u.args[1] is user and u.args[0] is not user]
                consumers.extend(ConsumerMatmul(mm=u, source=source, b=None, transposed=True, p=u.args[0])
                                 for u in transposed_reads)
                seen.update(transposed_reads)
                if len(transposed_reads) != len(user.users):
                    is_other = True
            else:
                is_other = True
        if is_other:
            others.append(source)
    dtypes = {_dtype(n) for n in (*others, *(c.source for c in consumers))}
    dtype = next(iter(dtypes)) if len(dtypes) == 1 else None
    return GatherUses(consumers=tuple(consumers), others=tuple(others), dtype=dtype)


def _dtype(node: fx.Node) -> torch.dtype | None:
    value = val(node)
    return value.dtype if value is not None else None


# -- reduce-scatter and all-reduce ---------------------------------------------------------

def find_reduce_scatters(graph: fx.Graph) -> list[ScatterMatch | Unmatched]:
    """Every ``reduce_scatter_tensor`` of the graph, matched with its wait (and split/cat)."""
    return [_match_reduction(node) for node in graph.nodes if is_call(node, REDUCE_SCATTER)]


def find_all_reduces(graph: fx.Graph) -> list[ScatterMatch | Unmatched]:
    """Every functional ``all_reduce`` of the graph, matched with its wait."""
    return [_match_reduction(node) for node in graph.nodes if is_call(node, ALL_REDUCE)]


def _match_reduction(start: fx.Node) -> ScatterMatch | Unmatched:
    world, group_name = group_args(start)
    if group_name is None:
        return Unmatched(node=start, reason="group name is not a constant")
    if start.target is ALL_REDUCE:
        world = _world_of(group_name)
    elif world is None:
        return Unmatched(node=start, reason="group size is not a constant")
    reduce_op = reduce_op_of(start)
    if reduce_op not in SUPPORTED_REDUCE_OPS:
        return Unmatched(node=start, reason=f"reduce op {reduce_op!r} (hocket fuses {SUPPORTED_REDUCE_OPS})")
    wait = single_wait(start)
    if wait is None:
        return Unmatched(node=start, reason="the collective is not read through exactly one wait_tensor")
    source = start.args[0]
    if static_shape(source) is None or static_shape(wait) is None:
        return Unmatched(node=start, reason="shape unknown (symbolic or missing metadata)")
    if start.target is ALL_REDUCE:
        return ScatterMatch(start=start, wait=wait, source=source, scatter_dim=None, reduce_op=reduce_op,
                            group_name=group_name, world=world, pattern=(start, wait))
    scatter_dim, pattern = 0, (start, wait)
    if is_call(source, aten.cat.default) and len(source.users) == 1:
        unpacked = _unpack_rank_major(source, world)
        if unpacked is not None:
            source, scatter_dim, extra = unpacked
            pattern = (start, wait, *extra)
    return ScatterMatch(start=start, wait=wait, source=source, scatter_dim=scatter_dim, reduce_op=reduce_op,
                        group_name=group_name, world=world, pattern=pattern)


def _unpack_rank_major(cat: fx.Node, world: int) -> tuple[fx.Node, int, tuple[fx.Node, ...]] | None:
    """``cat(split(x, size, dim=d), dim=0)`` -> (x, d, the split/getitem/cat nodes)."""
    cat_dim = cat.kwargs.get("dim", cat.args[1] if len(cat.args) > 1 else 0)
    pieces = list(cat.args[0])
    if cat_dim != 0 or len(pieces) != world or not all(isinstance(p, fx.Node) for p in pieces):
        return None
    split = pieces[0].args[0] if is_call(pieces[0], operator.getitem) else None
    if split is None or not is_call(split, SPLIT_TARGETS):
        return None
    if _split_pieces(split, world) != pieces or any(len(p.users) != 1 for p in pieces):
        return None
    source = split.args[0]
    shape = static_shape(source)
    if shape is None:
        return None
    dim = _split_dim(split) % len(shape)
    if not _even_split(split, shape, world, dim):
        return None
    return source, dim, (split, *pieces, cat)


def find_producer_matmul(match: ScatterMatch) -> ProducerMatmul | Unmatched:
    """The matmul (or sum of matmuls of one shape) the reduced tensor is a reshape of."""
    between: list[fx.Node] = []
    node = match.source
    while is_call(node, VIEW_TARGETS) or is_plain_cast(node):
        if is_plain_cast(node):
            return Unmatched(node=match.start, reason="a dtype cast between the matmul and the reduction "
                                                      "(fusing would change the reduction's precision)")
        if len(node.users) != 1:
            return Unmatched(node=match.start, reason="a reshape of the matmul's result is also read elsewhere")
        between.append(node)
        node = node.args[0]
    terms = _sum_terms(node, between)
    if isinstance(terms, str):
        return Unmatched(node=match.start, reason=terms)
    shapes = {static_shape(mm) for mm, _, _ in terms}
    dtypes = {_dtype(mm) for mm, _, _ in terms}
    if len(shapes) != 1 or None in shapes or len(dtypes) != 1:
        return Unmatched(node=match.start, reason="the summed matmuls differ in shape or dtype")
    m, n = next(iter(shapes))
    source_shape = static_shape(match.source)
    if source_shape[-1] != n:
        return Unmatched(node=match.start, reason=f"a reshape between the matmul [{m}, {n}] and the reduction "
                                                  f"{list(source_shape)} moves the matmul's N dim")
    if any(static_shape(b) is None or static_shape(b)[-1] != n or numel(static_shape(b)) != m * n
           for b in between):
        return Unmatched(node=match.start, reason="a reshape between the matmuls and the reduction moves the "
                                                  "matmul's N dim, or an add broadcasts")
    k = sum(static_shape(a)[1] for _, a, _ in terms)
    return ProducerMatmul(terms=tuple(terms), between=tuple(between), m=m, k=k, n=n, dtype=next(iter(dtypes)))


def _sum_terms(node: fx.Node, between: list[fx.Node]) -> list[tuple[fx.Node, fx.Node, fx.Node]] | str:
    if is_call(node, aten.mm.default):
        if len(node.users) != 1:
            return "the matmul's result is also read elsewhere"
        if static_shape(node.args[0]) is None or static_shape(node.args[1]) is None:
            return "shape unknown (symbolic or missing metadata)"
        return [(node, node.args[0], node.args[1])]
    if is_call(node, aten.add.Tensor) and not node.kwargs and all(isinstance(a, fx.Node) for a in node.args[:2]):
        if len(node.users) != 1:
            return "a partial sum of matmuls is also read elsewhere"
        between.append(node)
        terms = []
        for arg in node.args[:2]:
            while is_call(arg, VIEW_TARGETS) and len(arg.users) == 1:
                between.append(arg)
                arg = arg.args[0]
            sub = _sum_terms(arg, between)
            if isinstance(sub, str):
                return sub
            terms.extend(sub)
        return terms
    if is_call(node, aten.addmm.default):
        return "a matmul with a bias feeds the reduction (the bias would be reduced world times)"
    target = getattr(node, "target", node)
    return f"produced by {getattr(target, '__name__', target)}, not by a matmul"

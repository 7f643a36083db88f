"""Small questions about fx nodes of post-autograd (ATen) graphs, shared by the finders and rewriters."""

from __future__ import annotations

import math
import operator

import torch
from torch import fx

aten = torch.ops.aten
c10d = torch.ops._c10d_functional

VIEW_TARGETS = frozenset({aten.view.default, aten.reshape.default, aten._unsafe_view.default})
"""Row-major reinterpretations: any chain of them is one reshape of its source."""
CAST_TARGETS = frozenset({torch.ops.prims.convert_element_type.default, aten._to_copy.default})
TRANSPOSE_TARGETS = frozenset({aten.t.default, aten.transpose.int, aten.permute.default})
SPLIT_TARGETS = frozenset({aten.split.Tensor, aten.split_with_sizes.default})
MATMUL_TARGETS = frozenset({aten.mm.default, aten.addmm.default})

ALL_GATHER = c10d.all_gather_into_tensor.default
REDUCE_SCATTER = c10d.reduce_scatter_tensor.default
ALL_REDUCE = c10d.all_reduce.default
WAIT = c10d.wait_tensor.default
COLLECTIVE_TARGETS = frozenset({ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE, c10d.all_to_all_single.default,
                                c10d.broadcast.default, c10d.all_gather_into_tensor_coalesced.default,
                                c10d.reduce_scatter_tensor_coalesced.default, c10d.all_reduce_coalesced.default})
"""Functional collectives that start communication (their result is read through ``wait_tensor``)."""


def val(node: object) -> torch.Tensor | None:
    """The fake tensor a node produces, or None when the graph carries no metadata for it."""
    if not isinstance(node, fx.Node):
        return None
    value = node.meta.get("val")
    return value if isinstance(value, torch.Tensor) else None


def static_shape(node: object) -> tuple[int, ...] | None:
    """The node's shape as ints, or None when unknown or symbolic."""
    value = val(node)
    if value is None:
        return None
    shape = []
    for size in value.shape:
        if not isinstance(size, int):
            return None
        shape.append(size)
    return tuple(shape)


def is_call(node: object, targets: object) -> bool:
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return False
    if isinstance(targets, (set, frozenset, tuple, list)):
        return node.target in targets
    return node.target is targets


def is_plain_cast(node: fx.Node) -> bool:
    """A dtype-only conversion (no device, layout or memory-format change)."""
    if not is_call(node, CAST_TARGETS):
        return False
    if node.target is aten._to_copy.default:
        return set(node.kwargs) <= {"dtype"} and len(node.args) == 1
    return True


def is_noop_wait(node: object) -> bool:
    """A ``wait_tensor`` on a tensor no collective produced (eager funcol tracing adds them): a no-op."""
    return is_call(node, WAIT) and not is_call(node.args[0], COLLECTIVE_TARGETS)


def is_communication(node: fx.Node) -> bool:
    """A node whose position orders communication between ranks (never moved by a pass)."""
    if node.op != "call_function":
        return False
    if node.target in COLLECTIVE_TARGETS or node.target is WAIT:
        return True
    namespace = getattr(node.target, "namespace", None)
    return namespace in ("hocket", "_c10d_functional", "c10d", "_dtensor", "symm_mem")


def is_impure(node: fx.Node) -> bool:
    """Side effects or random state: a node a pass must neither delete nor reorder."""
    if node.op != "call_function":
        return node.op in ("placeholder", "output")
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        if target._schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags:
            return True
    if target is operator.getitem:
        return False
    return node.is_impure()


def getitem_index(node: fx.Node) -> int | None:
    if is_call(node, operator.getitem) and isinstance(node.args[1], int):
        return node.args[1]
    return None


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def group_args(node: fx.Node) -> tuple[int | None, str | None]:
    """(group size, group name) of an all-gather or reduce-scatter node."""
    args = list(node.args) + [None] * 4
    if node.target is ALL_GATHER:
        size, name = args[1], args[2]
    elif node.target is REDUCE_SCATTER:
        size, name = args[2], args[3]
    elif node.target is ALL_REDUCE:
        size, name = None, args[2]
    else:
        return None, None
    size = node.kwargs.get("group_size", size)
    name = node.kwargs.get("group_name", name)
    return (size if isinstance(size, int) else None), (str(name) if name is not None else None)


def reduce_op_of(node: fx.Node) -> str | None:
    if node.target in (REDUCE_SCATTER, ALL_REDUCE):
        op = node.kwargs.get("reduce_op", node.args[1] if len(node.args) > 1 else None)
        return str(op).lower() if op is not None else None
    return None


def single_wait(node: fx.Node) -> fx.Node | None:
    """The one ``wait_tensor`` reading a collective's result, or None."""
    users = list(node.users)
    if len(users) == 1 and is_call(users[0], WAIT):
        return users[0]
    return None


def is_contiguous(node: fx.Node) -> bool:
    value = val(node)
    if value is None:
        return False
    try:
        return bool(value.is_contiguous())
    except RuntimeError:  # symbolic strides
        return False

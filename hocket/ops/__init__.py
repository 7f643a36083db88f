"""Overlapped compute-communication operators (docs/operators.md).

``all_gather_matmul``, ``matmul_reduce_scatter`` and ``matmul_all_reduce`` have the
semantics of PyTorch's symmetric-memory fused ops (see :mod:`hocket.ops.reference`) on
any torch.distributed backend; ``plan=None`` lets hocket choose how to run them. ``stencil_steps`` runs
halo-exchange stencil steps on a process grid (:mod:`hocket.ops.stencil`, docs/stencils.md);
``moe_experts`` the routed experts of a MoE layer under expert parallelism (:mod:`hocket.ops.moe`, docs/moe.md).
"""

from hocket.ops import (
    _library,  # noqa: F401  (registers the torch.ops.hocket custom ops)
    live,  # noqa: F401  (installs the process planner that plan=None calls ask)
)
from hocket.ops.agreement import AgreementError, RankInputError
from hocket.ops.all_gather_matmul import all_gather_matmul
from hocket.ops.captured import CapturedCall
from hocket.ops.context import close_contexts
from hocket.ops.matmul_all_reduce import matmul_all_reduce
from hocket.ops.matmul_reduce_scatter import matmul_reduce_scatter
from hocket.ops.moe import moe_experts
from hocket.ops.offload import OffloadContext, close_offload_contexts, matmul_from_host, matmul_to_host
from hocket.ops.planning import choose_plan
from hocket.ops.stencil import Carried, Static, stencil_steps
from hocket.ops.tolerance import Tolerance, assert_close, max_error, tolerance
from hocket.transport.pending import TransportError

__all__ = [
    "AgreementError", "CapturedCall", "Carried", "OffloadContext", "RankInputError", "Static", "Tolerance",
    "TransportError", "all_gather_matmul", "assert_close", "choose_plan", "close_contexts", "close_offload_contexts",
    "matmul_all_reduce", "matmul_from_host", "matmul_reduce_scatter", "matmul_to_host", "max_error", "moe_experts",
    "stencil_steps", "tolerance",
]

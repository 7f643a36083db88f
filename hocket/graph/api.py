"""``hocket.compile`` and ``hocket.explain``: overlap for a tensor-parallel model without touching its layers.

```python
model = parallelize_module(model, mesh, plan)      # the usual PyTorch tensor parallelism
model = hocket.compile(model)                      # torch.compile + hocket's pass
print(hocket.explain(model))                       # after the first step: sites, plans, savings
```
"""

from __future__ import annotations

import torch
from torch import nn

from hocket.graph.backend import BACKENDS, GraphRewriter, make_backend
from hocket.graph.passes import PassConfig
from hocket.graph.planning import GraphPlanner, PlanFor
from hocket.graph.report import CompileLog, Explanation

_LOG_ATTR = "_hocket_compile_log"


def compile(model: nn.Module, *, cluster: object = None, autotune: bool = False, backend: str = "inductor",
            plan_for: PlanFor | None = None, config: PassConfig | None = None,
            **torch_compile_kwargs) -> nn.Module:
    """``torch.compile(model)`` with hocket's overlap pass on the forward and backward graphs.

    ``cluster``: where the job runs (a ``ClusterSpec``, preset name or YAML path);
    default: ``HOCKET_CLUSTER``, else this machine's probe. ``autotune``: measure the
    top predicted plans of every site on the live group while compiling (collective:
    every rank compiles the same graphs). ``backend``: ``"inductor"`` (default) or
    ``"aot_eager"`` (eager ATen kernels, no C++ build). ``plan_for``: your own
    ``Site -> Plan`` choice (return None to let the planner decide). ``config``: what
    the pass may do (:class:`hocket.graph.PassConfig`). Other keyword arguments go to
    ``torch.compile`` (``dynamic``, ``fullgraph``, ``mode``, ``options`` for Inductor).

    The returned module computes what ``model`` computes. Sites whose plan is
    sequential, and patterns hocket does not support, are left as they are;
    :func:`explain` says which and why.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}; hocket.compile wraps "
                        "modules (use torch.compile for plain functions)")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not supported by hocket.compile; use one of {BACKENDS}")
    if "backend" in torch_compile_kwargs:
        raise TypeError("pass backend= as hocket.compile's own argument ('inductor' or 'aot_eager')")
    options = torch_compile_kwargs.pop("options", None)
    if options is not None and backend != "inductor":
        raise ValueError(f"options={options!r} are Inductor options; they need backend='inductor'")
    log = CompileLog()
    planner = GraphPlanner(cluster=cluster, autotune=autotune, plan_for=plan_for)
    rewriter = GraphRewriter(planner=planner, config=config or PassConfig(), log=log)
    compiled = torch.compile(model, backend=make_backend(backend, rewriter, inductor_options=options),
                             **torch_compile_kwargs)
    object.__setattr__(compiled, _LOG_ATTR, log)
    return compiled


def explain(compiled: nn.Module) -> Explanation:
    """What hocket's pass did to ``compiled`` (a module returned by :func:`compile`) so far.

    Every site found (kind, shapes, dtype, plan, predicted saving, rewritten or why
    not), every collective left alone with the reason, and the gaps reordering filled.
    torch.compile compiles on the first call (the backward on the first backward): run
    a step first.
    """
    log = getattr(compiled, _LOG_ATTR, None)
    if not isinstance(log, CompileLog):
        raise TypeError(f"compiled={type(compiled).__name__} was not returned by hocket.compile; "
                        "call hocket.compile(model) and pass its result")
    return log.explanation()

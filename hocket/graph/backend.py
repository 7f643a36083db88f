"""torch.compile backends that run hocket's pass on the graphs after autograd.

* ``inductor``: Inductor with the pass as its ``post_grad_custom_pre_pass`` (it runs on
  the forward and the backward graph AOTAutograd produces, before Inductor's own
  post-grad patterns) and ``_micro_pipeline_tp`` off, so the two passes never fight
  over the same sites. Inductor's caches are bypassed while the pass is active (the
  pass records what it did for ``hocket.explain``, which a cache hit would skip).
* ``aot_eager``: AOTAutograd with eager ATen kernels and the pass as the graph
  transform; no C++ build (what CI uses).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from torch import fx

from hocket.graph.moe import compile_with_moe
from hocket.graph.passes import PassConfig, is_backward, overlap_pass
from hocket.graph.planning import GraphPlanner
from hocket.graph.report import CompileLog, Explanation, GraphReport
from hocket.graph.transplant import on_copy

logger = logging.getLogger("hocket.compile")

BACKENDS = ("inductor", "aot_eager")


class GraphRewriter:
    """Runs :func:`overlap_pass` on one graph, records and logs the report (shared by both backends)."""

    def __init__(self, *, planner: GraphPlanner, config: PassConfig, log: CompileLog) -> None:
        self.planner, self.config, self.log = planner, config, log

    def __call__(self, graph: fx.Graph, direction: str | None = None) -> GraphReport:
        direction = direction or ("backward" if is_backward(graph) else "forward")
        name = self.log.next_name(direction)
        report, error = on_copy(graph, lambda work: overlap_pass(work, planner=self.planner, name=name,
                                                                 direction=direction, config=self.config))
        if report is None:
            logger.warning("hocket's pass failed on %s and left it as traced: %s", name, error)
            report = GraphReport(graph=name, direction=direction,
                                 note=f"hocket's pass failed and left this graph as traced ({error}); please report")
        self.log.add(report)
        if logger.isEnabledFor(logging.INFO):
            logger.info("%s", Explanation(graphs=(report,)).format())
        return report


def _inductor_pass(rewriter: GraphRewriter) -> object:
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class HocketInductorPass(CustomGraphPass):
        def __call__(self, graph: fx.Graph) -> None:
            rewriter(graph)

        def uuid(self) -> None:
            return None  # no Inductor caching: explain() needs the pass to run

    return HocketInductorPass()


def make_backend(kind: str, rewriter: GraphRewriter, *, inductor_options: dict | None = None) -> Callable:
    """The ``backend=`` callable handed to ``torch.compile``."""
    if kind not in BACKENDS:
        raise ValueError(f"backend={kind!r} is not one hocket can add its pass to; use one of {BACKENDS}")
    if kind == "aot_eager":
        return _aot_eager_backend(rewriter)
    patches = dict(inductor_options or {})
    patches.update({"post_grad_custom_pre_pass": _inductor_pass(rewriter), "_micro_pipeline_tp": False,
                    "fx_graph_cache": False})

    def inductor_backend(gm: fx.GraphModule, example_inputs: list) -> Callable:
        from torch._inductor.compile_fx import compile_fx

        return compile_with_moe(gm, example_inputs, rewriter,
                                lambda piece, inputs: compile_fx(piece, inputs, config_patches=patches))

    return inductor_backend


def _aot_eager_backend(rewriter: GraphRewriter) -> Callable:
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def compiler(direction: str) -> Callable:
        def compile_graph(gm: fx.GraphModule, example_inputs: list) -> Callable:
            rewriter(gm.graph, direction)
            gm.recompile()
            return make_boxed_func(gm)

        return compile_graph

    backend = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                           inference_compiler=compiler("forward"))

    def aot_eager_backend(gm: fx.GraphModule, example_inputs: list) -> Callable:
        return compile_with_moe(gm, example_inputs, rewriter, backend)

    return aot_eager_backend

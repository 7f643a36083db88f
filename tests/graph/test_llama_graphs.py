"""The pass on the real client's graphs: a sequence-parallel Llama block's forward and backward (fake group)."""

from __future__ import annotations

import copy

import pytest
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from hocket.graph import Explanation, overlap_pass
from hocket.models.llama_block import LlamaBlock, LlamaBlockConfig, parallelize_llama_block

CONFIG = LlamaBlockConfig(dim=32, n_heads=4, n_kv_heads=2, hidden_dim=64, max_seq_len=16)
RAW = ("all_gather_into_tensor", "reduce_scatter_tensor")


@pytest.fixture(scope="module")
def block_graphs(fake_world) -> dict[str, torch.fx.GraphModule]:
    """The post-autograd forward and backward graphs of the parallelized block at world 2."""
    from torch.distributed.device_mesh import init_device_mesh

    fake_world(2)
    torch._dynamo.reset()
    block = parallelize_llama_block(LlamaBlock(CONFIG), init_device_mesh("cpu", (2,)))
    graphs: dict[str, torch.fx.GraphModule] = {}

    def capture(direction):
        def compiler(gm, example_inputs):
            graphs[direction] = copy.deepcopy(gm)
            return make_boxed_func(gm)
        return compiler

    compiled = torch.compile(block, backend=aot_autograd(fw_compiler=capture("forward"),
                                                         bw_compiler=capture("backward")))
    compiled(torch.randn(2, 4, CONFIG.dim, requires_grad=True)).sum().backward()
    torch._dynamo.reset()
    return graphs


def test_every_site_of_attention_and_mlp_is_rewritten(block_graphs, planner_for):
    reports = []
    for direction, traced in block_graphs.items():
        gm = copy.deepcopy(traced)
        reports.append(overlap_pass(gm.graph, planner=planner_for("chunked"), direction=direction, name=direction))
        text = str(gm.graph)
        assert text.count("hocket.all_gather_matmul.default") == 2, direction  # attention (q,k,v) and MLP (w1,w3)
        assert text.count("hocket.matmul_reduce_scatter.default") == 2, direction  # attention wo and MLP w2
        assert not any(raw in text for raw in RAW), direction  # no leftover raw collective
    explanation = Explanation(graphs=tuple(reports))
    assert len(explanation.rewritten) == 8 and not explanation.left_alone
    forward_ag = [s for s in explanation.sites if s.graph == "forward" and s.kind == "ag_mm"]
    # q, k and v read one gather: one site, n = q + k + v widths per rank
    head_dim = CONFIG.dim // CONFIG.n_heads
    qkv = (CONFIG.n_heads + 2 * CONFIG.n_kv_heads) * head_dim // 2
    assert sorted(s.site.n for s in forward_ag) == sorted([qkv, CONFIG.hidden_dim // 2])
    assert "sum of 3 matmuls" in " ".join(s.note for s in explanation.sites)  # backward dX of q, k, v


def test_sequential_sites_stay_and_weight_gradients_fill_the_gaps(block_graphs, planner_for):
    gm = copy.deepcopy(block_graphs["backward"])
    report = overlap_pass(gm.graph, planner=planner_for("sequential"), direction="backward")
    text = str(gm.graph)
    assert "hocket" not in text and all(raw in text for raw in RAW)
    assert len(report.sites) == 4 and not any(s.rewritten for s in report.sites)
    scatter_gaps = [g for g in report.gaps if g.collective == "reduce_scatter_tensor"]
    assert len(scatter_gaps) == 2 and all(g.matmuls_in_gap >= 2 for g in scatter_gaps)
    formatted = Explanation(graphs=(report,)).format()
    assert "sequential chosen" in formatted and "moved into its gap" in formatted

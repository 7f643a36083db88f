"""The torchtitan drop-in's single-process parts: the weight mapping, bad input, and plan=None while compiling."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("torchtitan.models.common.moe", reason="torchtitan 0.3 is not installed")

from test_moe_patterns import _dynamo_graph  # noqa: E402

from hocket.graph import Explanation, GraphPlanner, PassConfig  # noqa: E402
from hocket.graph.moe import HocketRoutedExperts, expert_weights, moe_graph_pass, use_hocket_experts  # noqa: E402
from hocket.ops.tolerance import assert_close  # noqa: E402
from tests.dist._torchtitan_cases import MoeCase, build_routed_experts, ep_mesh, routing  # noqa: E402


class _NoMesh:
    size = staticmethod(lambda: 2)


def _local_routed(case: MoeCase) -> torch.nn.Module:
    """torchtitan's RoutedExperts with no EP mesh wired (its dispatcher then runs locally)."""
    module = build_routed_experts(case, _NoMesh())
    module.token_dispatcher.ep_mesh = None
    return module


def test_weight_mapping_reproduces_grouped_experts():
    """``w_gate_up = [w1^T | w3^T]``, ``w_down = w2^T``: hocket's math on them equals GroupedExperts'."""
    case = MoeCase(seed=2, experts=4, hidden=16, ffn=8)
    inner = _local_routed(case).inner_experts
    counts = torch.tensor([3, 0, 5])[: inner.num_experts]
    x = torch.randn(int(counts.sum()), case.hidden)
    expected = inner(x, counts).detach()
    w_gate_up, w_down = expert_weights(inner, torch.bfloat16)
    assert w_gate_up.shape == (inner.num_experts, case.hidden, 2 * case.ffn)
    assert w_down.shape == (inner.num_experts, case.ffn, case.hidden)
    rows, start = [], 0
    for e, n in enumerate(counts.tolist()):
        h = x[start:start + n].bfloat16() @ w_gate_up[e]
        rows.append((F.silu(h[:, :case.ffn]) * h[:, case.ffn:]) @ w_down[e])
        start += n
    assert_close(torch.cat(rows).float().bfloat16(), expected.bfloat16(), what="experts")


def test_weight_mapping_carries_gradients_to_torchtitans_parameters():
    inner = _local_routed(MoeCase(seed=3)).inner_experts
    w_gate_up, w_down = expert_weights(inner)
    (w_gate_up.sum() + 2 * w_down.sum()).backward()
    assert torch.equal(inner.w1_EFD.grad, torch.ones_like(inner.w1_EFD))
    assert torch.equal(inner.w3_EFD.grad, torch.ones_like(inner.w3_EFD))
    assert torch.equal(inner.w2_EDF.grad, torch.full_like(inner.w2_EDF, 2.0))


def test_drop_in_refuses_modules_it_cannot_run():
    routed = _local_routed(MoeCase(seed=0))
    with pytest.raises(ValueError, match="no EP mesh"):
        HocketRoutedExperts(routed)
    with pytest.raises(TypeError, match="not torchtitan's RoutedExperts"):
        HocketRoutedExperts(torch.nn.Linear(2, 2), group=object())
    with pytest.raises(TypeError, match="GroupedExperts"):
        expert_weights(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no torchtitan RoutedExperts"):
        use_hocket_experts(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    with pytest.raises(TypeError, match="compute_dtype"):
        HocketRoutedExperts(routed, group=object(), compute_dtype="bf16")


def test_use_hocket_experts_keeps_parameter_names():
    holder = torch.nn.Module()
    holder.routed_experts = _local_routed(MoeCase(seed=1))
    names = [n for n, _ in holder.named_parameters()]
    assert use_hocket_experts(holder, group=object()) == 1
    assert isinstance(holder.routed_experts, HocketRoutedExperts)
    assert [n for n, _ in holder.named_parameters()] == names  # state dicts and optimizers are unchanged


def test_planners_own_choice_is_recorded(fake_world):
    """plan=None while compiling: the MoE planner prices the layer (uniform routing); whatever it picks, the
    record says where the plan came from and, when left alone, why."""
    fake_world(2)
    case = MoeCase(seed=0)
    gm = _dynamo_graph(build_routed_experts(case, ep_mesh(2)), routing(case, rank=0, world=2))
    report = moe_graph_pass(copy.deepcopy(gm).graph, planner=GraphPlanner(cluster="cpu-host"), config=PassConfig(),
                            name="moe#0")
    (record,) = report.moe_sites
    assert record.source == "predicted"
    if record.plan.strategy == "sequential":
        assert not record.rewritten and "sequential chosen" in record.reason
    else:
        assert record.rewritten or "min_saving_fraction" in record.reason
    assert record.predicted_sequential_ms is not None and record.predicted_sequential_ms > 0
    assert record.site.key.startswith("a2a_mm:t6:h16:f8:e4k2:skew1:bfloat16:w2")
    text = Explanation(graphs=(report,)).format()
    assert "MoE layers: 1" in text

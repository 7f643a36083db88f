"""hocket.compile / hocket.explain on models without sites, and bad arguments."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

import hocket
from hocket.ops.tolerance import assert_close


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def test_a_model_without_sites_compiles_to_an_equivalent_module_with_an_empty_report(caplog):
    caplog.set_level(logging.INFO, logger="hocket.compile")
    torch._dynamo.reset()
    model = _Mlp()
    compiled = hocket.compile(model, backend="aot_eager")
    assert "nothing compiled yet" in hocket.explain(compiled).format()
    x = torch.randn(5, 16)
    x_ref, x_new = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected = model(x_ref)
    expected.sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    actual = compiled(x_new)
    actual.sum().backward()
    assert_close(actual.detach(), expected.detach(), what="output")
    assert_close(x_new.grad, x_ref.grad, what="input gradient")
    for name, param in model.named_parameters():
        assert_close(param.grad, ref_grads[name], what=f"gradient of {name}")
    report = hocket.explain(compiled)
    assert [g.direction for g in report.graphs] == ["forward", "backward"]
    assert report.sites == () and report.left_alone == () and report.gaps == ()
    logged = [r.getMessage() for r in caplog.records if r.name == "hocket.compile"]
    assert len(logged) == 2 and all("0 site(s)" in m for m in logged)  # once per compiled graph
    torch._dynamo.reset()


@pytest.mark.parametrize("call,error,match", [
    (lambda: hocket.compile("model"), TypeError, "torch.nn.Module"),
    (lambda: hocket.compile(nn.Linear(2, 2), backend="tvm"), ValueError, "aot_eager"),
    (lambda: hocket.compile(nn.Linear(2, 2), backend="aot_eager", options={"max_autotune": True}), ValueError,
     "Inductor options"),
    (lambda: hocket.compile(nn.Linear(2, 2), autotune="yes"), TypeError, "autotune"),
    (lambda: hocket.compile(nn.Linear(2, 2), plan_for=3), TypeError, "plan_for"),
    (lambda: hocket.explain(nn.Linear(2, 2)), TypeError, "hocket.compile"),
])
def test_bad_arguments_say_what_to_do(call, error, match):
    with pytest.raises(error, match=match):
        call()

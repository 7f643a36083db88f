"""The eager fast path (hocket.ops.eager): plain eager calls skip the custom op, everything that must
see the op (autograd, fake tensors, dispatch/function modes, torch.compile, vmap, autocast) still
does, and both paths give bit-identical results on a 1-rank gloo group (2 ranks: tests/dist)."""

from __future__ import annotations

import importlib
import os

import pytest
import torch
from _world1 import world1_group
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import hocket.ops as H
from hocket.ops import dispatch
from hocket.ops.eager import direct_call_ok

# hocket.ops re-exports functions under the modules' names, so ``import ... as`` would give the functions
ag_module = importlib.import_module("hocket.ops.all_gather_matmul")
rs_module = importlib.import_module("hocket.ops.matmul_reduce_scatter")
ar_module = importlib.import_module("hocket.ops.matmul_all_reduce")


@pytest.fixture(scope="module")
def pg():
    yield from world1_group()


@pytest.fixture
def direct_calls(monkeypatch):
    """Counts calls that reach each module's ``run_*`` through its module global: only the fast path
    does (the custom op keeps the function object it was registered with)."""
    counts = {"ag_mm": 0, "mm_rs": 0, "mm_ar": 0}
    for kind, module, name in [("ag_mm", ag_module, "run_all_gather_matmul"),
                               ("mm_rs", rs_module, "run_matmul_reduce_scatter"),
                               ("mm_ar", ar_module, "run_matmul_all_reduce")]:
        real = getattr(module, name)

        def counted(*args, _real=real, _kind=kind):
            counts[_kind] += 1
            return _real(*args)

        monkeypatch.setattr(module, name, counted)
    return counts


def _operands(requires_grad: bool = False):
    m, k, n = (int(v) for v in torch.randint(2, 9, (3,)))
    A = torch.randn(m, k, requires_grad=requires_grad)
    B = torch.randn(k, n, requires_grad=requires_grad)
    return A, B


def _call_all(pg, A, B, plan="sequential"):
    """Every public operator once; returns their outputs."""
    a, outs = H.all_gather_matmul(A, [B], 0, pg, plan=plan)
    rs = H.matmul_reduce_scatter(A, B, "sum", 0, pg, plan=plan)
    ar = H.matmul_all_reduce(A, B, "avg", pg, plan=plan)
    return [a, *outs, rs, ar]


class _RecordingDispatch(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class _RecordingFunction(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(str(func))
        return func(*args, **(kwargs or {}))


def test_plain_eager_takes_the_direct_path(pg, direct_calls):
    A, B = _operands()
    _call_all(pg, A, B)
    assert direct_calls == {"ag_mm": 1, "mm_rs": 1, "mm_ar": 1}
    with torch.no_grad():
        A2, B2 = _operands(requires_grad=True)
        _call_all(pg, A2, B2)
    with torch.inference_mode():
        _call_all(pg, A, B)
    assert direct_calls == {"ag_mm": 3, "mm_rs": 3, "mm_ar": 3}


def test_parameters_without_grad_take_the_direct_path(pg, direct_calls):
    A, B = _operands()
    W = torch.nn.Parameter(B, requires_grad=False)
    H.matmul_all_reduce(A, W, "sum", pg, plan="sequential")
    assert direct_calls["mm_ar"] == 1


def test_requires_grad_goes_through_the_custom_op(pg, direct_calls):
    A, B = _operands(requires_grad=True)
    outs = _call_all(pg, A, B)
    assert direct_calls == {"ag_mm": 0, "mm_rs": 0, "mm_ar": 0}
    assert all(o.grad_fn is not None for o in outs)
    sum(o.sum() for o in outs).backward()
    assert A.grad is not None and B.grad is not None


def test_fake_tensor_mode_goes_through_the_custom_op(pg, direct_calls):
    A, B = _operands()
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fA, fB = mode.from_tensor(A), mode.from_tensor(B)
        outs = _call_all(pg, fA, fB)
    assert direct_calls == {"ag_mm": 0, "mm_rs": 0, "mm_ar": 0}
    assert [tuple(o.shape) for o in outs] == [tuple(A.shape), (A.shape[0], B.shape[1]),
                                              (A.shape[0], B.shape[1]), (A.shape[0], B.shape[1])]


def test_dispatch_mode_sees_the_custom_op(pg, direct_calls):
    A, B = _operands()
    with _RecordingDispatch() as mode:
        _call_all(pg, A, B)
    assert direct_calls == {"ag_mm": 0, "mm_rs": 0, "mm_ar": 0}
    for name in ("hocket.all_gather_matmul", "hocket.matmul_reduce_scatter", "hocket.matmul_all_reduce"):
        assert any(name in op for op in mode.ops), (name, mode.ops)


def test_function_mode_goes_through_the_custom_op(pg, direct_calls):
    A, B = _operands()
    with _RecordingFunction():
        outs = _call_all(pg, A, B)
    assert direct_calls == {"ag_mm": 0, "mm_rs": 0, "mm_ar": 0}
    assert all(torch.isfinite(o).all() for o in outs)


def test_torch_compile_graph_contains_the_custom_op(pg, direct_calls):
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    def f(A, B):
        return _call_all(pg, A, B)

    torch._dynamo.reset()
    A, B = _operands()
    compiled = torch.compile(f, backend=capture, fullgraph=True)
    got = compiled(A, B)
    assert graphs and all(f"hocket.{op}" in graphs[0]
                          for op in ("all_gather_matmul", "matmul_reduce_scatter", "matmul_all_reduce"))
    eager = f(A, B)
    assert all(torch.equal(x, y) for x, y in zip(got, eager))
    torch._dynamo.reset()


def test_compiled_with_eager_backend_matches(pg):
    A, B = _operands()
    torch._dynamo.reset()
    got = torch.compile(lambda a, b: _call_all(pg, a, b), backend="eager")(A, B)
    assert all(torch.equal(x, y) for x, y in zip(got, _call_all(pg, A, B)))
    torch._dynamo.reset()


def test_predicate_refuses_transforms_autocast_and_subclasses(pg):
    A, B = _operands()
    assert direct_call_ok([A, B])
    seen = []
    torch.vmap(lambda x: (seen.append(direct_call_ok([x, B])), x)[1])(torch.randn(3, 2))
    torch.func.grad(lambda x: (seen.append(direct_call_ok([x])), x.sum())[1])(torch.randn(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        seen.append(direct_call_ok([A, B]))

    class Sub(torch.Tensor):
        pass

    seen.append(direct_call_ok([A, B.as_subclass(Sub)]))
    seen.append(direct_call_ok([A, torch.nn.Parameter(B)]))  # requires grad, grad on
    assert seen == [False, False, False, False, False]
    assert direct_call_ok([A, B])


@pytest.mark.parametrize("plan", ["sequential", "bulk", "chunked", "ring", "bidir_ring"])
def test_both_paths_give_identical_results(pg, plan):
    A, B = _operands()
    B2 = torch.randn(A.shape[1], 3)
    gn = pg.group_name
    a, outs = H.all_gather_matmul(A, [B, B2], 0, pg, plan=plan)
    a_op, outs_op = torch.ops.hocket.all_gather_matmul(A, [B, B2], 0, gn, True, True, plan, "forward")
    assert torch.equal(a, a_op) and all(torch.equal(x, y) for x, y in zip(outs, outs_op))
    assert a.data_ptr() != A.data_ptr()
    for reduce_op in ("sum", "avg"):
        assert torch.equal(H.matmul_reduce_scatter(A, B, reduce_op, 0, pg, plan=plan),
                           torch.ops.hocket.matmul_reduce_scatter(A, B, reduce_op, 0, gn, plan, "forward"))
        assert torch.equal(H.matmul_all_reduce(A, B, reduce_op, pg, plan=plan),
                           torch.ops.hocket.matmul_all_reduce(A, B, reduce_op, gn, plan, "forward"))
    none_A, _ = H.all_gather_matmul(A, [B], 0, pg, return_A=False, plan=plan)
    assert none_A is None


def test_bad_input_errors_are_unchanged_on_the_direct_path(pg):
    A, B = _operands()
    with pytest.raises(ValueError, match="reduce_op"):
        H.matmul_all_reduce(A, B, "max", pg)
    with pytest.raises((ValueError, RuntimeError)):
        H.matmul_reduce_scatter(A, torch.randn(A.shape[1] + 1, 2), "sum", 0, pg)


def test_env_flags_follow_runtime_changes(monkeypatch):
    monkeypatch.delenv("HOCKET_DISABLE", raising=False)
    monkeypatch.delenv("HOCKET_AGREEMENT", raising=False)
    monkeypatch.delenv("HOCKET_EAGER_GRAPHS", raising=False)
    assert dispatch._env_flags() == (False, False, "off")
    monkeypatch.setenv("HOCKET_DISABLE", "1")
    assert dispatch._env_flags() == (True, False, "off")
    monkeypatch.setenv("HOCKET_AGREEMENT", "always")
    assert dispatch._env_flags() == (True, True, "off")
    monkeypatch.setenv("HOCKET_DISABLE", "0")
    assert dispatch._env_flags() == (False, True, "off")
    monkeypatch.setenv("HOCKET_EAGER_GRAPHS", "auto")
    assert dispatch._env_flags() == (False, True, "auto")


def test_env_flags_read_a_mapping_put_in_place_of_os_environ(monkeypatch):
    monkeypatch.setattr(os, "environ", {"HOCKET_DISABLE": "yes"})
    assert dispatch._env_flags() == (True, False, "off")
    os.environ["HOCKET_AGREEMENT"] = "always"
    assert dispatch._env_flags() == (True, True, "off")


def test_hocket_disable_at_runtime_forces_sequential(pg, monkeypatch):
    A, B = _operands()
    monkeypatch.delenv("HOCKET_DISABLE", raising=False)
    dispatch.clear_prepared_cache()
    H.matmul_all_reduce(A, B, "sum", pg, plan="chunked")
    monkeypatch.setenv("HOCKET_DISABLE", "1")
    H.matmul_all_reduce(A, B, "sum", pg, plan="chunked")
    strategies = sorted(p.plan.strategy for p in dispatch._PREPARED.values() if p.site.kind == "mm_ar")
    assert strategies == ["chunked", "sequential"]


def test_profiler_range_is_recorded_only_while_profiling(pg):
    A, B = _operands()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        H.matmul_all_reduce(A, B, "sum", pg, plan="sequential")
    names = [e.name for e in prof.events()]
    assert any(name.startswith("hocket::matmul_all_reduce[") for name in names), names
    assert not torch.autograd._profiler_enabled()

"""The torch.library ops in one process: fake impls match real shapes/strides for every strategy,
torch.compile(fullgraph) traces them (forward and backward), and a 1-rank gloo group runs them
against plain torch (multi-rank numerics live in tests/dist)."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.testing._internal.distributed.fake_pg import FakeStore

import hocket.ops as H
from hocket.ops.executors import supported_table

SUPPORTED = supported_table()


@contextlib.contextmanager
def default_group(backend: str, world: int):
    if dist.is_initialized():
        pytest.skip("a default process group already exists in this process")
    store = FakeStore() if backend == "fake" else dist.HashStore()
    dist.init_process_group(backend, store=store, rank=0, world_size=world)
    try:
        yield dist.group.WORLD
    finally:
        H.close_contexts()
        dist.destroy_process_group()


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float32).to(dtype)


CASES = [((5, 8), 0), ((2, 3, 8), 1), ((2, 3, 8), 2), ((3, 8), 1)]


@pytest.mark.parametrize("shape, dim", CASES)
def test_fake_shapes_at_world4(shape, dim):
    with default_group("fake", 4) as pg, FakeTensorMode():
        A = _r(*shape)
        K = shape[-1] * (4 if dim == len(shape) - 1 else 1)
        for strategy in SUPPORTED["ag_mm"]:
            a, outs = H.all_gather_matmul(A, [_r(K, 6), _r(K, 2)], dim, pg, plan=strategy)
            full = list(shape)
            full[dim] *= 4
            assert list(a.shape) == full and a.is_contiguous()
            assert [list(o.shape) for o in outs] == [full[:-1] + [6], full[:-1] + [2]]
            assert all(o.is_contiguous() for o in outs)
        out = H.matmul_reduce_scatter(_r(4, *shape), _r(shape[-1], 12), "sum", 0, pg)
        assert list(out.shape) == [1, *shape[:-1], 12]
        out = H.matmul_all_reduce(A, _r(shape[-1], 3), "avg", pg, plan="substituted")
        assert list(out.shape) == [*shape[:-1], 3]


def test_fake_impl_raises_the_local_errors():
    with default_group("fake", 4) as pg, FakeTensorMode():
        with pytest.raises(ValueError, match="not divisible by the group size 4"):
            H.matmul_reduce_scatter(_r(6, 8), _r(8, 5), "sum", 0, pg)
        with pytest.raises(ValueError, match="K mismatch"):
            H.matmul_all_reduce(_r(6, 8), _r(7, 5), "sum", pg)


@pytest.mark.parametrize("strategy", sorted(set().union(*SUPPORTED.values())))
def test_one_rank_group_matches_torch_and_fake_strides(strategy):
    with default_group("gloo", 1) as pg:
        for shape, dim in CASES:
            A = _r(*shape)
            Bs = [_r(shape[-1], 5), _r(shape[-1], 3)]
            if strategy in SUPPORTED["ag_mm"]:
                a, outs = H.all_gather_matmul(A, Bs, dim, pg, plan={"strategy": strategy, "chunks": 2})
                torch.testing.assert_close(a, A)
                assert a.data_ptr() != A.data_ptr()
                for o, B in zip(outs, Bs):
                    torch.testing.assert_close(o, A @ B)
                with FakeTensorMode() as mode:
                    fa, fouts = H.all_gather_matmul(mode.from_tensor(A), [mode.from_tensor(B) for B in Bs], dim, pg)
                assert fa.stride() == a.stride() and [f.stride() for f in fouts] == [o.stride() for o in outs]
            B = Bs[0]
            if strategy in SUPPORTED["mm_rs"]:
                out = H.matmul_reduce_scatter(A, B, "avg", dim, pg, plan=strategy)
                torch.testing.assert_close(out, A @ B)
            if strategy in SUPPORTED["mm_ar"]:
                out = H.matmul_all_reduce(A, B, "sum", pg, plan={"strategy": strategy, "chunks": 3})
                torch.testing.assert_close(out, A @ B)
                assert out.is_contiguous()


@pytest.mark.parametrize("save_gathered", [True, False])
def test_compile_fullgraph_forward_and_backward(save_gathered):
    with default_group("gloo", 1) as pg:
        def f(A, B, C):
            _, (o,) = H.all_gather_matmul(A, [B], 0, pg, plan="chunked", return_A=False, save_gathered=save_gathered)
            r = H.matmul_reduce_scatter(o, C, "avg", 0, pg.group_name, plan="ring")
            return H.matmul_all_reduce(r, B, "sum", pg, plan="substituted")

        A, B, C = (_r(6, 8).requires_grad_(), _r(8, 8).requires_grad_(), _r(8, 8).requires_grad_())
        out = torch.compile(f, backend="aot_eager", fullgraph=True)(A, B, C)
        (out * out).sum().backward()
        got = [A.grad, B.grad, C.grad]
        A2, B2, C2 = (t.detach().clone().requires_grad_() for t in (A, B, C))
        ref = ((A2 @ B2) @ C2) @ B2
        (ref * ref).sum().backward()
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        for g, r in zip(got, [A2.grad, B2.grad, C2.grad]):
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)


def test_disable_flag_and_record_function_name_the_strategy(monkeypatch):
    with default_group("gloo", 1) as pg:
        A, B = _r(4, 8), _r(8, 3)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            H.matmul_all_reduce(A, B, "sum", pg, plan="chunked")
            monkeypatch.setenv("HOCKET_DISABLE", "1")
            H.matmul_all_reduce(A, B, "sum", pg, plan="chunked")
        names = [e.name for e in prof.events() if e.name.startswith("hocket::")]
        assert "hocket::matmul_all_reduce[chunked(1)]" in names
        assert "hocket::matmul_all_reduce[sequential]" in names


def test_unknown_group_and_no_process_group_are_clear_errors():
    if dist.is_initialized():
        pytest.skip("a default process group already exists in this process")
    with pytest.raises(ValueError, match="not initialised"):
        H.matmul_all_reduce(_r(4, 8), _r(8, 3), "sum", "0")
    with default_group("gloo", 1):
        with pytest.raises(ValueError, match="names no live process group"):
            H.matmul_all_reduce(_r(4, 8), _r(8, 3), "sum", "no-such-group")
        with pytest.raises(TypeError, match="group must be"):
            H.matmul_all_reduce(_r(4, 8), _r(8, 3), "sum", 17)


def test_device_mesh_groups():
    from torch.distributed.device_mesh import DeviceMesh

    with default_group("gloo", 1):
        A, B = _r(4, 8), _r(8, 3)
        mesh = DeviceMesh("cpu", [0])
        torch.testing.assert_close(H.matmul_all_reduce(A, B, "sum", mesh, plan="ring"), A @ B)
        with pytest.raises(ValueError, match="1-D mesh"):
            H.matmul_all_reduce(A, B, "sum", DeviceMesh("cpu", [[0]]))

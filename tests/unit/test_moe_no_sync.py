"""``splits="padded"`` reads nothing on the host: the four executor calls of a training step (both ops forward and
the backward calls their autograd makes) of every MoE strategy, maps built afresh, run under a dispatch mode that
records host reads (``aten._local_scalar_dense``: ``.item()``, ``int(t)``, ``bool(t)``), ops that sync on a
device to size their output (``nonzero``, ``masked_select``, ``unique``, ``repeat_interleave`` without
``output_size``), tensors made from host data (a host-to-device copy on a device, which a CUDA graph cannot
capture) and ``Tensor.tolist`` (which reads a CPU tensor without dispatching). One rank in-process: the
executors' index work is the same at any world size."""

from __future__ import annotations

import pytest
import torch
from _world1 import world1_group
from torch.utils._python_dispatch import TorchDispatchMode

from hocket.core.plan import Plan
from hocket.ops import moe_exec
from hocket.ops.grouped_mm import grouped_mm_backend
from hocket.ops.moe_exec import MOE_STRATEGIES, run_a2a_mm, run_mm_a2a
from hocket.ops.moe_library import _runtime
from hocket.strategies import spec
from hocket.transport.group import resolve_group

SYNCING = ("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.unique", "aten._unique",
           "aten.lift_fresh")
"""``lift_fresh``: a tensor made from host data (``torch.tensor(...)``), a host-to-device copy on a device."""


class HostReads(TorchDispatchMode):
    """Records every op of :data:`SYNCING` and every ``repeat_interleave`` without ``output_size``."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func)
        if name.startswith(SYNCING):
            self.found.append(str(func))
        if name == "aten.repeat_interleave" and kwargs.get("output_size") is None and len(args) < 3:
            self.found.append(f"{func} without output_size")
        return func(*args, **kwargs)


@pytest.fixture(scope="module")
def pg():
    yield from world1_group()


@pytest.fixture
def host_reads(monkeypatch):
    """A :class:`HostReads` to enter; its ``found`` also lists every ``Tensor.tolist`` call meanwhile."""
    mode = HostReads()
    plain = torch.Tensor.tolist

    def tolist(self):
        mode.found.append("Tensor.tolist")
        return plain(self)
    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    return mode


def _plans(splits: str) -> list[Plan]:
    plans = []
    for name in MOE_STRATEGIES:
        found = spec(name)
        chunks = (1,) if found.fixed_chunks else tuple(c for c in (2, 3) if c >= found.min_chunks)
        plans += [Plan(strategy=name, chunks=c, splits=splits) for c in chunks]
    return plans


def _step(pg, plan: Plan) -> None:
    """Both executors forward and their backward twins, as the custom ops and their autograd call them."""
    gen = torch.Generator().manual_seed(3)
    e_local, k, tokens, hidden, ffn = 4, 2, 6, 8, 8
    ids = torch.stack([torch.randperm(e_local, generator=gen)[:k] for _ in range(tokens)]).reshape(-1)
    counts = torch.bincount(ids, minlength=e_local).unsqueeze(0)
    rows = tokens * min(k, e_local)  # world x L rows, L = tokens x min(k, e_local)
    send = torch.randn(rows, hidden, generator=gen)
    w1 = torch.randn(e_local, hidden, 2 * ffn, generator=gen)
    w2 = torch.randn(e_local, ffn, hidden, generator=gen)
    rt = _runtime(resolve_group(pg).name, plan)
    h, received, _ = run_a2a_mm(send, counts, w1, None, k, rt, plan)
    act = h[:, :ffn].contiguous()
    y, _ = run_mm_a2a(act, counts, w2, None, None, k, rt, plan)
    grad_y = torch.randn(y.shape, generator=gen)
    d_act, _, d_w2 = run_a2a_mm(grad_y, counts, w2.transpose(1, 2), act, k, rt, plan)
    grad_h = torch.randn(h.shape, generator=gen)
    d_send, d_w1 = run_mm_a2a(grad_h, counts, w1.transpose(1, 2), received, grad_h, k, rt, plan)
    assert d_send.shape == send.shape and d_w1.shape == w1.shape and d_w2.shape == w2.shape
    assert d_act.shape == act.shape


@pytest.mark.parametrize("plan", _plans("padded"), ids=lambda p: p.describe())
def test_padded_executors_read_nothing_on_the_host(pg, host_reads, plan):
    moe_exec._MAPS.clear()  # the maps' build is part of the call
    grouped_mm_backend("cpu", torch.float32)  # the backend probe checks its result on the CPU (only), once
    with host_reads:
        _step(pg, plan)
    assert host_reads.found == [], f"{plan.describe()} read on the host: {sorted(set(host_reads.found))}"


def test_the_recorder_sees_host_reads(pg, host_reads):
    """The exchanged split sizes are read on the host (their defining property), and so is ``.item()``."""
    moe_exec._MAPS.clear()
    with host_reads:
        _step(pg, Plan(splits="exchanged"))
        torch.ones(2).sum().item()
    assert "Tensor.tolist" in host_reads.found
    assert "aten._local_scalar_dense.default" in host_reads.found

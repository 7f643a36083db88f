"""Rank-side stencil calls (``hocket.ops.stencil_steps``) against the whole-grid reference, the event order of
``overlap`` through an instrumented transport, and bad inputs."""

from __future__ import annotations

import torch
import torch.distributed as dist

import hocket.ops as H
from hocket.ops.stencil import P2PTransport, block_slices, process_grid
from hocket.ops.stencil_fields import Carried, Static, reference_steps
from hocket.ops.stencil_terms import laplacian

DTYPES = {"float64": torch.float64, "float32": torch.float32}


def heat_step(radius: int, split: int, periodic: bool):
    def step(padded):
        (u,) = padded
        core = tuple(slice(radius, -radius) for _ in range(split))
        return (u[core] + 0.05 * laplacian(u, radius, split, periodic=periodic),)
    return step


def wave_step(radius: int, split: int, periodic: bool):
    def step(padded):
        u, u_prev, c2 = padded
        core = tuple(slice(radius, -radius) for _ in range(split))
        return 2 * u[core] - u_prev + 0.02 * c2 * laplacian(u, radius, split, periodic=periodic), u[core]
    return step


def _mesh(procs, use_device_mesh: bool):
    if not use_device_mesh:
        return tuple(procs)
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", tuple(procs))


def _fields(case: dict, dtype):
    g = torch.Generator().manual_seed(case.get("seed", 0))
    grid = case["grid"]
    u = torch.randn(grid, generator=g, dtype=torch.float64).to(dtype)
    if case.get("wave"):
        return (u, Carried(torch.randn(grid, generator=g, dtype=torch.float64).to(dtype)),
                Static(torch.rand(grid, generator=g, dtype=torch.float64).to(dtype)))
    return (u,)


def _local(fields, sl):
    wrap = {Carried: Carried, Static: Static}
    return tuple(wrap[type(f)](f.tensor[sl].clone()) if type(f) in wrap else f[sl].clone() for f in fields)


def _tensor(f):
    return f.tensor if isinstance(f, (Carried, Static)) else f


def run_cases(cases: list[dict]) -> list[tuple[float, float]]:
    """Per case: (max |stencil_steps - reference| over this rank's blocks, max |reference - initial|)."""
    out = []
    for case in cases:
        dtype = DTYPES[case["dtype"]]
        procs, r, boundary = tuple(case["procs"]), case["radius"], case["boundary"]
        periodic = boundary == "periodic"
        split = len(procs)
        step = (wave_step if case.get("wave") else heat_step)(r, split, periodic)
        fields = _fields(case, dtype)
        ref = reference_steps(fields, step, r, split, steps=case["steps"], boundary=boundary)
        grid = process_grid(procs, boundary)
        sl = block_slices(case["grid"], procs, grid.coord)
        got = H.stencil_steps(_local(fields, sl), step, r, _mesh(procs, case.get("device_mesh", False)),
                              steps=case["steps"], boundary=boundary, plan=case.get("plan"))
        assert len(got) == len(fields) and type(got[-1]) is type(fields[-1])
        err = max(float((_tensor(a) - _tensor(b)[sl]).abs().max()) for a, b in zip(got, ref))
        moved = float((_tensor(ref[0]) - _tensor(fields[0])).abs().max())
        out.append((err, moved))
    return out


class RecordingTransport(P2PTransport):
    """Records ``post`` (with its receive and send counts) and ``wait`` events into ``events``."""

    def __init__(self, events: list) -> None:
        self.events = events

    def post(self, sends, recvs):
        self.events.append(("post", len(recvs), len(sends)))
        return _RecordedPending(super().post(sends, recvs), self.events)


class _RecordedPending:
    def __init__(self, pending, events: list) -> None:
        self.pending, self.events = pending, events

    def wait(self) -> None:
        self.pending.wait()
        self.events.append(("wait",))


def overlap_events(strategy: str) -> list[tuple]:
    """The event order of one step of ``strategy`` on a 1-D grid: post, compute (with the output shape), wait."""
    events: list = []
    r, procs = 1, (dist.get_world_size(),)
    inner = heat_step(r, 1, False)

    def step(padded):
        events.append(("compute", tuple(padded[0].shape)))
        return inner(padded)

    grid = process_grid(procs, "fixed")
    u = torch.randn(8 * procs[0], 4, dtype=torch.float64)
    sl = block_slices(u.shape, procs, grid.coord)
    H.stencil_steps((u[sl].clone(),), step, r, procs, plan=strategy)  # checks and agreement first
    events.clear()
    H.stencil_steps((u[sl].clone(),), step, r, procs, plan=strategy, _transport=RecordingTransport(events))
    return events


def bad_call(which: str, only_rank: int | None = None) -> None:
    """A bad stencil_steps call (on every rank, or a good one except on ``only_rank``)."""
    w = dist.get_world_size()
    bad = only_rank is None or dist.get_rank() == only_rank
    step = heat_step(1, 1, False)
    u = torch.randn(6, 4, dtype=torch.float64)
    fields, radius, procs, kwargs, fn = (u,), 1, (w,), {}, step
    if not bad:
        pass
    elif which == "procs_not_world":
        procs = (w + 1,)
    elif which == "radius_zero":
        radius = 0
    elif which == "steps_zero":
        kwargs["steps"] = 0
    elif which == "halo_wider_than_block":
        radius = 7
        fn = heat_step(7, 1, False)
    elif which == "deep_halo_wider":
        kwargs.update(steps=4, plan={"strategy": "deep_halo", "chunks": 4, "transport": "p2p"})
        radius = 2
        fn = heat_step(2, 1, False)
    elif which == "fields_differ":
        fields = (u, torch.randn(6, 5, dtype=torch.float64))
        fn = lambda p: (step(p[:1])[0], p[1][1:-1])  # noqa: E731
    elif which == "wrong_shape":
        fn = lambda p: (p[0],)  # noqa: E731  (returns the padded block, not the interior)
    elif which == "uneven":  # this rank's block has 7 rows, its peers' 6: the grid does not split evenly
        fields = (torch.randn(7, 4, dtype=torch.float64),)
    elif which == "bad_boundary":
        kwargs["boundary"] = "open"
    H.stencil_steps(fields, fn, radius, procs, **kwargs)


def healthy(n: int) -> bool:
    """The group still works after a refused call."""
    procs = (dist.get_world_size(),)
    u = torch.randn(4 * procs[0], 3, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    grid = process_grid(procs, "periodic")
    sl = block_slices(u.shape, procs, grid.coord)
    step = heat_step(1, 1, True)
    got = H.stencil_steps((u[sl].clone(),), step, 1, procs, steps=n, boundary="periodic", plan="overlap")
    ref = reference_steps((u,), step, 1, 1, steps=n, boundary="periodic")
    return bool(torch.allclose(got[0], ref[0][sl], rtol=0, atol=1e-12))

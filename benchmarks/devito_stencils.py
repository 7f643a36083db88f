"""Devito's side of the stencil benchmark: the same heat and acoustic-wave steps as ``bench_stencils.py``, solved by
Devito under MPI with each ``DEVITO_MPI`` mode, timed per step. Run by ``bench_stencils.py --devito`` (it starts
this script under ``mpirun``); it imports neither torch nor hocket, so it runs in Devito's own environment
(``benchmarks/devito_setup.sh``).

The problems, float32, unit grid spacing, cells outside the grid read as zero (hocket's ``fixed`` boundary):

* heat: ``u(t+1) = u + (0.1 / r) * laplace(u)``;
* wave: ``u(t+1) = 2 u - u(t-1) + c2 * laplace(u)`` with a static ``c2``;

``laplace`` is Devito's central Laplacian of space order ``2 r`` (the same weights as
``hocket.ops.stencil_terms.laplacian``). Before timing, each mode's result after ``steps`` steps is checked against
a NumPy reference on the whole grid (``--check-grid``, gathered on rank 0). Timing: one apply to JIT-compile
(excluded), then ``--repeats`` applies of ``steps`` steps, each after a barrier; a sample is the slowest rank's
wall time per step; the median is reported. One JSON object per case on stdout of rank 0.

    mpirun --allow-run-as-root -n 2 python benchmarks/devito_stencils.py --problem heat --grid 1024x1024 --order 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

MODES = ("basic", "diag", "diag2", "overlap", "overlap2", "full")


def fd_weights(radius: int) -> np.ndarray:
    """Central second-derivative weights of order ``2 * radius`` (offsets ``-radius .. radius``)."""
    offsets = np.arange(-radius, radius + 1, dtype=np.float64)
    n = len(offsets)
    vander = np.vander(offsets, n, increasing=True).T
    rhs = np.zeros(n)
    rhs[2] = 2.0
    return np.linalg.solve(vander, rhs)


def laplace_np(u: np.ndarray, radius: int) -> np.ndarray:
    w = fd_weights(radius)
    padded = np.pad(u, radius)
    out = np.zeros_like(u, dtype=np.float64)
    for axis in range(u.ndim):
        for j, wj in enumerate(w):
            sl = [slice(radius, radius + s) for s in u.shape]
            sl[axis] = slice(j, j + u.shape[axis])
            out += wj * padded[tuple(sl)]
    return out


def initial(problem: str, shape: tuple[int, ...], radius: int):
    rng = np.random.default_rng(0)
    u0 = rng.standard_normal(shape).astype(np.float32)
    c2 = (0.05 * (1 + 0.5 * rng.random(shape)) / radius).astype(np.float32) if problem == "wave" else None
    return u0, c2


def reference(problem: str, u0: np.ndarray, c2, radius: int, steps: int) -> np.ndarray:
    u, prev = u0.astype(np.float64), u0.astype(np.float64)
    for _ in range(steps):
        if problem == "heat":
            u = u + (0.1 / radius) * laplace_np(u, radius)
        else:
            u, prev = 2 * u - prev + c2 * laplace_np(u, radius), u
    return u


def build(problem: str, shape: tuple[int, ...], radius: int):
    from devito import Eq, Function, Grid, Operator, TimeFunction

    grid = Grid(shape=shape, extent=tuple(float(s - 1) for s in shape))
    if problem == "heat":
        u = TimeFunction(name="u", grid=grid, space_order=2 * radius)
        return grid, u, None, Operator([Eq(u.forward, u + (0.1 / radius) * u.laplace)])
    u = TimeFunction(name="u", grid=grid, space_order=2 * radius, time_order=2)
    c2 = Function(name="c2", grid=grid, space_order=0)
    return grid, u, c2, Operator([Eq(u.forward, 2 * u - u.backward + c2 * u.laplace)])


def load(problem: str, u, c2, u0: np.ndarray, c2_0) -> None:
    """Set the initial state (the whole-grid arrays; Devito scatters them to the ranks' blocks)."""
    u.data[:] = 0.0
    if problem == "heat":
        u.data[0] = u0
    else:  # time_order=2: buffer slots (t-1, t) both hold u0, the pulse at rest; time index 1 is "now"
        u.data[0] = u0
        u.data[1] = u0
        c2.data[:] = c2_0


def result(problem: str, u, steps: int) -> np.ndarray | None:
    """The field after ``steps`` steps on rank 0 (None on the others): ``data_gather`` is collective."""
    slot = steps % 2 if problem == "heat" else (steps + 1) % 3
    whole = u.data_gather(rank=0)
    return None if whole is None else np.asarray(whole[slot])


def run_mode(mode: str, args, comm) -> dict:
    from devito import configuration

    configuration["mpi"] = mode
    radius = args.order // 2
    out = {"mode": mode}
    # correct first: a small whole grid against NumPy
    shape = args.check_grid[:len(args.grid)]
    grid, u, c2, op = build(args.problem, shape, radius)
    u0, c20 = initial(args.problem, shape, radius)
    load(args.problem, u, c2, u0, c20)
    op.apply(**_time(args.problem, args.steps))
    got = result(args.problem, u, args.steps)
    want = reference(args.problem, u0, c20, radius, args.steps)
    if comm.rank == 0:
        scale = float(np.abs(want).max()) or 1.0
        out["max_rel_error"] = float(np.abs(got - want).max() / scale)
    # timing on the benchmark grid
    grid, u, c2, op = build(args.problem, args.grid, radius)
    u0, c20 = initial(args.problem, args.grid, radius)
    load(args.problem, u, c2, u0, c20)
    op.apply(**_time(args.problem, args.steps))  # JIT compilation, excluded
    samples = []
    for _ in range(args.repeats):
        comm.Barrier()
        start = time.perf_counter()
        op.apply(**_time(args.problem, args.steps))
        elapsed = (time.perf_counter() - start) * 1e3 / args.steps
        samples.append(comm.allreduce(elapsed, op=_max()))
    out["ms_per_step"] = statistics.median(samples)
    out["samples"] = samples
    return out


def _time(problem: str, steps: int) -> dict:
    return {"time_m": 0, "time_M": steps - 1} if problem == "heat" else {"time_m": 1, "time_M": steps}


def _max():
    from mpi4py import MPI

    return MPI.MAX


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", choices=("heat", "wave"), required=True)
    parser.add_argument("--grid", type=lambda t: tuple(int(v) for v in t.split("x")), required=True)
    parser.add_argument("--order", type=int, choices=(2, 4, 8), required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--check-grid", type=lambda t: tuple(int(v) for v in t.split("x")), default=(32, 24, 16))
    args = parser.parse_args(argv)
    os.environ.setdefault("DEVITO_LOGGING", "ERROR")
    from devito import configuration
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    configuration["log-level"] = "ERROR"
    rows = []
    for mode in args.modes.split(","):
        try:
            rows.append(run_mode(mode, args, comm))
        except Exception as exc:  # a mode Devito refuses for this problem is reported, not fatal
            rows.append({"mode": mode, "error": f"{type(exc).__name__}: {exc}"[:300]})
    if comm.rank == 0:
        print(json.dumps({"problem": args.problem, "grid": list(args.grid), "order": args.order,
                          "ranks": comm.size, "steps": args.steps, "modes": rows}))


if __name__ == "__main__":
    main()

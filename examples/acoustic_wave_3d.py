"""3-D acoustic wave (second order in time) on a 2-D process grid: hocket.ops.stencil_steps with a carried field.

    python examples/acoustic_wave_3d.py --world 2 --order 8               # self-spawned CPU ranks (gloo)
    torchrun --nproc-per-node 4 examples/acoustic_wave_3d.py --procs 2x2 --order 4 --plan deep_halo

``u(t+1) = 2 u(t) - u(t-1) + (c dt)^2 laplacian(u(t))`` with a central Laplacian of space order 2, 4 or 8
(radius 1, 2, 4). ``u(t)`` is exchanged every step; ``u(t-1)`` is carried (``Carried``: never exchanged) and
the velocity model ``(c dt)^2`` is static (``Static``). The process grid splits the first two grid dims; the
third is whole on every rank (the Laplacian pads it itself). Every rank checks its block against the same
steps on the whole grid in one process.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist


def dims(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split("x"))


def wave_step(radius: int, split: int, periodic: bool):
    """``(u padded, u_prev, c2) -> (u_next, u)`` on the cells of ``u_prev``'s box."""
    from hocket.ops.stencil_terms import laplacian

    def step(padded):
        u, u_prev, c2 = padded
        core = tuple(slice(radius, -radius) for _ in range(split))
        here = u[core]
        return 2 * here - u_prev + c2 * laplacian(u, radius, split, periodic=periodic), here
    return step


def _device() -> torch.device:
    """This rank's GPU under NCCL, else the CPU (gloo)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def run(rank: int, world: int, options: dict) -> str:
    import hocket.ops as H
    from hocket.ops.stencil import block_slices, process_grid
    from hocket.ops.stencil_fields import reference_steps

    grid, r = options["grid"], options["order"] // 2
    procs = options["procs"] or ((world, 1) if world > 1 else (1, 1))
    step = wave_step(r, len(procs), options["boundary"] == "periodic")
    gen = torch.Generator().manual_seed(0)  # the same fields on every rank
    x = torch.linspace(-1, 1, grid[0], dtype=torch.float64)[:, None, None]
    y = torch.linspace(-1, 1, grid[1], dtype=torch.float64)[None, :, None]
    z = torch.linspace(-1, 1, grid[2], dtype=torch.float64)[None, None, :]
    u0 = torch.exp(-20 * (x ** 2 + y ** 2 + z ** 2))                       # a pulse at rest
    c2 = 0.05 * (1 + 0.5 * torch.rand(grid, generator=gen, dtype=torch.float64)) / r  # (c dt)^2, CFL-safe
    u0, c2 = u0.expand(grid).to(_device()), c2.to(_device())
    fields = (u0, H.Carried(u0.clone()), H.Static(c2))
    block = block_slices(grid, procs, process_grid(procs, options["boundary"]).coord)
    local = (u0[block].clone(), H.Carried(u0[block].clone()), H.Static(c2[block].clone()))
    plan = None if options["plan"] == "auto" else options["plan"]
    if plan == "deep_halo":
        plan = {"strategy": "deep_halo", "chunks": 2, "transport": "p2p"}
    kwargs = dict(steps=options["steps"], boundary=options["boundary"], plan=plan)
    got = H.stencil_steps(local, step, r, procs, **kwargs)
    want = reference_steps(fields, step, r, len(procs), steps=options["steps"], boundary=options["boundary"])
    error = max(float((got[0] - want[0][block]).abs().max()),
                float((got[1].tensor - want[1].tensor[block]).abs().max()))
    assert error < 1e-10, f"rank {rank}: max error {error} against the whole-grid reference"
    dist.barrier()
    start = time.perf_counter()
    H.stencil_steps(local, step, r, procs, **kwargs)
    ms = (time.perf_counter() - start) * 1e3 / options["steps"]
    return (f"acoustic 3-D grid {grid} procs {procs} order {options['order']} {options['boundary']} plan "
            f"{options['plan']}: max error {error:.2e}, {ms:.3f} ms per step")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2, help="ranks to spawn when not under torchrun")
    parser.add_argument("--grid", type=dims, default=(24, 24, 16), help="global grid, e.g. 24x24x16")
    parser.add_argument("--procs", type=dims, default=None, help="2-D process grid, e.g. 2x1 or 2x2")
    parser.add_argument("--order", type=int, default=4, choices=(2, 4, 8), help="space order")
    parser.add_argument("--boundary", default="fixed", choices=("fixed", "periodic"))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--plan", default="overlap", choices=("sequential", "overlap", "deep_halo", "auto"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    from hocket.launch import run_everywhere

    args = parse_args(argv)
    options = {k: v for k, v in vars(args).items() if k != "world"}
    world = args.world if args.procs is None else int(torch.tensor(args.procs).prod())
    run_everywhere(run, options, world_size=world, timeout_s=300)


if __name__ == "__main__":
    main()

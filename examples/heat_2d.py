"""2-D heat diffusion on a process grid: hocket.ops.stencil_steps, the halo exchange overlapped with the interior.

    python examples/heat_2d.py --world 2 --order 4                       # self-spawned CPU ranks (gloo)
    torchrun --nproc-per-node 4 examples/heat_2d.py --procs 2x2 --order 8 --plan overlap

``u(t+1) = u + alpha * dt * laplacian(u)`` with a central Laplacian of space order 2, 4 or 8 (radius 1, 2, 4)
on a ``--grid`` split over ``--procs`` (a 1-D process grid splits rows, a 2-D one rows and columns), fixed
(zero) or periodic boundaries. Every rank checks its block against the same steps on the whole grid in one
process and prints the time per step of the plan (``--plan``: sequential, overlap, deep_halo, or auto).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist


def dims(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split("x"))


def heat_step(radius: int, split: int, periodic: bool, coefficient: float):
    """The step function: every field padded by ``radius`` on the ``split`` dims in, the next interior out."""
    from hocket.ops.stencil_terms import laplacian

    def step(padded):
        (u,) = padded
        core = tuple(slice(radius, -radius) for _ in range(split))
        return (u[core] + coefficient * laplacian(u, radius, split, periodic=periodic),)
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

    grid, procs, r = options["grid"], options["procs"] or (world,), options["order"] // 2
    periodic = options["boundary"] == "periodic"
    step = heat_step(r, len(procs), periodic, coefficient=0.1 / r)
    u = torch.randn(grid, generator=torch.Generator().manual_seed(0), dtype=torch.float64)  # same on every rank
    u = u.to(_device())
    block = block_slices(grid, procs, process_grid(procs, options["boundary"]).coord)
    plan = None if options["plan"] == "auto" else options["plan"]
    if plan == "deep_halo":
        plan = {"strategy": "deep_halo", "chunks": 2, "transport": "p2p"}
    kwargs = dict(steps=options["steps"], boundary=options["boundary"], plan=plan)
    (got,) = H.stencil_steps((u[block].clone(),), step, r, procs, **kwargs)  # first call: checks, plan
    (want,) = reference_steps((u,), step, r, len(procs), steps=options["steps"], boundary=options["boundary"])
    error = float((got - want[block]).abs().max())
    assert error < 1e-10, f"rank {rank}: max error {error} against the whole-grid reference"
    dist.barrier()
    start = time.perf_counter()
    H.stencil_steps((u[block].clone(),), step, r, procs, **kwargs)
    ms = (time.perf_counter() - start) * 1e3 / options["steps"]
    return (f"heat 2-D grid {grid} procs {procs} order {options['order']} {options['boundary']} plan "
            f"{options['plan']}: max error {error:.2e}, {ms:.3f} ms per step")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2, help="ranks to spawn when not under torchrun")
    parser.add_argument("--grid", type=dims, default=(64, 48), help="global grid, e.g. 64x48")
    parser.add_argument("--procs", type=dims, default=None, help="process grid, e.g. 2 or 2x2 (default: world)")
    parser.add_argument("--order", type=int, default=4, choices=(2, 4, 8), help="space order")
    parser.add_argument("--boundary", default="fixed", choices=("fixed", "periodic"))
    parser.add_argument("--steps", type=int, default=8)
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

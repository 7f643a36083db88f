"""`hocket calibrate`: measure this machine and write a calibration profile.

GEMM throughput over a shape grid (whole and in row chunks), bandwidth-vs-size of
all_gather, reduce_scatter, all_reduce, all_to_all and a P2P ring, on GPUs also
copy-engine peer copies and host->device copies, and contention (a GEMM beside each
kind of transfer, each transfer beside a GEMM). Self-spawns local ranks, or runs under
torchrun. The profile is JSON keyed by the hardware fingerprint, written to --out, else
$HOCKET_PROFILE, else <--profile-dir or cache dir>/profiles/<fingerprint>.json, where
the cost model finds it.
"""

from __future__ import annotations

import argparse
import sys

from hocket.cli._ranks import add_rank_arguments, default_world


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "calibrate", help="measure GEMMs, link bandwidths and contention; write a calibration profile",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small grid that finishes in seconds (CI, tests)")
    parser.add_argument("--dtype", default="auto", help="bf16, fp16, fp32 (auto: bf16 on GPUs, fp32 on CPU)")
    parser.add_argument("--profile-dir", default=None,
                        help="directory of profiles (default: $HOCKET_CACHE_DIR or ~/.cache/hocket, /profiles)")
    parser.add_argument("--json", action="store_true", help="print the profile as JSON instead of tables")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_rank_arguments(parser, world_flag="--world", timeout_s=1800.0)
    parser._option_string_actions["--out"].help = "write the profile to this file (default: see above)"
    parser.set_defaults(func=run)


def _config(args, device_type: str):
    from hocket.calibrate import default_config
    from hocket.core.site import canonical_dtype

    dtype = None if args.dtype == "auto" else canonical_dtype(args.dtype)
    return default_config(quick=args.quick, device_type=device_type, dtype=dtype)


def run(args) -> int:
    from hocket.calibrate import calibrate
    from hocket.cli._ranks import resolved_backend
    from hocket.env import profile_path
    from hocket.hardware.profile import save_profile

    try:
        world = default_world(args.world)
        backend = resolved_backend(args)
        config = _config(args, "cuda" if backend == "nccl" else "cpu")
    except ValueError as exc:
        print(f"hocket: error: {exc}", file=sys.stderr)
        return 2
    result = calibrate(config=config, world_size=world, backend=args.backend, threads_per_rank=args.threads_per_rank,
                       timeout_s=args.timeout_s, show_progress=not args.no_progress)
    if not result.is_reporter:
        return 0
    profile = result.profile
    target = args.out or profile_path()
    path = save_profile(profile, path=target, directory=args.profile_dir)
    if args.json:
        print(profile.to_json())
    else:
        _print_tables(profile)
    print(f"wrote calibration profile {path} (fingerprint {profile.fingerprint})", file=sys.stderr)
    return 0


def _print_tables(profile) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    gemm = Table(title=f"GEMM ({profile.device_type}, {profile.world_size} rank(s) at once)")
    for column in ("m", "k", "n", "dtype", "ms", "TFLOP/s"):
        gemm.add_column(column, justify="right")
    for p in profile.gemm:
        gemm.add_row(str(p.m), str(p.k), str(p.n), p.dtype, f"{p.ms:.3f}", f"{p.tflops:.3f}")
    console.print(gemm)
    s = profile.gemm_sustained
    if s is not None:
        console.print(f"sustained GEMM {s.m}x{s.k}x{s.n} {s.dtype}: {s.burst_ms:.3f} ms in a burst, "
                      f"{s.sustained_ms:.3f} ms back to back for {s.duration_s:.1f} s ({s.tflops:.0f} TFLOP/s: the "
                      f"ceiling of steady-state predictions)")
    curves = dict(profile.collectives)
    curves.update({f"{op} (back to back)": points for op, points in profile.collectives_steady.items()})
    for name in ("p2p", "copy_engine", "host_link"):
        if getattr(profile, name):
            curves[name] = getattr(profile, name)
    bandwidth = Table(title=f"transfers ({profile.backend}, world {profile.world_size}): ms and GB/s per size")
    bandwidth.add_column("transfer")
    sizes = sorted({p.bytes for points in curves.values() for p in points})
    for size in sizes:
        bandwidth.add_column(_size(size), justify="right")
    for name, points in curves.items():
        by_size = {p.bytes: p for p in points}
        bandwidth.add_row(name, *(f"{by_size[s].ms:.3f} ms / {by_size[s].gbps:.2f}" if s in by_size else "-"
                                  for s in sizes))
    console.print(bandwidth)
    contention = Table(title="contention (time beside / time alone)")
    for column in ("transfer kind", "GEMM slowdown", "transfer slowdown"):
        contention.add_column(column, justify="right")
    for kind, c in profile.contention.items():
        contention.add_row(kind, f"{c.gemm_slowdown:.2f}x", f"{c.transfer_slowdown:.2f}x")
    console.print(contention)
    if profile.issue_us:
        sittings = list(profile.issue_sittings)
        issue = Table(title="host issue cost per item (us)" + (f": the median of {len(sittings)} sittings spread over "
                                                               f"the run" if sittings else ""))
        issue.add_column("item")
        for i in range(len(sittings)):
            issue.add_column(f"sitting {i + 1}", justify="right")
        issue.add_column("kept", justify="right")
        for item, us in sorted(profile.issue_us.items()):
            issue.add_row(item, *(f"{s[item]:.1f}" if item in s else "-" for s in sittings), f"{us:.1f}")
        console.print(issue)


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"

"""Stencil steps on one GPU (issue 36 run 4): achieved memory bandwidth against the device's copy rate, and the faces
copied device -> host -> device on a copy stream while the interior computes, against the same steps without them.

Problems: 3-D heat diffusion and the 3-D acoustic wave at space orders 2, 4 and 8 (radius 1, 2, 4), fp32, with the
step functions of ``examples/heat_2d.py`` (``heat_step``, any number of dims) and ``examples/acoustic_wave_3d.py``
(``wave_step``: ``u`` exchanged, ``u(t-1)`` carried, ``(c dt)^2`` static), the first two grid dims split as the
acoustic example splits them. The steps run through ``hocket.ops.stencil``'s own executors (``sequential``: exchange,
then one ``step_fn`` call on the padded block; ``overlap``: post, interior, wait, boundary shell) on a block whose
every neighbour is the block itself across the periodic boundary, with one of two transports:

* ``host_staged``: each packed neighbour message (faces, edges) is copied into pinned host memory and back into the
  receive buffer, on a separate CUDA stream that waits for the packing and that the compute stream waits for
  before the unpacking (the exchange of a host-staged halo, here with the rank as its own neighbour);
* ``no_copy``: nothing moves (the halos stay zero: the fixed boundary), so the steps are the same compute alone.

Timed per call of ``--steps`` steps, interleaved (``hocket.timing``: CUDA events, medians of ``--iters``):
``compute_full`` (sequential, no_copy), ``compute_split`` (overlap, no_copy), ``copies_serial`` (sequential,
host_staged), ``copies_overlap`` (overlap, host_staged) and ``copies_alone`` (the exchanges without any compute).
Every variant is first checked against ``hocket.ops.stencil_fields.reference_steps`` on the whole grid (periodic
for host_staged, fixed for no_copy). The bandwidth of a step is the bytes it must move (every field read once and
every exchanged or carried output written once: heat 2 x cells x 4 bytes, wave 4 x cells x 4: ``u``, ``u(t-1)`` and
``c^2`` read, ``u(t+1)`` written) over its time, against the device's copy rate (a 1 GiB device-to-device copy,
read + write counted: ``hocket calibrate``'s ``device_copy`` transfer where the build has it, else the same copy
timed here) and the device preset's ``memory_gbps``.

    python -m benchmarks.stencil_gpu                      # one H200, about a minute; writes $OUT (./out)
    python -m benchmarks.stencil_gpu --device cpu --tiny  # the CPU smoke (seconds)

Writes ``$OUT/stencil_gpu.json`` and ``$OUT/stencil_gpu.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SPLIT = 2
"""grid dims split (and exchanged): the first two, as in examples/acoustic_wave_3d.py."""
CHECK_RTOL = 1e-5
"""max error over the reference's largest magnitude that passes (fp32; the same arithmetic per cell)."""


def load_example(name: str):
    """``examples/<name>.py`` as a module (the examples folder is not a package)."""
    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"hocket_example_{name}", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{path} is missing: the step functions come from hocket's examples")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the transports ----------------------------------------------------------------------------------------

class _Waited:
    """A posted exchange: ``wait`` makes the current stream wait for the copy stream's event (no host wait)."""

    def __init__(self, event) -> None:
        self.event = event

    def wait(self) -> None:
        if self.event is not None:
            torch.cuda.current_stream().wait_event(self.event)


class HostStagedSelf:
    """Each message device -> pinned host -> the receive with the same tag (the rank is its own neighbour), on a
    copy stream (module docstring). Pinned buffers are allocated on first use per tag and reused."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.host: dict[int, torch.Tensor] = {}

    def _pinned(self, tag: int, like: torch.Tensor) -> torch.Tensor:
        buf = self.host.get(tag)
        if buf is None or buf.numel() != like.numel():
            buf = torch.empty(like.numel(), dtype=like.dtype, pin_memory=self.cuda)
            self.host[tag] = buf
        return buf

    def post(self, sends, recvs) -> _Waited:
        by_tag = {tag: t for t, _, tag in sends}
        if not self.cuda:
            for recv, _, tag in recvs:
                host = self._pinned(tag, recv)
                host.copy_(by_tag[tag])
                recv.copy_(host)
            return _Waited(None)
        packed = torch.cuda.Event()
        packed.record(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(packed)
            for recv, _, tag in recvs:
                host = self._pinned(tag, recv)
                host.copy_(by_tag[tag], non_blocking=True)
                recv.copy_(host, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        return _Waited(done)


class NoCopy:
    """Moves nothing: each receive buffer is zeroed (one small memset per message), so the unpacked halos are zeros
    (the fixed boundary); packing and unpacking still run as with copies."""

    def post(self, sends, recvs) -> _Waited:
        for recv, _, _ in recvs:
            recv.zero_()
        return _Waited(None)


# -- the cases ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    problem: str
    order: int
    grid: tuple[int, ...]

    @property
    def radius(self) -> int:
        return self.order // 2

    @property
    def cells(self) -> int:
        n = 1
        for g in self.grid:
            n *= g
        return n

    def bytes_per_step(self, itemsize: int) -> int:
        """Bytes a step must move (module docstring): heat 2, wave 4 per cell and item."""
        return (2 if self.problem == "heat" else 4) * self.cells * itemsize

    @property
    def label(self) -> str:
        return f"{self.problem} order {self.order} {'x'.join(map(str, self.grid))}"


def make_fields(case: Case, device: torch.device, dtype: torch.dtype):
    from hocket.ops.stencil_fields import Carried, Static

    gen = torch.Generator(device=device).manual_seed(0)
    u = torch.randn(case.grid, device=device, dtype=dtype, generator=gen)
    if case.problem == "heat":
        return (u,)
    c2 = 0.05 * (1 + 0.5 * torch.rand(case.grid, device=device, dtype=dtype, generator=gen)) / case.radius
    return (u, Carried(u.clone()), Static(c2))


def make_step(case: Case, heat_step, wave_step):
    if case.problem == "heat":
        return heat_step(case.radius, SPLIT, False, 0.1 / case.radius)
    return wave_step(case.radius, SPLIT, False)


def self_grid():
    """A process grid of one block whose every neighbour is another rank (1), so the executors post a message
    per neighbour; the transports route each back to the block itself."""
    from hocket.ops.stencil import ProcessGrid

    class SelfNeighbours(ProcessGrid):
        def peer(self, offset):
            return 1

    return SelfNeighbours(procs=(1,) * SPLIT, ranks=(0,), coord=(0,) * SPLIT, periodic=True)


class Runner:
    """One case's fields, step function and transports, and the callables the benchmark times."""

    def __init__(self, case: Case, fields, step_fn, steps: int, device: torch.device) -> None:
        from hocket.ops.stencil_fields import split_fields

        self.case, self.steps, self.device = case, steps, device
        self.tensors, self.roles = split_fields(fields)
        self.step_fn = step_fn
        self.host = HostStagedSelf(device)
        self.none = NoCopy()

    def _call(self, transport):
        from hocket.ops.stencil import _Call

        return _Call(tensors=list(self.tensors), roles=list(self.roles), step_fn=self.step_fn,
                     radius=self.case.radius, grid=self_grid(), steps=self.steps, transport=transport)

    def steps_fn(self, *, overlap: bool, copies: bool):
        from hocket.ops.stencil import _run_steps

        call = self._call(self.host if copies else self.none)
        return lambda: _run_steps(call, overlap=overlap)

    def exchanges_fn(self):
        """``steps`` exchanges (pack, copies, unpack) on padded buffers, no compute."""
        from hocket.ops.stencil import Exchange, _buffers

        call = self._call(self.host)
        r = self.case.radius
        widths = [r if role == "exchanged" else 0 for role in self.roles]
        exchange = Exchange(call.grid, call.block, widths, dtype=self.tensors[0].dtype, device=self.device)
        padded = _buffers(call, r)

        def run() -> None:
            for _ in range(self.steps):
                exchange.finish(padded, exchange.post(padded, self.host))
        return run

    def variants(self) -> dict:
        return {"compute_full": self.steps_fn(overlap=False, copies=False),
                "compute_split": self.steps_fn(overlap=True, copies=False),
                "copies_serial": self.steps_fn(overlap=False, copies=True),
                "copies_overlap": self.steps_fn(overlap=True, copies=True),
                "copies_alone": self.exchanges_fn()}

    def check(self, fields) -> dict:
        """Each stepping variant's error against the whole-grid reference (periodic with copies, else fixed)."""
        return {name: self.check_one(fields, overlap=overlap, copies=copies)
                for name, overlap, copies in (("compute_full", False, False), ("compute_split", True, False),
                                              ("copies_serial", False, True), ("copies_overlap", True, True))}

    def check_one(self, fields, *, overlap: bool, copies: bool) -> float:
        """One variant's max error over the largest magnitude of :func:`reference_steps` (eager ``step_fn``)."""
        from hocket.ops.stencil_fields import reference_steps

        step = getattr(self.step_fn, "_torchdynamo_orig_callable", self.step_fn)
        ref = reference_steps(fields, step, self.case.radius, SPLIT, steps=self.steps,
                              boundary="periodic" if copies else "fixed")
        got = self.steps_fn(overlap=overlap, copies=copies)()
        err = 0.0
        for g, w in zip(got, ref):
            w = getattr(w, "tensor", w)
            scale = float(w.abs().max()) or 1.0
            err = max(err, float((g - w).abs().max()) / scale)
        return err


def device_copy_gbps(device: torch.device, nbytes: int, iters: int) -> tuple[float, str]:
    """(GB/s, source) of one device-to-device copy of ``nbytes``, read + write counted (2 x the bytes copied):
    ``hocket calibrate``'s ``device_copy`` transfer where this build has it, else the same copy here."""
    from hocket.calibrate.transfers import TRANSFERS, make_transfer
    from hocket.timing.timer import TimingConfig, time_callable

    made = make_transfer("device_copy", nbytes, dtype="float32", group=None, device=device) \
        if "device_copy" in TRANSFERS else None
    if made is not None:
        fn, moved = made
        source = "hocket.calibrate.transfers device_copy"
    else:
        src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
        dst = torch.empty_like(src)
        fn, moved = (lambda: dst.copy_(src)), src.numel() * 4
        source = "a device-to-device copy (hocket calibrate has no device_copy item in this build)"
    s = time_callable(fn, config=TimingConfig(warmup=3, iters=iters, reps=4), device=device)
    return 2 * moved / (s.median_ms * 1e-3) / 1e9, source


def preset_memory_gbps(device: torch.device) -> float | None:
    """The device preset's ``memory_gbps`` (hocket.hardware), None where no preset matches."""
    if device.type != "cuda":
        return None
    from hocket.hardware.detect import match_device

    _, spec = match_device(torch.cuda.get_device_name(device))
    return spec.memory_gbps if spec is not None else None


def measure(case: Case, *, device: torch.device, dtype: torch.dtype, steps: int, iters: int, heat_step,
            wave_step, copy_gbps: float, compiled: bool = False) -> dict:
    from hocket.bench.efficiency import overlap_score
    from hocket.timing.timer import TimingConfig, time_interleaved

    fields = make_fields(case, device, dtype)
    runner = Runner(case, fields, make_step(case, heat_step, wave_step), steps, device)
    errors = runner.check(fields)
    bad = {k: v for k, v in errors.items() if not v <= CHECK_RTOL}
    if bad:
        raise RuntimeError(f"{case.label}: {bad} above {CHECK_RTOL} against the whole-grid reference")
    variants = runner.variants()
    if compiled:  # the same full-block steps with step_fn under torch.compile (one fused kernel per step)
        fused = Runner(case, fields, torch.compile(make_step(case, heat_step, wave_step), dynamic=False), steps,
                       device)
        errors["compiled_full"] = fused.check_one(fields, overlap=False, copies=False)
        if not errors["compiled_full"] <= 10 * CHECK_RTOL:
            raise RuntimeError(f"{case.label}: compiled step off the reference by {errors['compiled_full']:.3g}")
        variants["compiled_full"] = fused.steps_fn(overlap=False, copies=False)
    summaries = time_interleaved(variants, config=TimingConfig(warmup=1, iters=iters), rounds=iters, device=device)
    itemsize = torch.empty((), dtype=dtype).element_size()
    row = {"case": case.label, "problem": case.problem, "order": case.order, "grid": list(case.grid),
           "steps_per_call": steps, "bytes_per_step": case.bytes_per_step(itemsize), "check_errors": errors}
    for name, s in summaries.items():
        row[f"{name}_ms_per_step"] = s.median_ms / steps
        row[f"{name}_p10_ms_per_step"], row[f"{name}_p90_ms_per_step"] = s.p10_ms / steps, s.p90_ms / steps
    for name in ("compute_full", "compute_split", "copies_overlap") + (("compiled_full",) if compiled else ()):
        gbps = row["bytes_per_step"] / (row[f"{name}_ms_per_step"] * 1e-3) / 1e9
        row[f"{name}_gbps"] = gbps
        row[f"{name}_of_copy_rate"] = gbps / copy_gbps
    row["halo_bytes_per_step"] = halo_bytes(case, runner, itemsize)
    row["copies_overlap_over_compute_split"] = row["copies_overlap_ms_per_step"] / row["compute_split_ms_per_step"]
    row["copies_serial_over_compute_full"] = row["copies_serial_ms_per_step"] / row["compute_full_ms_per_step"]
    score = overlap_score(measured_ms=row["copies_overlap_ms_per_step"], sequential_ms=row["copies_serial_ms_per_step"],
                          compute_alone_ms=row["compute_split_ms_per_step"],
                          comm_alone_ms=row["copies_alone_ms_per_step"])
    row["overlap"] = {"metric": score.metric, "overlap_efficiency": score.overlap_efficiency,
                      "speedup": score.speedup, "hidden_fraction": score.hidden_fraction,
                      "saving_fraction": score.saving_fraction, "label": score.label()}
    del runner, fields
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def halo_bytes(case: Case, runner: Runner, itemsize: int) -> int:
    """Bytes of every neighbour message of one exchange (each copied to the host and back)."""
    from hocket.ops.stencil import Exchange

    r = case.radius
    widths = [r if role == "exchanged" else 0 for role in runner.roles]
    exchange = Exchange(self_grid(), tuple(runner.tensors[0].shape), widths, dtype=runner.tensors[0].dtype,
                        device=torch.device("meta"))
    return sum(buf.numel() for buf, _, _, _ in exchange.sends) * itemsize


def markdown(rows: list[dict], meta: dict) -> str:
    preset = f"{meta['preset_memory_gbps']:.0f} GB/s" if meta["preset_memory_gbps"] else "none"
    lines = [f"# Stencil steps on one GPU ({meta['device_name']}, torch {meta['torch']}, fp32)", "",
             f"device copy rate {meta['copy_gbps']:.0f} GB/s (1 GiB, read + write counted: "
             f"{meta['copy_source']}); preset "
             f"memory_gbps {preset}; {meta['steps']} steps per call, medians of {meta['iters']} calls.", "",
             "| case | ms/step full | GB/s full | of copy rate | ms/step split | ms/step copies overlapped | "
             "overlapped / split | ms/step copies serial | copies alone | halo MiB/step | overlap |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['compute_full_ms_per_step']:.3f} | {r['compute_full_gbps']:.0f} | "
                     f"{r['compute_full_of_copy_rate']:.1%} | {r['compute_split_ms_per_step']:.3f} | "
                     f"{r['copies_overlap_ms_per_step']:.3f} | {r['copies_overlap_over_compute_split']:.3f} | "
                     f"{r['copies_serial_ms_per_step']:.3f} | {r['copies_alone_ms_per_step']:.3f} | "
                     f"{r['halo_bytes_per_step'] / 2 ** 20:.2f} | {r['overlap']['label']} |")
    for label, why in meta.get("failed", {}).items():
        lines.append(f"| {label} | failed: {why} | | | | | | | | | |")
    fused = [r for r in rows if "compiled_full_ms_per_step" in r]
    if fused:
        lines += ["", "step_fn under torch.compile, the full block (--compile):", "",
                  "| case | ms/step | GB/s | of copy rate | eager / compiled |", "|---|---|---|---|---|"]
        for r in fused:
            lines.append(f"| {r['case']} | {r['compiled_full_ms_per_step']:.3f} | {r['compiled_full_gbps']:.0f} | "
                         f"{r['compiled_full_of_copy_rate']:.1%} | "
                         f"{r['compute_full_ms_per_step'] / r['compiled_full_ms_per_step']:.2f}x |")
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--tiny", action="store_true", help="a 16^3 grid and few samples (the CPU smoke)")
    p.add_argument("--grid", default=None, help="3-D grid, e.g. 512x512x512 (default; tiny 16x16x16)")
    p.add_argument("--orders", default="2,4,8", help="space orders, comma-separated")
    p.add_argument("--problems", default="heat,wave", help="heat, wave or both")
    p.add_argument("--steps", type=int, default=None, help="steps per timed call (default 10; tiny 2)")
    p.add_argument("--iters", type=int, default=None, help="timed calls per variant (default 8; tiny 2)")
    p.add_argument("--compile", action="store_true",
                   help="also time the full-block steps with step_fn under torch.compile (compiles once per case)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default $OUT, else ./out)")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no GPU here; use --device cpu --tiny")
    grid = tuple(int(v) for v in (args.grid or ("16x16x16" if args.tiny else "512x512x512")).split("x"))
    if len(grid) != 3:
        raise SystemExit(f"--grid {args.grid}: give three dims, e.g. 512x512x512")
    steps = args.steps or (2 if args.tiny else 10)
    iters = args.iters or (2 if args.tiny else 8)
    out_dir = args.out or Path(os.environ.get("OUT", "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    heat_step = load_example("heat_2d").heat_step
    wave_step = load_example("acoustic_wave_3d").wave_step
    start = time.monotonic()
    copy_gbps, copy_source = device_copy_gbps(device, (1 << 30) if not args.tiny else (1 << 22), iters=10)
    meta = {"device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "copy_gbps": copy_gbps, "copy_source": copy_source,
            "preset_memory_gbps": preset_memory_gbps(device),
            "steps": steps, "iters": iters, "grid": list(grid), "split_dims": SPLIT}
    print(f"device copy rate {copy_gbps:.0f} GB/s", flush=True)
    rows, failed = [], {}
    meta["failed"] = failed
    for problem in args.problems.split(","):
        for order in (int(o) for o in args.orders.split(",")):
            case = Case(problem, order, grid)
            try:
                row = measure(case, device=device, dtype=torch.float32, steps=steps, iters=iters,
                              heat_step=heat_step, wave_step=wave_step, copy_gbps=copy_gbps, compiled=args.compile)
            except (RuntimeError, ValueError) as exc:  # a failed check or out of memory: the report names it
                failed[case.label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                print(f"{case.label}: FAILED {failed[case.label]}", flush=True)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                continue
            rows.append(row)
            print(f"[{time.monotonic() - start:6.1f}s] {case.label}: full {row['compute_full_ms_per_step']:.3f} "
                  f"ms/step ({row['compute_full_gbps']:.0f} GB/s), copies overlapped / split "
                  f"{row['copies_overlap_over_compute_split']:.3f}", flush=True)
    meta["wall_s"] = time.monotonic() - start
    report = {"meta": meta, "results": rows}
    (out_dir / "stencil_gpu.json").write_text(json.dumps(report, indent=1))
    text = markdown(rows, meta)
    (out_dir / "stencil_gpu.md").write_text(text)
    print(text)
    return report


if __name__ == "__main__":
    main()

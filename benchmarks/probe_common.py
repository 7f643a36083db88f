"""What the one-GPU probes share: timing, the check against ``torch.mm``, their rows and table.

Every probe times a callable only after its output was checked on poisoned (NaN) buffers against
a reference product (:class:`Rows.add`); a wrong output is recorded as such and never timed. Rows
are plain dicts (``m``, ``k``, ``n``, ``direction``, ``variant`` and the timing), written as JSON
lines (:func:`write_rows`) and printed as one table (:func:`print_table`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace

import torch

TOLERANCE = 2e-2
"""Largest relative error (``hocket.ops.tolerance.max_error``) a bf16 product may show here."""


def timed_ms(fn, *, iters: int, warmup: int = 3) -> dict:
    """Median, p10, p90 of ``iters`` CUDA-event-timed calls (``hocket.timing.timer``)."""
    from hocket.timing.timer import TimingConfig, time_callable

    summary = time_callable(fn, config=TimingConfig(warmup=warmup, iters=iters), device=torch.device("cuda"))
    return {"median_ms": summary.median_ms, "p10_ms": summary.p10_ms, "p90_ms": summary.p90_ms,
            "samples": summary.n}


def rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """``hocket.ops.tolerance.max_error`` on the host (inf where a NaN poison survived)."""
    from hocket.ops.tolerance import max_error

    got = got.float().cpu()
    return max_error(got, ref.float().cpu()) if torch.isfinite(got).all() else float("inf")


def operands(m: int, k: int, n: int, *, seed: int | None = None) -> SimpleNamespace:
    """One shape's bf16 operands on the current GPU: ``A`` [m, k], ``B`` [k, n] (scaled by 1/sqrt(k)),
    ``ref = A @ B``, ``c_dev`` and pinned ``c_host`` [m, n], pinned ``a_host`` (A's copy) and ``a_dev``
    (its landing buffer); ``dev``. ``seed``: default ``m + 3k + 7n``."""
    dev = torch.device("cuda", torch.cuda.current_device())
    dt = torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(m + 3 * k + 7 * n if seed is None else seed)
    A = torch.randn(m, k, device=dev, dtype=dt, generator=g)
    B = torch.randn(k, n, device=dev, dtype=dt, generator=g) / k**0.5
    return SimpleNamespace(dev=dev, A=A, B=B, ref=torch.mm(A, B), c_dev=torch.empty(m, n, device=dev, dtype=dt),
                           c_host=torch.empty(m, n, dtype=dt, pin_memory=True), a_host=A.cpu().pin_memory(),
                           a_dev=torch.empty_like(A))


def against_cublas(rows: list[dict], record: dict, fn: Callable[[], object], *, out: torch.Tensor,
                   ref: torch.Tensor, cublas: Callable[[], object], iters: int, label: str) -> None:
    """Check ``fn`` (``out`` poisoned first), then time it in alternation with ``cublas``
    (``hocket.bench.paired.alternating_ms``); append ``record`` with the result to ``rows``."""
    from hocket.bench.paired import alternating_ms

    out.fill_(float("nan"))
    fn()
    torch.cuda.synchronize()
    record["rel_err"] = rel_error(out, ref)
    if record["rel_err"] > TOLERANCE:
        rows.append({**record, "correct": False})
        print(f"{label:48s} WRONG {record['rel_err']:.3g}", flush=True)
        return
    ms, p10, p90, lib = alternating_ms([fn], [cublas], iters=iters)
    record.update(ms=ms, p10_ms=p10, p90_ms=p90, cublas_ms=lib, of_cublas=lib / ms)
    rows.append(record)
    print(f"{label:48s} {ms:7.3f} ms  cuBLAS {lib:7.3f}  {lib / ms:6.1%}", flush=True)


def write_rows(path, rows: list[dict]) -> None:
    """The probe's records as JSON lines (``path`` None: nothing)."""
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def row_text(r: dict, width: int) -> str:
    """One table line: direction, shape, variant (``width`` wide), median, p10, p90 (WRONG if unchecked)."""
    med = f"{r['median_ms']:8.3f}" if "median_ms" in r else "   WRONG"
    p10 = f"{r['p10_ms']:8.3f}" if "p10_ms" in r else ""
    p90 = f"{r['p90_ms']:8.3f}" if "p90_ms" in r else ""
    return f"{r['direction']:9s} {r['m']}x{r['k']}x{r['n']:<8d} {r['variant']:{width}s} {med} {p10} {p90}"


class Rows:
    """The rows of one shape: ``add`` checks (when asked), times and records one variant.

    ``ref``: the expected product; ``poison``: the output buffers filled with NaN before a checked
    call, so an element the call never writes fails the check.
    """

    def __init__(self, m: int, k: int, n: int, *, iters: int, ref: torch.Tensor | None = None,
                 poison: Sequence[torch.Tensor] = (), width: int = 26) -> None:
        self.shape = {"m": m, "k": k, "n": n}
        self.iters, self.ref, self.poison, self.width = iters, ref, tuple(poison), width
        self.rows: list[dict] = []

    def add(self, direction: str, variant: str, fn: Callable[[], object], *,
            check: Callable[[], torch.Tensor] | None = None, extra: dict | None = None) -> dict:
        record = {**self.shape, "direction": direction, "variant": variant, **(extra or {})}
        if check is not None:
            for t in self.poison:
                t.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            record["rel_err"] = rel_error(check(), self.ref)
            if record["rel_err"] > TOLERANCE:
                record["correct"] = False
                self.rows.append(record)
                print(f"  {direction:9s} {variant:{self.width}s} WRONG rel_err={record['rel_err']:.3g}", flush=True)
                return record
        record.update(timed_ms(fn, iters=self.iters))
        self.rows.append(record)
        print(f"  {direction:9s} {variant:{self.width}s} {record['median_ms']:8.3f} ms", flush=True)
        return record

    def median(self, direction: str, variant: str) -> float | None:
        return next((r["median_ms"] for r in self.rows if r["direction"] == direction and r["variant"] == variant
                     and "median_ms" in r), None)


def efficiency(rows: list[dict], r: dict, *, gemm: tuple[str, str] = ("gemm", "mm"),
               copy_variant: str = "copy") -> str:
    """DESIGN.md section 4's overlap efficiency of row ``r`` among its shape's ``rows`` (sequential,
    the GEMM alone ``gemm`` = (direction, variant) and the copy alone of the same direction), or ""."""
    def med(direction, variant):
        return next((x["median_ms"] for x in rows if x["direction"] == direction and x["variant"] == variant
                     and "median_ms" in x), None)
    if r["direction"] == gemm[0] or "median_ms" not in r:
        return ""
    seq, mm, copy = med(r["direction"], "sequential"), med(*gemm), med(r["direction"], copy_variant)
    if None in (seq, mm, copy) or seq - max(mm, copy) <= 0:
        return ""
    return f"{(seq - r['median_ms']) / (seq - max(mm, copy)):.3f}"


def probe_args(doc: str, shapes: Sequence[tuple[int, int, int]], *, iters: int) -> argparse.ArgumentParser:
    """The arguments every probe takes: ``--shapes``, ``--iters``, ``--out``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in shapes),
                        help="m x k x n, comma separated")
    parser.add_argument("--iters", type=int, default=iters)
    parser.add_argument("--out", type=Path, default=None, help="JSON lines file")
    return parser


def parse_shapes(text: str) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in s.split("x")) for s in text.split(",") if s]


def run_probe(name: str, args, probe_shape: Callable[..., list[dict]], *, width: int | None,
              eff: Callable[[list[dict], dict], str] | None = None, **kwargs) -> int:
    """Run ``probe_shape(m, k, n, iters=..., **kwargs)`` over ``args.shapes``, write the rows, print the table
    (``width`` None: no table, for probes that print each row as it is measured, e.g. :func:`against_cublas`)."""
    if not torch.cuda.is_available():
        print(f"{name} needs a CUDA GPU", file=sys.stderr)
        return 2
    table = []
    shapes = parse_shapes(args.shapes)
    for i, (m, k, n) in enumerate(shapes):
        print(f"[{i + 1}/{len(shapes)}] m={m} k={k} n={n}", flush=True)
        rows = probe_shape(m, k, n, iters=args.iters, **kwargs)
        table += [(r, eff(rows, r) if eff else "") for r in rows]
    write_rows(args.out, [r for r, _ in table])
    if width is not None:
        print_table(table, width)
    return 0


def print_table(table: list[tuple[dict, str]], width: int) -> None:
    print(f"\n{'direction':9s} {'m x k x n':18s} {'variant':{width}s} {'median':>8s} {'p10':>8s} {'p90':>8s}  eff")
    for r, eff in table:
        print(f"{row_text(r, width)}  {eff}")

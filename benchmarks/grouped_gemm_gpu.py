"""Grouped expert GEMMs on one GPU (issue 36 run 3): ``torch._grouped_mm`` and a ``torch.mm`` loop against one
dense cuBLAS GEMM of the same FLOPs, then a fit of the grouped-GEMM efficiency against tokens per expert.

Experts are shaped as Mixtral-8x7B (hidden 4096, expert ffn 14336, 8 experts, top-2), Qwen3-30B-A3B (hidden 2048,
moe ffn 768, 128 experts, top-8) and DeepSeek-V3 (hidden 7168, moe ffn 2048, 256 routed experts, top-8), bf16,
with the local expert count of expert parallelism over ``--ep`` ranks (EP 8: 1, 16 and 32 local experts; Mixtral
also at EP 2: 4 local experts). A rank with ``T`` tokens receives ``T * topk`` rows under balanced routing; they
are split over its local experts uniformly or Zipf-skewed (share of the i-th expert ``1 / i ** s``, ``s`` =
``--zipf``, experts in a seeded random order; a one-expert rank has no skew). Both GEMMs of an expert are
measured: ``gate_up`` (``[rows, hidden] @ [hidden, 2 * ffn]``) and ``down`` (``[rows, ffn] @ [ffn, hidden]``).

Per case: the grouped GEMM (``hocket.ops.grouped_mm.grouped_mm`` where that module exists and matches the loop,
else ``torch._grouped_mm`` with int32 ``offs``) and the loop are first checked against each other (max error over
the loop's largest magnitude <= ``CHECK_RTOL``); then the grouped GEMM, the loop and the dense GEMM
(``[rows, K] @ [K, N]``, the same FLOPs) are timed interleaved (CUDA events, ``hocket.timing``: medians of
``--iters`` samples, each the mean of ``--reps`` back-to-back calls). Where this build's grouped GEMM rejects
group offsets that are not multiples of 16 rows (probed once), each expert's rows are padded up to a multiple of
16 (padding rows computed, not counted in the FLOPs).

The fit: ``grouped_ms = dense_ms * (rows + n_busy * t_half) / (rows * e_max)``, i.e. the efficiency against the
dense GEMM of the same FLOPs is ``eff(t) = e_max * t / (t + t_half)`` at ``t`` = rows per non-empty expert
(``n_busy`` of them): each busy expert costs ``t_half`` rows of extra work. ``e_max`` and ``t_half`` are fitted by
least squares on log time (a log grid over ``t_half``, ``e_max`` in closed form) on the shapes of all models but
one, and the error is reported on the model left out, for each model in turn (and on the Zipf cases, fitted on the
uniform ones). The cost model's shipped rule (``hocket.cost.moe.GPU_GROUPED``, the same form) is scored on every
case too; ``fits.rule`` in the JSON is the fit as ``GroupedGemmRule`` fields.

    python -m benchmarks.grouped_gemm_gpu                      # one H200, about a minute; writes $OUT (./out)
    python -m benchmarks.grouped_gemm_gpu --device cpu --tiny  # the CPU smoke (seconds)

Writes ``$OUT/grouped_gemm.json`` (every case, the fits) and ``$OUT/grouped_gemm.md`` (the tables).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

CHECK_RTOL = 2e-2
"""max |grouped - loop| over max |loop| that passes (bf16 outputs: one rounding of each is ~4e-3)."""
GROUPED, HOCKET = "torch._grouped_mm", "hocket.ops.grouped_mm"
IMPL_KEYS = {GROUPED: "grouped", HOCKET: "hocket_grouped"}
"""the implementations under test and their keys in the results (``grouped_ms``, ``hocket_grouped_ms``)."""
ALIGN_ROWS = 16
"""rows per expert are padded to a multiple of this where the grouped GEMM rejects unaligned offsets."""


@dataclass(frozen=True)
class Model:
    name: str
    hidden: int
    ffn: int
    experts: int
    topk: int
    ep: tuple[int, ...]


MODELS = (
    Model("mixtral-8x7b", 4096, 14336, 8, 2, (8, 2)),
    Model("qwen3-30b-a3b", 2048, 768, 128, 8, (8,)),
    Model("deepseek-v3", 7168, 2048, 256, 8, (8,)),
)
TINY_MODELS = (
    Model("mixtral-tiny", 64, 96, 8, 2, (8, 2)),
    Model("qwen3-tiny", 32, 48, 32, 8, (2,)),
    Model("deepseek-tiny", 96, 32, 64, 8, (8,)),
)
TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
TINY_TOKENS = (8, 32)


@dataclass(frozen=True)
class Case:
    model: str
    ep: int
    local_experts: int
    tokens: int
    """tokens per rank."""
    skew: str
    gemm: str
    k: int
    n: int
    counts: tuple[int, ...]
    """rows routed to each local expert."""

    @property
    def rows(self) -> int:
        return sum(self.counts)

    @property
    def busy(self) -> int:
        return sum(1 for c in self.counts if c)

    @property
    def flops(self) -> float:
        return 2.0 * self.rows * self.k * self.n

    @property
    def label(self) -> str:
        return f"{self.model}/ep{self.ep} {self.gemm} T={self.tokens} {self.skew}"


def split_rows(rows: int, experts: int, skew: str, *, zipf: float, seed: int) -> tuple[int, ...]:
    """``rows`` over ``experts``: as even as ints allow, or Zipf shares (``1 / i ** zipf``, largest remainder) in
    a seeded random expert order. The counts always sum to ``rows``."""
    if skew == "uniform" or experts == 1:
        base, extra = divmod(rows, experts)
        return tuple(base + (1 if e < extra else 0) for e in range(experts))
    if skew != "zipf":
        raise ValueError(f"skew={skew!r} must be 'uniform' or 'zipf'")
    weights = [1.0 / (i + 1) ** zipf for i in range(experts)]
    total = sum(weights)
    exact = [rows * w / total for w in weights]
    counts = [int(x) for x in exact]
    order = sorted(range(experts), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in order[:rows - sum(counts)]:
        counts[i] += 1
    perm = torch.randperm(experts, generator=torch.Generator().manual_seed(seed)).tolist()
    return tuple(counts[perm[e]] for e in range(experts))


def build_cases(models, tokens, *, zipf: float, seed: int) -> list[Case]:
    cases = []
    for m in models:
        for ep in m.ep:
            if m.experts % ep:
                raise ValueError(f"{m.name}: {m.experts} experts do not divide over EP {ep}")
            local = m.experts // ep
            for skew in ("uniform", "zipf"):
                if skew == "zipf" and local == 1:
                    continue  # one expert per rank: nothing to skew
                for t in tokens:
                    counts = split_rows(t * m.topk, local, skew, zipf=zipf, seed=seed + t)
                    for gemm, k, n in (("gate_up", m.hidden, 2 * m.ffn), ("down", m.ffn, m.hidden)):
                        cases.append(Case(m.name, ep, local, t, skew, gemm, k, n, counts))
    return cases


# -- the grouped GEMM under test ---------------------------------------------------------------------------

def hocket_grouped_mm():
    """``hocket.ops.grouped_mm.grouped_mm`` where that module exists, else None."""
    if importlib.util.find_spec("hocket.ops.grouped_mm") is None:
        return None
    import inspect

    from hocket.ops.grouped_mm import grouped_mm

    if "end" not in inspect.signature(grouped_mm).parameters:
        return grouped_mm
    # as the MoE executors call it on exact layouts: offs[-1] is the last row, known on the host (no tail mask)
    return lambda x, w, offs: grouped_mm(x, w, offs, end=x.shape[0])


def torch_grouped(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return torch._grouped_mm(x, w, offs=offs)


def needs_alignment(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``torch._grouped_mm`` here rejects (or miscomputes) group offsets that are not multiples of 16."""
    k, n = 64, 64
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(37, k, generator=gen).to(device, dtype)
    w = torch.randn(3, k, n, generator=gen).to(device, dtype)
    offs = torch.tensor([5, 5, 37], dtype=torch.int32, device=device)
    try:
        got = torch._grouped_mm(x, w, offs=offs)
    except RuntimeError:
        return True
    want = torch.cat([x[:5] @ w[0], x[5:37] @ w[2]])
    return not bool(((got.float() - want.float()).abs().max() <= CHECK_RTOL * want.float().abs().max()).item())


class Operands:
    """One case's operands on the device: ``x`` (padded rows where aligned), the expert weights ``w``, the
    int32 ``offs``, the loop's row ranges, the dense weight, and the output buffers."""

    def __init__(self, case: Case, *, device: torch.device, dtype: torch.dtype, align: int, seed: int) -> None:
        gen = torch.Generator(device=device).manual_seed(seed)
        padded = [(-(-c // align) * align) if align > 1 else c for c in case.counts]
        self.total_rows = sum(padded)
        self.x = torch.randn(self.total_rows, case.k, device=device, dtype=dtype, generator=gen)
        scale = 1.0 / math.sqrt(case.k)
        self.w = (torch.randn(case.local_experts, case.k, case.n, device=device, dtype=dtype, generator=gen) * scale)
        ends, at, self.ranges = [], 0, []
        for c, p in zip(case.counts, padded):
            self.ranges.append((at, at + c))
            at += p
            ends.append(at)
        self.offs = torch.tensor(ends, dtype=torch.int32, device=device)
        self.dense_x = self.x[:case.rows] if case.rows else self.x[:1]
        self.dense_w = self.w[0]
        self.loop_out = torch.zeros(self.total_rows, case.n, device=device, dtype=dtype)
        self.dense_out = torch.empty(max(case.rows, 1), case.n, device=device, dtype=dtype)

    def loop(self) -> torch.Tensor:
        for e, (a, b) in enumerate(self.ranges):
            if b > a:
                torch.mm(self.x[a:b], self.w[e], out=self.loop_out[a:b])
        return self.loop_out

    def dense(self) -> torch.Tensor:
        return torch.mm(self.dense_x, self.dense_w, out=self.dense_out)

    def real_rows(self, out: torch.Tensor) -> torch.Tensor:
        """The rows of ``out`` that hold routed tokens (padding rows dropped)."""
        return torch.cat([out[a:b] for a, b in self.ranges if b > a]) if any(b > a for a, b in self.ranges) \
            else out[:0]


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    if want.numel() == 0:
        return 0.0
    scale = float(want.float().abs().max())
    return float((got.float() - want.float()).abs().max()) / (scale or 1.0)


def check_impls(ops: Operands, impls: dict) -> tuple[dict, dict, dict]:
    """Each implementation of ``impls`` against the loop: (the ones that run and match, their errors, the
    rejected ones with the reason)."""
    want = ops.real_rows(ops.loop())
    passed, errs, rejected = {}, {}, {}
    for name, fn in impls.items():
        try:
            got = ops.real_rows(fn(ops.x, ops.w, ops.offs))
        except (RuntimeError, TypeError, ValueError) as exc:
            rejected[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            continue
        err = relative_error(got, want)
        if got.shape == want.shape and err <= CHECK_RTOL:
            passed[name], errs[name] = fn, err
        else:
            rejected[name] = f"max error {err:.3g} against the loop (shape {tuple(got.shape)})"
    if GROUPED not in passed:
        raise RuntimeError(f"torch._grouped_mm did not match the torch.mm loop: {rejected}")
    return passed, errs, rejected


# -- measuring ---------------------------------------------------------------------------------------------

def measure_case(case: Case, *, device: torch.device, dtype: torch.dtype, align: int, iters: int, reps: int,
                 warmup: int, seed: int, impls: dict) -> dict:
    from hocket.timing.timer import TimingConfig, time_interleaved

    ops = Operands(case, device=device, dtype=dtype, align=align, seed=seed)
    passed, errs, rejected = check_impls(ops, impls)
    x, w, offs = ops.x, ops.w, ops.offs
    fns = {IMPL_KEYS[name]: (lambda fn=fn: fn(x, w, offs)) for name, fn in passed.items()}
    fns.update({"loop": ops.loop, "dense": ops.dense})
    timing = TimingConfig(warmup=warmup, iters=iters, reps=reps)
    summaries = time_interleaved(fns, config=timing, rounds=iters, device=device)
    out = {"case": asdict(case), "label": case.label, "rows": case.rows, "busy_experts": case.busy,
           "rows_per_busy_expert": case.rows / case.busy if case.busy else 0.0, "padded_rows": ops.total_rows,
           "flops": case.flops, "check_errors": {IMPL_KEYS[k]: v for k, v in errs.items()},
           "rejected_impls": rejected}
    for key, s in summaries.items():
        out[f"{key}_ms"] = s.median_ms
        out[f"{key}_p10_ms"], out[f"{key}_p90_ms"] = s.p10_ms, s.p90_ms
        out[f"{key}_tflops"] = case.flops / (s.median_ms * 1e-3) / 1e12
        out[f"{key}_vs_dense"] = summaries["dense"].median_ms / s.median_ms
    del ops
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


# -- the efficiency fit ------------------------------------------------------------------------------------

def predict_ms(row: dict, e_max: float, t_half: float) -> float:
    """``dense_ms * (rows + busy * t_half) / (rows * e_max)``: the module docstring's model."""
    return row["dense_ms"] * (row["rows"] + row["busy_experts"] * t_half) / (row["rows"] * e_max)


def fit_efficiency(rows: list[dict], key: str = "grouped") -> dict:
    """Least squares on log time of ``rows[f"{key}_ms"]``: ``t_half`` on a log grid (0.5 .. 65536 rows,
    2**(1/8) steps), ``e_max`` in closed form for each."""
    usable = [r for r in rows if r["rows"] > 0 and r.get(f"{key}_ms", 0) > 0]
    if not usable:
        raise ValueError(f"no measured cases of {key!r} to fit")
    best = None
    for i in range(-8, 8 * 16 + 1):
        t_half = 2.0 ** (i / 8)
        logs = [math.log(predict_ms(r, 1.0, t_half) / r[f"{key}_ms"]) for r in usable]
        log_e = sum(logs) / len(logs)
        sse = sum((v - log_e) ** 2 for v in logs)
        if best is None or sse < best[0]:
            best = (sse, math.exp(log_e), t_half)
    _, e_max, t_half = best
    return {"e_max": e_max, "t_half": t_half, "n": len(usable), "rms_log_error": math.sqrt(best[0] / len(usable))}


def errors(rows: list[dict], e_max: float, t_half: float, key: str = "grouped") -> dict:
    """|predicted / measured - 1| over ``rows``: median, max, and the mean signed error."""
    rel = [predict_ms(r, e_max, t_half) / r[f"{key}_ms"] - 1.0 for r in rows if r["rows"] > 0 and f"{key}_ms" in r]
    if not rel:
        return {"n": 0}
    absolute = sorted(abs(v) for v in rel)
    return {"n": len(rel), "median_abs_error": absolute[len(absolute) // 2], "max_abs_error": absolute[-1],
            "mean_signed_error": sum(rel) / len(rel)}


def held_out_fits(results: list[dict], key: str = "grouped") -> list[dict]:
    """For each model: fit on the others' cases, errors on its cases (and on the fitted ones); then the Zipf
    cases held out of a fit on the uniform ones."""
    splits = [(m, lambda r, m=m: r["case"]["model"] != m) for m in sorted({r["case"]["model"] for r in results})]
    splits.append(("zipf (fit on uniform)", lambda r: r["case"]["skew"] == "uniform"))
    out = []
    for held, in_train in splits:
        train = [r for r in results if in_train(r)]
        test = [r for r in results if not in_train(r)]
        if not train or not test:
            continue
        fit = fit_efficiency(train, key)
        out.append({"held_out": held, "fit": fit, "train": errors(train, fit["e_max"], fit["t_half"], key),
                    "test": errors(test, fit["e_max"], fit["t_half"], key)})
    return out


def cost_model_rule() -> dict | None:
    """The GPU grouped-GEMM rule the cost model ships (``hocket.cost.moe.GPU_GROUPED``), None where absent."""
    try:
        from hocket.cost import moe

        rule = moe.GPU_GROUPED
        return {"e_max": float(rule.e_max), "t_half": float(rule.t_half_rows),
                "group_us": float(getattr(rule, "group_us", 0.0)), "source": str(getattr(rule, "source", ""))}
    except (ImportError, AttributeError, TypeError, ValueError):  # not in this build, or its fields differ
        return None


def all_fits(results: list[dict]) -> dict:
    """The fit of ``torch._grouped_mm`` (all cases, held out by model), the shipped rule's error, and the fit of
    ``hocket.ops.grouped_mm`` where it was timed; ``rule`` is the fit as ``GroupedGemmRule`` fields."""
    fit = fit_efficiency(results)
    out = {"all": fit, "all_errors": errors(results, fit["e_max"], fit["t_half"]),
           "held_out": held_out_fits(results),
           "rule": {"e_max": round(fit["e_max"], 4), "t_half_rows": fit["t_half"], "group_us": 0.0,
                    "source": "benchmarks/grouped_gemm_gpu.py: torch._grouped_mm against a dense GEMM"}}
    shipped = cost_model_rule()
    if shipped is not None:
        out["shipped"] = {**shipped, "errors": errors(results, shipped["e_max"], shipped["t_half"])}
    if any("hocket_grouped_ms" in r for r in results):
        hfit = fit_efficiency(results, "hocket_grouped")
        out["hocket_grouped"] = {"all": hfit, "all_errors": errors(results, hfit["e_max"], hfit["t_half"],
                                                                   "hocket_grouped")}
    return out


# -- the report --------------------------------------------------------------------------------------------

def _num(row: dict, key: str, fmt: str) -> str:
    return format(row[key], fmt) if key in row else "-"


def _err(e: dict) -> str:
    return f"{e['median_abs_error']:.1%} / {e['max_abs_error']:.1%}" if e.get("n") else "-"


def markdown(results: list[dict], fits: dict, meta: dict) -> str:
    lines = [f"# Grouped expert GEMMs ({meta['device_name']}, torch {meta['torch']}, {meta['dtype']})", "",
             f"Offsets aligned to {meta['align_rows']} rows; medians of {meta['iters']} samples x {meta['reps']} "
             f"calls (device events); Zipf s = {meta['zipf']}. TFLOP/s count routed rows only; x/dense is the dense "
             f"GEMM's time over the kernel's (same FLOPs). `hocket` is hocket.ops.grouped_mm (torch._grouped_mm "
             f"and a pass zeroing rows past offs[-1]).", "",
             "| case | local E | rows | rows/busy expert | dense TFLOP/s | _grouped_mm TFLOP/s | hocket TFLOP/s | "
             "loop TFLOP/s | _grouped_mm/dense | hocket/dense | loop/dense |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['label']} | {r['case']['local_experts']} | {r['rows']} | {r['rows_per_busy_expert']:.0f} "
                     f"| {r['dense_tflops']:.4g} | {r['grouped_tflops']:.4g} | "
                     f"{_num(r, 'hocket_grouped_tflops', '.4g')} "
                     f"| {r['loop_tflops']:.4g} | {r['grouped_vs_dense']:.2f} | "
                     f"{_num(r, 'hocket_grouped_vs_dense', '.2f')} | {r['loop_vs_dense']:.2f} |")
    for label, why in meta["failed"].items():
        lines.append(f"| {label} | failed: {why} | | | | | | | | | |")
    a = fits["all"]
    lines += ["", "## Efficiency fit (torch._grouped_mm): eff(t) = e_max * t / (t + t_half), t = rows per busy "
              "expert", "", f"All cases: e_max {a['e_max']:.3f}, t_half {a['t_half']:.1f} rows, rms log error "
              f"{a['rms_log_error']:.3f}; median / max abs error {_err(fits['all_errors'])} (n = {a['n']})."]
    if "shipped" in fits:
        sh = fits["shipped"]
        lines.append(f"The cost model's shipped rule (hocket.cost.moe.GPU_GROUPED: e_max {sh['e_max']}, t_half "
                     f"{sh['t_half']}): median / max abs error {_err(sh['errors'])}.")
    if "hocket_grouped" in fits:
        h = fits["hocket_grouped"]["all"]
        lines.append(f"hocket.ops.grouped_mm fitted alike: e_max {h['e_max']:.3f}, t_half {h['t_half']:.1f}; median / "
                     f"max abs error {_err(fits['hocket_grouped']['all_errors'])}.")
    lines += ["", "| held out | e_max | t_half | train median / max abs err | held-out median / max abs err | "
              "held-out mean signed err |", "|---|---|---|---|---|---|"]
    for h in fits["held_out"]:
        te = h["test"]
        lines.append(f"| {h['held_out']} | {h['fit']['e_max']:.3f} | {h['fit']['t_half']:.1f} | {_err(h['train'])} | "
                     f"{_err(te)} | {te.get('mean_signed_error', float('nan')):+.1%} |")
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--tiny", action="store_true", help="tiny shapes and few samples (the CPU smoke)")
    p.add_argument("--tokens", default=None,
                   help="tokens per rank, comma-separated (default 128,256,...,16384: powers of two)")
    p.add_argument("--models", default=None, help="comma-separated subset of the model names")
    p.add_argument("--iters", type=int, default=None, help="samples per timing (default 20; tiny 3)")
    p.add_argument("--reps", type=int, default=None, help="calls back to back per sample (default 5; tiny 1)")
    p.add_argument("--zipf", type=float, default=1.2, help="Zipf exponent of the skewed routing")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="output folder (default $OUT, else ./out)")
    p.add_argument("--budget-s", type=float, default=330.0,
                   help="stop measuring new cases after this many seconds (the report covers what ran)")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no GPU here; use --device cpu --tiny")
    dtype = torch.bfloat16
    models = TINY_MODELS if args.tiny else MODELS
    if args.models:
        wanted = set(args.models.split(","))
        models = tuple(m for m in models if m.name in wanted)
        if not models:
            raise SystemExit(f"--models {args.models}: none of {[m.name for m in MODELS + TINY_MODELS]}")
    tokens = tuple(int(t) for t in args.tokens.split(",")) if args.tokens else (TINY_TOKENS if args.tiny else TOKENS)
    iters = args.iters or (3 if args.tiny else 20)
    reps = args.reps or (1 if args.tiny else 5)
    out_dir = args.out or Path(os.environ.get("OUT", "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    align = ALIGN_ROWS if needs_alignment(device, dtype) else 1
    impls = {GROUPED: torch_grouped}
    hocket_mm = hocket_grouped_mm()
    if hocket_mm is not None:
        impls[HOCKET] = hocket_mm
    cases = build_cases(models, tokens, zipf=args.zipf, seed=args.seed)
    start = time.monotonic()
    results, skipped, failed = [], [], {}
    for i, case in enumerate(cases):
        if time.monotonic() - start > args.budget_s:
            skipped.append(case.label)
            continue
        try:
            row = measure_case(case, device=device, dtype=dtype, align=align, iters=iters, reps=reps, warmup=2,
                               seed=args.seed + i, impls=impls)
        except (RuntimeError, ValueError) as exc:  # a failed check or out of memory: the report names it
            failed[case.label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            print(f"{case.label}: FAILED {failed[case.label]}", flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        results.append(row)
        print(f"[{time.monotonic() - start:6.1f}s] {case.label}: _grouped_mm {row['grouped_tflops']:.1f} "
              f"hocket {_num(row, 'hocket_grouped_tflops', '.1f')} loop {row['loop_tflops']:.1f} dense "
              f"{row['dense_tflops']:.1f} TFLOP/s (errors {row['check_errors']})", flush=True)
    (out_dir / "grouped_gemm.json").write_text(json.dumps({"results": results, "failed": failed}, indent=1))
    fits = all_fits(results) if results else {}
    meta = {"device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
            or "cpu", "torch": torch.__version__, "dtype": str(dtype).replace("torch.", ""), "align_rows": align,
            "iters": iters, "reps": reps, "zipf": args.zipf, "tiny": args.tiny, "skipped_for_budget": skipped,
            "impls": sorted(impls), "failed": failed, "wall_s": time.monotonic() - start}
    report = {"meta": meta, "results": results, "fits": fits}
    (out_dir / "grouped_gemm.json").write_text(json.dumps(report, indent=1))
    text = markdown(results, fits, meta) if fits else f"no case measured: {failed}\n"
    (out_dir / "grouped_gemm.md").write_text(text)
    print(text)
    return report


if __name__ == "__main__":
    main()

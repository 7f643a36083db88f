"""MoE layers on one GPU: what the split sizes' host read costs, and what capturing the padded layout saves.

On one GPU (an NCCL group of one rank: the all-to-alls are local copies, so what differs between the lines is
the host's part and the layout), per layer preset (``hocket.bench.moe.layer_from_preset``, scaled), bf16,
``--tokens`` tokens, uniform and Zipf-skewed routing, forward only:

* ``sequential_ep``: the plain expert-parallel path (``hocket.bench.moe.SequentialEP``: a host read of the split
  sizes per call; it cannot be captured);
* ``hocket exchanged`` / ``hocket padded``: ``hocket.ops.moe_experts`` eager, ``sequential`` with each split mode;
* ``hocket padded, captured``: the same call replayed by ``hocket.ops.CapturedCall``.

With ``--backward`` every line is the forward and its backward (``torch.autograd.grad`` of the output for a fixed
output gradient, to the tokens and both expert weights; ``sequential_ep`` through torch's differentiable
all-to-all), and the captured line captures both.

Every line is first checked against ``sequential_ep``'s output (bf16: max error within 2% of its largest
magnitude), then timed in ``--rounds`` rounds, the lines in turn (order rotated each round), ``--calls`` calls per
line per round after two warm-ups, each call between two CUDA events on the current stream (stream time: the host
running behind shows as idle stream time). Prints one JSON line per (case, line) with the median and the spread
of the round medians, and writes them to ``--out``.

    python -m benchmarks.moe_capture_gpu --out $OUT/moe_capture.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist

import hocket.ops as H
from hocket.bench.moe import SequentialEP, layer_from_preset, make_operands

PRESETS = {"mixtral-8x7b": 4, "qwen3-30b-a3b": 2, "deepseek-v3": 4}
"""preset -> scale factor (hidden and ffn divided by it; experts and k kept)."""


def _time(fn, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return out


def run_case(preset: str, skew: str, tokens: int, rounds: int, calls: int, backward: bool = False) -> list[dict]:
    dev = torch.device("cuda", torch.cuda.current_device())
    layer = layer_from_preset(preset).scaled(PRESETS[preset])
    ops = make_operands(layer, tokens=tokens, skew=skew, rank=0, world=1, dtype=torch.bfloat16, device=dev)
    group = dist.group.WORLD
    grad_out = torch.randn(ops.x.shape, device=dev, generator=torch.Generator(device=dev).manual_seed(7))
    grad_out = grad_out.to(ops.x.dtype)
    if backward:
        for t in (ops.x, ops.w_gate_up, ops.w_down):
            t.requires_grad_()
    seq = SequentialEP(ops, group, autograd=backward)

    def with_grads(forward):
        """``forward`` alone, or its output and the gradients of x and both expert weights (``--backward``)."""
        if not backward:
            return forward

        def run():
            y = forward()
            return (y, *torch.autograd.grad(y, [ops.x, ops.w_gate_up, ops.w_down], grad_out))
        return run

    def hocket(splits):
        plan = {"strategy": "sequential", "splits": splits}
        return lambda: H.moe_experts(ops.x, ops.topk_ids, ops.topk_weights, ops.w_gate_up, ops.w_down, group,
                                     plan=plan)

    def captured_fn(x, ids, w):
        plan = {"strategy": "sequential", "splits": "padded"}
        if not backward:
            return H.moe_experts(x, ids, w, ops.w_gate_up, ops.w_down, group, plan=plan)
        xg = x.detach().requires_grad_()
        y = H.moe_experts(xg, ids, w, ops.w_gate_up, ops.w_down, group, plan=plan)
        return (y, *torch.autograd.grad(y, [xg, ops.w_gate_up, ops.w_down], grad_out))

    captured = H.CapturedCall(captured_fn, ops.x.detach(), ops.topk_ids, ops.topk_weights.detach(),
                              what="moe padded")
    lines = {"sequential_ep": with_grads(seq), "hocket exchanged": with_grads(hocket("exchanged")),
             "hocket padded": with_grads(hocket("padded")),
             "hocket padded, captured": lambda: captured(ops.x.detach(), ops.topk_ids, ops.topk_weights.detach())}
    with torch.set_grad_enabled(backward):
        want = lines["sequential_ep"]()
        want = want if isinstance(want, tuple) else (want,)
        errors = {}
        for name, fn in lines.items():
            got = fn()
            got = got if isinstance(got, tuple) else (got,)
            errors[name] = max(float((g.float() - w.float()).abs().max()) / max(float(w.float().abs().max()), 1e-30)
                               for g, w in zip(got, want))
            if errors[name] > 2e-2:
                raise AssertionError(f"{preset} {skew}: {name} differs from sequential_ep by {errors[name]:.3g}")
        medians: dict[str, list[float]] = {name: [] for name in lines}
        names = list(lines)
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                _time(lines[name], 2)
                medians[name].append(statistics.median(_time(lines[name], calls)))
    rows = []
    for name in names:
        ms = medians[name]
        rows.append({"preset": preset, "scale": PRESETS[preset], "hidden": layer.hidden, "ffn": layer.ffn,
                     "experts": layer.experts, "topk": layer.topk, "tokens": tokens, "skew": skew, "line": name,
                     "direction": "forward+backward" if backward else "forward",
                     "median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms),
                     "rel_error": errors[name], "rounds": rounds, "calls": calls})
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--presets", nargs="*", default=list(PRESETS))
    p.add_argument("--skews", nargs="*", default=["uniform", "zipf:1.2"])
    p.add_argument("--backward", action="store_true", help="time forward + backward")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        rows = []
        for preset in args.presets:
            for skew in args.skews:
                for row in run_case(preset, skew, args.tokens, args.rounds, args.calls, args.backward):
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        if args.out:
            with open(args.out, "w") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in rows)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

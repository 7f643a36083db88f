"""The MoE benchmark grid of issue 32 on CPU gloo ranks: ``hocket bench moe`` (:mod:`hocket.bench.moe`) at the
Mixtral-8x7B, Qwen3-30B-A3B and DeepSeek-V3 layers scaled to the machine, uniform and skewed routing, in one spawn.

Each layer is the preset's (``hocket.models``) divided by ``hocket.bench.moe.SCALES`` (Mixtral and DeepSeek by 16,
Qwen3 by 8: hidden 256 / 256 / 448), at ``--tokens`` per rank on ``--world`` self-spawned gloo ranks with one
compute thread each, bf16. Every candidate (sequential EP, every MoE strategy of hocket at ``--chunks``,
``plan=None``, torchtitan's EP path, torchtitan through hocket's drop-in) is checked against the single-process
reference (``--directions backward``: the output and every gradient), then timed interleaved;
prints and writes a markdown table per case (``moe_bench.md``) and one JSON line per case (``moe_bench.jsonl``,
schema ``hocket.bench.moe/1``, with the scores) to ``--out`` (default ``$OUT``, else ``./out``).

    python -m benchmarks.moe_bench                                   # the report's grid (about 10 minutes)
    python -m benchmarks.moe_bench --models qwen3-30b-a3b --skews uniform --tokens 64 --iters 2   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from hocket.bench.moe import SCALES, MoeBenchSpec, bench_plans, layer_from_preset, run_specs, score, table_lines


def build_specs(args) -> tuple[MoeBenchSpec, ...]:
    plans = bench_plans(chunks=tuple(int(c) for c in args.chunks.split(",")), splits=tuple(args.splits.split(",")))
    specs = []
    for name in args.models.split(","):
        layer = layer_from_preset(name).scaled(SCALES.get(name, 1) if args.scale is None else args.scale)
        for skew in args.skews.split(","):
            for direction in args.directions.split(","):
                if direction not in ("forward", "backward"):
                    raise SystemExit(f"--directions {args.directions}: use forward and/or backward")
                specs.append(MoeBenchSpec(layer=layer, tokens=args.tokens, skew=skew, plans=plans,
                                          torchtitan=not args.no_torchtitan, backward=direction == "backward",
                                          iters=args.iters, warmup=args.warmup, seed=args.seed))
    return tuple(specs)


BASELINES = ("sequential_ep", "torchtitan", "torchtitan+hocket")


def summary_lines(results: list[dict]) -> list[str]:
    """One row per case: the baselines' medians, hocket's ``sequential`` plan, its best plan and ``plan=None``'s
    time, each best's speedup over ``sequential_ep`` and ``torchtitan``, the best plan's overlap score."""
    lines = ["| layer | direction | routing | compute / comm alone ms | sequential_ep | torchtitan | hocket sequential "
             "| best hocket plan | plan=None | best vs sequential_ep | best vs torchtitan | best's score |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for result in results:
        rows = {r["candidate"]: r for r in score(result)}
        hocket = {k: v for k, v in rows.items() if k not in BASELINES}
        t = result["times"]

        def ms(label: str, rows=rows) -> str:
            return f"{rows[label]['median_ms']:.1f}" if label in rows else "-"
        best = min(hocket.values(), key=lambda r: r["median_ms"]) if hocket else None
        tt = f"{best['vs_torchtitan']:.2f}x" if best and best["vs_torchtitan"] else "-"
        lines.append(
            f"| {result['layer']['name']} (/{result['layer']['scale']}) | {result.get('direction', 'forward')} | "
            f"{result['skew']} | {t['compute_alone']['median_ms']:.1f} / {t['comm_alone']['median_ms']:.1f} | "
            f"{ms('sequential_ep')} | {ms('torchtitan')} | {ms('sequential')} | "
            + (f"{best['candidate']} {best['median_ms']:.1f} | {ms('plan=None')} | {best['vs_sequential_ep']:.2f}x | "
               f"{tt} | {best['score']} |" if best else "- | - | - | - | - |"))
    return lines


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mixtral-8x7b,qwen3-30b-a3b,deepseek-v3")
    p.add_argument("--skews", default="uniform,zipf:1.0", help="routers, comma-separated (uniform, zipf:S)")
    p.add_argument("--tokens", type=int, default=256, help="tokens per rank")
    p.add_argument("--scale", type=int, default=None, help="one factor for every model (default: SCALES)")
    p.add_argument("--chunks", default="2,4", help="chunk counts of the chunked strategies")
    p.add_argument("--splits", default="exchanged", help="split-size modes of the hocket plans: exchanged, padded")
    p.add_argument("--directions", default="forward",
                   help="forward and/or backward (the forward and its backward timed together), comma-separated")
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-torchtitan", action="store_true")
    p.add_argument("--timeout-s", type=float, default=1200.0, help="bound on the whole run and every collective")
    p.add_argument("--out", type=Path, default=None, help="output folder (default $OUT, else ./out)")
    return p.parse_args(argv)


def main(argv=None) -> list[dict]:
    from hocket.bench.provenance import command_line, git_hash, versions

    args = parse_args(argv)
    out_dir = args.out or Path(os.environ.get("OUT", "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = build_specs(args)
    load_before = os.getloadavg()
    start = time.monotonic()
    results = run_specs(specs, world=args.world, threads_per_rank=1, timeout_s=args.timeout_s)
    wall = time.monotonic() - start
    load = {"before": load_before, "after": os.getloadavg(), "cores": os.cpu_count()}
    provenance = {"command": command_line(), "git_hash": git_hash(), "versions": versions(), "load_average": load}
    with (out_dir / "moe_bench.jsonl").open("a") as f:
        for result in results:
            f.write(json.dumps({**result, "scores": score(result), **provenance}) + "\n")
    text = "\n".join(summary_lines(results)) + "\n\n"
    text += "\n\n".join("\n".join(table_lines(r)) for r in results)
    text += (f"\n\n{len(results)} cases in {wall:.0f} s; load average (1, 5, 15 min) before "
             f"{', '.join(f'{v:.1f}' for v in load['before'])}, after {', '.join(f'{v:.1f}' for v in load['after'])} "
             f"on {load['cores']} cores; {provenance['command']}\n")
    (out_dir / "moe_bench.md").write_text(text)
    print(text)
    return results


if __name__ == "__main__":
    main()

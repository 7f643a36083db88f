"""Predicted gain of shards sized by device speed over even shards, for Llama-3-70B's tensor-parallel sites.

    python benchmarks/uneven_predicted.py                       # the markdown tables of the dated report
    python benchmarks/uneven_predicted.py --out uneven.jsonl    # plus one JSON object per block

Nothing runs on devices: every number is the cost model's (:mod:`hocket.plan.shards`, the functions behind
``hocket plan --shards`` and ``hocket predict --shards``). For each mixed preset and tensor-parallel group of 8,
the layer's two blocks (the MLP: ``mlp.up``, ``mlp.down`` and their input gradients, sharing the FFN split in
units of 64; the attention: ``attn.qkv``, ``attn.out`` and their input gradients, sharing whole GQA groups) are
priced with even shards and with the recommended ones, each under the best of the planner's few best plans;
beside the gain, the compute-only bound (sum of the devices' rates over the slowest rate times the group size).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

CASES = (
    ("mixed-a100-h100-pcie", 0, 8, "4x A100 PCIe + 4x H100 PCIe, one host"),
    ("mixed-nvidia-amd", 0, 8, "4x L20 + 4x MI210, one host, host memory only"),
    ("mixed-a100-h100", 0, 8, "one HGX A100 node (one device type per node)"),
    ("mixed-a100-h100", 16, 8, "one HGX H100 node (one device type per node)"),
)
WHAT_IF_CLUSTER = "h200x8-triggered"


def run(model: str, seq: int, batch: int, steady_state: bool) -> list[dict]:
    from hocket.cli._shards import model_blocks
    from hocket.hardware import load_preset
    from hocket.plan.shards import recommend_block_shards, recommend_shards

    rows = []
    for name, first, tp, what in CASES:
        cluster = load_preset(name)
        ranks = tuple(range(first, first + tp))
        blocks = model_blocks(model, tp=tp, seq=seq, batch=batch, cluster=cluster)
        layer = {"even": 0.0, "uneven": 0.0, "even_lockstep": 0.0, "uneven_lockstep": 0.0}
        for block, (sites, multiples) in blocks.items():
            sites = tuple(replace(s, ranks=ranks) for s in sites)
            variants = [("", 0)] + ([(" (every rank keeps a GQA group)", 1)] if block == "attn" else [])
            for suffix, min_units in variants:
                t0 = time.perf_counter()
                rec = recommend_block_shards(sites, cluster, multiple=multiples, steady_state=steady_state,
                                             min_units=min_units)
                row = {"cluster": name, "group": what, "ranks": list(ranks), "block": block + suffix,
                       "seconds": time.perf_counter() - t0, **rec.to_dict()}
                rows.append(row)
                if not suffix:
                    layer["even"] += rec.even_ms
                    layer["uneven"] += rec.uneven_ms
                    layer["even_lockstep"] += rec.even_lockstep_ms
                    layer["uneven_lockstep"] += rec.uneven_lockstep_ms
            for site in sites:
                if site.direction != "forward":
                    continue
                index = sites.index(site)
                rec = recommend_shards(site, cluster, multiple=multiples[index], steady_state=steady_state)
                rows.append({"cluster": name, "group": what, "ranks": list(ranks), "block": f"{block}/{site.name}",
                             "site_only": True, **rec.to_dict()})
        rows.append({"cluster": name, "group": what, "ranks": list(ranks), "block": "layer (mlp + attn)",
                     "even_ms": layer["even"], "uneven_ms": layer["uneven"],
                     "gain": layer["even"] / layer["uneven"] if layer["uneven"] else 1.0,
                     "lockstep_gain": layer["even_lockstep"] / layer["uneven_lockstep"] if layer["uneven_lockstep"] else 1.0,
                     "bound": rows[-1]["bound"], "layer": True})
    return rows


def what_if(model: str, seq: int, batch: int) -> dict:
    """The hypothetical ``triggered`` transport on the step as ``hocket plan`` plans it (``hocket simulate
    --plan planned.json --what-if triggered``)."""
    from hocket.hardware import load_preset
    from hocket.models.step import model_step_sites
    from hocket.sim.model_plan import plan_model
    from hocket.sim.plans import PlanBook, parse_plan_file
    from hocket.sim.what_if import what_if_step

    cluster = load_preset(WHAT_IF_CLUSTER)
    report = plan_model(model, cluster, tp=8, pp=1, dp=1, seq=seq, batch=batch)
    book = PlanBook(parse_plan_file(json.loads(json.dumps(report)), source="plan_model"), default=None)
    step = model_step_sites(model, tp=8, pp=1, dp=1, seq=seq, batch=batch, cluster=cluster)
    planned = what_if_step(step, cluster, plan=book).to_dict()
    sequential = what_if_step(step, cluster, plan="sequential").to_dict()
    return {"cluster": WHAT_IF_CLUSTER, "planned": planned, "sequential": sequential}


def what_if_table(result: dict) -> str:
    lines = [f"HYPOTHETICAL `triggered` on `{result['cluster']}` (tp 8): simulated step",
             "", "| plans | step ms | with triggered (hypothetical) | saving |", "|---|---|---|---|"]
    for key in ("sequential", "planned"):
        w = result[key]
        lines.append(f"| {key} | {w['step_ms']:.1f} | {w['what_if_step_ms']:.1f} | {w['saving']:.1%} |")
    lines += ["", "| site | kind | x/step | plan | planned ms | triggered ms (hypothetical) |", "|---|---|---|---|---|---|"]
    for row in result["planned"]["sites"]:
        if row["triggered_ms"] is not None:
            lines.append(f"| {row['name']} | {row['kind']} | {row['count']} | {row['plan']} | {row['planned_ms']:.3f} | "
                         f"{row['triggered_ms']:.3f} |")
    return "\n".join(lines)


def _sizes(row: dict) -> str:
    if "ranks" not in row or not isinstance(row.get("units"), list):
        return ""
    by_device: dict[str, list[int]] = {}
    for rank in row["ranks"][0] if isinstance(row["ranks"][0], list) else []:
        by_device.setdefault(rank["device"], []).append(rank["size"])
    return "; ".join(f"{dev} {'/'.join(str(s) for s in sorted(set(sizes)))}" for dev, sizes in by_device.items())


def table(rows: list[dict]) -> str:
    lines = ["| preset | TP group | block or site | even ms | uneven ms | gain | gain, ranks in lock step | "
             "compute-only bound | first site's split per device | plans (uneven) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if row.get("layer"):
            lines.append(f"| `{row['cluster']}` | {row['group']} | **{row['block']}** | {row['even_ms']:.3f} | "
                         f"{row['uneven_ms']:.3f} | **{row['gain']:.3f}x** | {row['lockstep_gain']:.3f}x | "
                         f"{row['bound']:.3f}x | | |")
            continue
        plans = ", ".join(row["plan_labels"])
        lines.append(f"| `{row['cluster']}` | {row['group']} | {row['block']} | {row['even_ms']:.3f} | "
                     f"{row['uneven_ms']:.3f} | {row['gain']:.3f}x | {row['lockstep_gain']:.3f}x | {row['bound']:.3f}x | "
                     f"{_sizes(row)} | {plans} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3-70b")
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steady-state", action="store_true", help="price one call of a training loop")
    parser.add_argument("--out", default=None, help="write one JSON object per row here")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    rows = run(args.model, args.seq, args.batch, args.steady_state)
    print(f"{args.model}, seq {args.seq}, batch {args.batch}, bf16, tp 8, "
          f"{'steady state' if args.steady_state else 'one call from idle'}; {time.perf_counter() - t0:.1f} s\n")
    print(table(rows))
    hypothetical = what_if(args.model, args.seq, args.batch)
    print()
    print(what_if_table(hypothetical))
    if args.out:
        with open(args.out, "w") as fh:
            for row in rows:
                fh.write(json.dumps(row, sort_keys=True) + "\n")
            fh.write(json.dumps({"what_if": hypothetical}, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

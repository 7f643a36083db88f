"""Parallel-search benchmark (CPU): search times and the check against published training runs.

    python benchmarks/parallel_search.py [--only times|moe|validation] > report-body.md

Search times: Llama-3-70B on 64 H100 (h100-8node), Llama-3-405B on 16,384 H100 (h100-16k), Llama-3-70B on the
64-GPU three-type cluster (mixed-3type-64), and one MoE model, Mixtral 8x7B on 64 H100 (the expert-parallel degree
searched too); every search dimension on (``ParallelSpace()`` defaults), 3 re-ranked.

Validation: each published configuration is priced as given (``hocket.search.run.price_candidate``, simulated)
at the data-parallel sharding level the paper describes (``gradients``: the model, optimizer states and gradients
sharded over DP, the weights not resharded after the forward), plainly 1F1B and interleaved with v = 2; its memory
at that level and, for comparison, at ``optimizer`` (ZeRO-1, the level of the 2026-12-01 report); then the search
runs for the same model, cluster and global batch. Published figures are quoted, not fitted.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from hocket.hardware import load_cluster
from hocket.models.catalog import load_model
from hocket.search import Candidate, flops_per_token, search_parallel
from hocket.search.memory import GIB
from hocket.search.run import price_candidate

H100_1024_NODES = """name: h100-1024node
nodes:
  - {node: hgx-h100, count: 1024}
network:
  topology: rail
  transports: [collective, p2p, host_staged]
"""

# The Llama 3 Herd of Models (Dubey et al., 2024), Table 4: Llama 3 405B pre-training, BF16 MFU and TFLOPs/GPU.
# 16M tokens per batch; the paper's pipeline schedule is interleaved with one layer fewer on the first and last
# stage (126 = 16 * 8 - 2).
PUBLISHED = [
    ("Llama 3 405B, 8,192 H100, TP8 CP1 PP16 DP64, seq 8192", "h100-1024node", 8192, 2048,
     dict(tp=8, cp=1, pp=16, dp=64, micro_batch=1, micro_batches=32), 430.0, 0.43),
    ("Llama 3 405B, 16,384 H100, TP8 CP1 PP16 DP128, seq 8192", "h100-16k", 8192, 2048,
     dict(tp=8, cp=1, pp=16, dp=128, micro_batch=1, micro_batches=16), 400.0, 0.41),
    ("Llama 3 405B, 16,384 H100, TP8 CP16 PP16 DP8, seq 131072", "h100-16k", 131072, 128,
     dict(tp=8, cp=16, pp=16, dp=8, micro_batch=1, micro_batches=16), 380.0, 0.38),
]
STAGES = [7] + [8] * 14 + [7]
LEVEL = "gradients"
"""the paper's sharding (section 3.3.1: model, optimizer and gradients sharded; no reshard after the forward)."""
TARGETS_S = {"h100-8node": 5, "h100-16k": 60, "mixed-3type-64": 10}


def _cluster(name: str, tmp: Path):
    if name == "h100-1024node":
        path = tmp / "h100-1024node.yaml"
        path.write_text(H100_1024_NODES, encoding="utf-8")
        return load_cluster(str(path))
    return load_cluster(name)


def search_times() -> list[str]:
    lines = ["| search | devices | candidates priced | pruned (space / memory) | distinct sites | seconds (CPU s) | "
             "target s | winner |", "|---|---|---|---|---|---|---|---|"]
    for model, cluster, seq, batch in (("llama3-70b", "h100-8node", 8192, 512), ("llama3-405b", "h100-16k", 8192, 2048),
                                       ("llama3-70b", "mixed-3type-64", 8192, 512),
                                       ("mixtral-8x7b", "h100-8node", 4096, 512)):
        started, cpu = time.perf_counter(), time.process_time()
        out = search_parallel(model, cluster, seq=seq, global_batch=batch, rerank=3, top=3)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        priced = out.evaluated - sum(out.memory_pruned.values())
        lines.append(f"| {model} on {cluster}, seq {seq}, batch {batch} | {out.cluster.world_size} | {priced} | "
                     f"{out.space.pruned_total} / {sum(out.memory_pruned.values())} | {out.distinct_sites} | "
                     f"{seconds:.1f} ({cpu:.1f}) | {TARGETS_S.get(cluster, '-')} | {out.winner.candidate.label()}, "
                     f"{out.winner.best_ms / 1e3:.2f} s |")
    return lines


def moe_degrees(model: str = "mixtral-8x7b", cluster: str = "h100-8node", seq: int = 4096,
                batch: int = 512) -> list[str]:
    """The best candidate the search found at each expert-parallel degree (MoE model)."""
    out = search_parallel(model, cluster, seq=seq, global_batch=batch, rerank=0, top=100000)
    best: dict[int, object] = {}
    for p in out.ranked:
        best.setdefault(p.candidate.ep, p)
    lines = [f"{model} on {cluster}, seq {seq}, global batch {batch}: the best analytic candidate per ep",
             "", "| ep | configuration | step s | tokens/s | MFU | exposed comm s |", "|---|---|---|---|---|---|"]
    for ep, p in sorted(best.items()):
        lines.append(f"| {ep} | {p.candidate.label()} | {p.step_ms / 1e3:.2f} | {p.tokens_per_s:.0f} | {p.mfu:.2f} | "
                     f"{p.exposed_ms / 1e3:.2f} |")
    return lines


def _worst(priced):
    """The stage memory (``hocket.search.memory``) of a priced configuration nearest its device's limit."""
    return max(priced.memory, key=lambda m: m.total / m.limit)


def _fits(mem) -> str:
    parts = f"{mem.total / GIB:.1f} of {mem.limit / GIB:.1f} GiB (weights {mem.weights / GIB:.1f}, grads " \
            f"{mem.grads / GIB:.1f}, optimizer {mem.optimizer / GIB:.1f}, activations {mem.activations / GIB:.1f})"
    return ("yes: " if mem.fits else "no: ") + parts


def validation(tmp: Path) -> list[str]:
    lines = [f"| published run | published TFLOP/s per GPU (MFU) | predicted at `{LEVEL}`, 1F1B | predicted at "
             f"`{LEVEL}`, interleaved v=2 | `optimizer`, 1F1B (for comparison) | fits at `{LEVEL}` | fits at "
             f"`optimizer` | search's choice | predicted gain over 1F1B / interleaved |",
             "|---|---|---|---|---|---|---|---|---|"]
    detail = ["", "Step parts of the published configurations, 1F1B (analytic estimate; the simulated step beside it):", "",
              "| published run | level | analytic step s | simulated s | bubble s | exposed comm s | DP sync s "
              "(exposed) |", "|---|---|---|---|---|---|---|"]
    model = load_model("llama3-405b")
    for label, cluster_name, seq, batch, degrees, tflops, mfu in PUBLISHED:
        cluster = _cluster(cluster_name, tmp)
        fpt = flops_per_token(model, seq)
        plain = price_candidate(model, cluster, Candidate(**degrees, sharding=LEVEL), seq=seq, global_batch=batch,
                                stages=STAGES)
        inter = price_candidate(model, cluster, Candidate(**degrees, sharding=LEVEL, schedule="interleaved",
                                                          virtual=2), seq=seq, global_batch=batch, stages=STAGES)
        zero1 = price_candidate(model, cluster, Candidate(**degrees, sharding="optimizer"), seq=seq,
                                global_batch=batch, stages=STAGES)
        world = cluster.world_size

        def per_gpu(p, fpt=fpt, world=world, batch=batch, seq=seq):
            return batch * seq / (p.best_ms / 1e3) * fpt / world / 1e12

        def cell(p):
            return f"{per_gpu(p):.0f} ({p.mfu * p.step_ms / p.best_ms:.0%})"

        out = search_parallel(model, cluster, seq=seq, global_batch=batch, rerank=3, top=1)
        win = out.winner
        lines.append(f"| {label} | {tflops:.0f} ({mfu:.0%}) | {cell(plain)} | {cell(inter)} | {cell(zero1)} | "
                     f"{_fits(_worst(plain))} | "
                     f"{_fits(_worst(zero1))} | {win.candidate.label()} "
                     f"{list(win.stages)[:3]}..., {per_gpu(win):.0f} TFLOP/s, {win.best_ms / 1e3:.2f} s | "
                     f"{plain.best_ms / win.best_ms:.2f}x / {inter.best_ms / win.best_ms:.2f}x |")
        for level, p in ((LEVEL, plain), ("optimizer", zero1)):
            detail.append(f"| {label} | `{level}` | {p.step_ms / 1e3:.2f} | {p.best_ms / 1e3:.2f} | "
                          f"{p.bubble_ms / 1e3:.2f} | {p.exposed_ms / 1e3:.2f} | {p.dp_ms / 1e3:.2f} "
                          f"({p.dp_exposed_ms / 1e3:.2f}) |")
    return lines + detail


def main(argv: list[str] | None = None) -> None:
    import argparse
    import os
    import sys

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("times", "moe", "validation"), help="run one part")
    args = parser.parse_args(argv)
    if args.only in (None, "times"):
        print("## Search times\n")
        print("\n".join(search_times()))
        print(f"load average after the searches (1, 5, 15 min): {os.getloadavg()}", file=sys.stderr)
    if args.only in (None, "moe"):
        print("\n## Expert parallelism\n")
        print("\n".join(moe_degrees()))
    if args.only in (None, "validation"):
        print("\n## Validation against published runs\n")
        with tempfile.TemporaryDirectory() as tmp:
            print("\n".join(validation(Path(tmp))))


if __name__ == "__main__":
    main()

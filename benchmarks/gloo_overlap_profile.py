"""Where does the time of an overlapped all-gather+matmul go on gloo (CPU ranks)?

For one ag_mm shape, on every rank (default: 2 self-spawned ranks, 1 compute thread
each), it measures:

* chunk GEMM efficiency: ``torch.mm`` on the whole ``[m, k] @ [k, n]`` versus the same
  rows cut into ``c`` pieces (what chunked and ring strategies run);
* the all-gather alone: wall time, and the CPU time it burns, split into this rank's
  main thread and every other thread of the process (gloo's I/O and worker threads);
* the all-gather running behind a matmul of the same size: how much the matmul slows
  down, and how long the gather still needs after the matmul ends.

On a machine with as many cores as compute threads, overlap can only hide the part of
the all-gather that does not burn CPU: ``1 - cpu_ms / wall_ms`` bounds its efficiency.
Prints a table; ``--out`` appends one JSON object per rank.

    python benchmarks/gloo_overlap_profile.py --m 2048 --k 4096 --n 1024
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

from hocket.timing.stats import summarize
from hocket.timing.timer import max_across_ranks
from hocket.launch import spawn
from hocket.transport.group import resolve_group
from hocket.transport.torch_dist import TorchDistTransport

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def thread_cpu_ms() -> dict[int, float]:
    """CPU time (user + system) of every thread of this process, by thread id, in ms."""
    times = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # the thread ended while we listed
            continue
        times[int(tid)] = (int(fields[11]) + int(fields[12])) * 1e3 / TICKS_PER_S
    return times


def median_max(samples: list[float]) -> float:
    return summarize(max_across_ranks(samples)).median_ms


def timed(fn, iters: int) -> list[float]:
    out = []
    for _ in range(iters):
        dist.barrier()
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def cpu_profile(fn, iters: int) -> tuple[float, float, float]:
    """(median wall ms over ranks' max, mean CPU ms of this thread, mean CPU ms of all other threads)."""
    main_tid = threading.get_native_id()
    walls, main_cpu, other_cpu = [], [], []
    for _ in range(iters):
        dist.barrier()
        before = thread_cpu_ms()
        start = time.perf_counter()
        fn()
        walls.append((time.perf_counter() - start) * 1e3)
        after = thread_cpu_ms()
        main_cpu.append(after.get(main_tid, 0.0) - before.get(main_tid, 0.0))
        other_cpu.append(sum(v - before.get(t, 0.0) for t, v in after.items() if t != main_tid))
    return median_max(walls), sum(main_cpu) / iters, sum(other_cpu) / iters


def profile_rank(rank: int, world: int, m: int, k: int, n: int, chunk_counts: list[int], iters: int) -> dict:
    gen = torch.Generator().manual_seed(1234 + rank)
    a_shard = torch.randn(m // world, k, generator=gen)
    a_full = torch.randn(m, k, generator=gen)
    b = torch.randn(k, n, generator=gen) / k ** 0.5
    gathered = torch.empty(m, k)
    transport = TorchDistTransport(resolve_group(dist.group.WORLD))
    gather = lambda: transport.all_gather(gathered, a_shard).wait()  # noqa: E731
    mm = lambda: torch.mm(a_full, b)  # noqa: E731
    for fn in (gather, mm):
        fn()

    result = {"rank": rank, "m": m, "k": k, "n": n, "world": world, "threads": torch.get_num_threads()}
    result["mm_ms"] = median_max(timed(mm, iters))
    result["chunked_mm_ms"] = {}
    for c in chunk_counts:
        pieces = a_full.chunk(c)
        result["chunked_mm_ms"][c] = median_max(timed(lambda: [torch.mm(p, b) for p in pieces], iters))

    rows = m // world
    src = (rank - 1) % world
    peer_rows = gathered[src * rows:(src + 1) * rows]
    exchange = lambda: transport.exchange([(a_shard, (rank + 1) % world)],  # noqa: E731
                                          [(peer_rows, (rank - 1) % world)]).wait()
    exchange()
    for name, fn in (("gather", gather), ("p2p_exchange", exchange)):
        wall_ms, main_ms, other_ms = cpu_profile(fn, iters)
        result[f"{name}_ms"] = wall_ms
        result[f"{name}_main_thread_cpu_ms"] = main_ms
        result[f"{name}_other_threads_cpu_ms"] = other_ms

    mm_behind, tail = [], []
    for _ in range(iters):
        dist.barrier()
        start = time.perf_counter()
        pending = transport.all_gather(gathered, a_shard)
        mm()
        mid = time.perf_counter()
        pending.wait()
        end = time.perf_counter()
        mm_behind.append((mid - start) * 1e3)
        tail.append((end - mid) * 1e3)
    result["mm_with_gather_ms"] = median_max(mm_behind)
    result["gather_tail_after_mm_ms"] = median_max(tail)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m", type=int, default=2048)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--threads-per-rank", type=int, default=1)
    parser.add_argument("--chunks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--iters", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    results = spawn(profile_rank, world_size=args.world, backend="gloo", threads_per_rank=args.threads_per_rank,
                    args=(args.m, args.k, args.n, args.chunks, args.iters), timeout_s=1800)
    r = results[0]
    print(f"ag_mm m={r['m']} k={r['k']} n={r['n']} world={r['world']} threads/rank={r['threads']} "
          f"(medians over ranks' max; CPU times are rank 0's means)")
    print(f"  torch.mm whole [m,k]@[k,n]          {r['mm_ms']:9.1f} ms")
    for c, ms in r["chunked_mm_ms"].items():
        print(f"  torch.mm in {c:2d} row pieces            {ms:9.1f} ms  (efficiency {r['mm_ms'] / ms:.2f})")
    for name, label in (("gather", "all-gather alone"), ("p2p_exchange", "P2P exchange (a ring step)")):
        cpu = r[f"{name}_main_thread_cpu_ms"] + r[f"{name}_other_threads_cpu_ms"]
        print(f"  {label:<36}{r[f'{name}_ms']:9.1f} ms wall, CPU {cpu:.1f} ms "
              f"(main thread {r[f'{name}_main_thread_cpu_ms']:.1f}, other threads "
              f"{r[f'{name}_other_threads_cpu_ms']:.1f}); 1 - cpu/wall = {max(0.0, 1 - cpu / r[f'{name}_ms']):.2f}")
    print("  (with every core computing, overlap can hide at most the 1 - cpu/wall part of a transfer)")
    print(f"  torch.mm with the gather behind it  {r['mm_with_gather_ms']:9.1f} ms "
          f"(x{r['mm_with_gather_ms'] / r['mm_ms']:.2f}), gather still needs {r['gather_tail_after_mm_ms']:.1f} ms")
    seq = r["mm_ms"] + r["gather_ms"]
    best = r["mm_with_gather_ms"] + r["gather_tail_after_mm_ms"]
    ideal = max(r["mm_ms"], r["gather_ms"])
    print(f"  one-shot overlap (gather behind a whole matmul): {best:.1f} ms vs sequential {seq:.1f} ms "
          f"-> efficiency {(seq - best) / (seq - ideal):.2f}")
    if args.out:
        with open(args.out, "a", encoding="utf-8") as handle:
            for res in results:
                handle.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()

"""Uneven per-rank shards on 2 GPUs with NCCL: ag_mm, mm_rs (rows and the last dim) and mm_ar (local K)
under every strategy that serves them, both ways (exact: NCCL's list collectives; padded, also over the
copy-engine and host-staged transports' collectives), fp32 and bf16,
a rank with no rows included, forward and gradients against a float64 reference.

Run on a machine with >= 2 GPUs: ``python -m pytest tests/gpu/test_uneven_nccl.py -q``."""

from __future__ import annotations

import pytest
from _two_gpus import SEED, require_two_gpus

require_two_gpus()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import hocket.ops as H  # noqa: E402
from hocket.launch.same_case import rank_generator  # noqa: E402

pytestmark = pytest.mark.timeout(900)

PLANS = [{"strategy": s, "chunks": 2, **({"splits": w} if w else {})}
         for s in ("sequential", "bulk", "chunked") for w in (None, "padded")] + \
        [{"strategy": s, "chunks": 2, "transport": "p2p"} for s in ("ring", "bidir_ring")] + \
        [{"strategy": s, "chunks": 2, "transport": t, "splits": "padded"} for s in ("bulk", "chunked")
         for t in ("copy_engine", "host_staged")]


def _operand(seed, rank, shape, dtype, salt=0):
    gen = rank_generator(seed * 7 + salt, rank=rank)
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float32).to(getattr(torch, dtype)).cuda()


def _leaf(t):
    return t.detach().clone().requires_grad_(True)


def run_uneven(case: dict) -> int:
    """Every plan of ``PLANS`` (those that serve the case) on this rank; returns the checks made."""
    rank, w = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    kind, sizes, dim, dtype = case["kind"], case["sizes"], case["dim"], case["dtype"]
    checks = 0
    for plan in PLANS:
        if dim == 1 and plan["strategy"] in ("ring", "bidir_ring"):
            continue
        if kind == "ag_mm":
            last = dim == 1
            shards = [_operand(SEED, r, (sizes[r], 8) if not last else (6, sizes[r]), dtype) for r in range(w)]
            K = sum(sizes) if last else 8
            Bs = [_operand(SEED, r, (K, 5), dtype, 1) for r in range(w)]
            A, B = _leaf(shards[rank]), _leaf(Bs[rank])
            _, (out,) = H.all_gather_matmul(A, [B], dim, dist.group.WORLD, plan=plan, return_A=False,
                                            shard_rows=sizes)
            refs = [_leaf(s.double()) for s in shards]
            ref_B = [_leaf(b.double()) for b in Bs]
            full = torch.cat(refs, dim=dim)
            G = [_operand(SEED, r, tuple(out.shape), dtype, 10) for r in range(w)]
            (out * G[rank]).sum().backward()
            sum((full @ ref_B[r] * G[r].double()).sum() for r in range(w)).backward()
            pairs = [(out, full @ ref_B[rank]), (A.grad, refs[rank].grad), (B.grad, ref_B[rank].grad)]
        elif kind == "mm_rs":
            shape = (sum(sizes), 8) if dim == 0 else (6, 8)
            n = 5 if dim == 0 else sum(sizes)
            As = [_operand(SEED, r, shape, dtype) for r in range(w)]
            Bs = [_operand(SEED, r, (8, n), dtype, 1) for r in range(w)]
            A, B = _leaf(As[rank]), _leaf(Bs[rank])
            out = H.matmul_reduce_scatter(A, B, "sum", dim, dist.group.WORLD, plan=plan, shard_rows=sizes)
            ref_A, ref_B = [_leaf(a.double()) for a in As], [_leaf(b.double()) for b in Bs]
            blocks = sum(a @ b for a, b in zip(ref_A, ref_B)).split(list(sizes), dim=dim)
            G = [_operand(SEED, r, tuple(blocks[r].shape), dtype, 10) for r in range(w)]
            (out * G[rank]).sum().backward()
            sum((b * g.double()).sum() for b, g in zip(blocks, G)).backward()
            pairs = [(out, blocks[rank]), (A.grad, ref_A[rank].grad), (B.grad, ref_B[rank].grad)]
        else:
            if plan["strategy"] in ("ring", "bidir_ring"):
                continue
            As = [_operand(SEED, r, (6, sizes[r]), dtype) for r in range(w)]
            Bs = [_operand(SEED, r, (sizes[r], 5), dtype, 1) for r in range(w)]
            out = H.matmul_all_reduce(As[rank], Bs[rank], "sum", dist.group.WORLD, plan=plan, shard_rows="auto")
            pairs = [(out, sum(a.double() @ b.double() for a, b in zip(As, Bs)))]
        for got, expected in pairs:
            H.assert_close(got, expected.to(got.dtype), world=w, what=f"{case} {plan}")
            checks += 1
    return checks


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(("kind", "sizes", "dim"), [("ag_mm", [5, 0], 0), ("ag_mm", [3, 6], 1),
                                                     ("mm_rs", [1, 4], 0), ("mm_rs", [0, 7], 1),
                                                     ("mm_ar", [6, 2], 0)])
def test_uneven_shards_on_nccl(pool2, kind, sizes, dim, dtype):
    results = pool2.run(run_uneven, dict(kind=kind, sizes=sizes, dim=dim, dtype=dtype))
    assert results[0] == results[1] > 0

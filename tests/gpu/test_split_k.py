"""hocket.kernels.split_k compiled on a GPU: products of thin, long-k pieces against the fp32 reference."""

from __future__ import annotations

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from hocket.kernels.split_k import accumulate, finish, split_count, split_k_gemm  # noqa: E402
from hocket.ops.tolerance import max_error, tolerance  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m,k,n", [(128, 8192, 7168), (256, 3584, 8192), (100, 1000, 1792), (129, 777, 130)])
def test_split_k_gemm_matches_torch_and_leaves_the_accumulator_zero(dtype, m, k, n):
    g = torch.Generator(device="cuda").manual_seed(m * 7 + k + n)
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=dtype, generator=g) / k**0.5
    host_view = torch.full((m + 3, n + 5), float("nan"), device="cuda", dtype=dtype)
    out = host_view[1:m + 1, 2:n + 2]  # a strided view: finish writes in place
    acc = torch.zeros(m, n, device="cuda", dtype=torch.float32)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for _ in range(2):  # the accumulator is reused: finish leaves it zero
        out.fill_(float("nan"))
        split_k_gemm(a, b, out, acc, splits=split_count(m, n, k, sms))
        torch.cuda.synchronize()
        assert not out.isnan().any()
        assert max_error(out.float(), (a.double() @ b.double()).float()) <= tolerance(dtype).rtol * 4
    assert not acc.any()
    assert host_view[0].isnan().all() and host_view[:, 0].isnan().all()  # nothing outside the view


def test_k_blocks_accumulate_into_one_product():
    a = torch.randn(128, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16) / 64
    acc = torch.zeros(128, 1024, device="cuda", dtype=torch.float32)
    for k0 in range(0, 4096, 1000):
        accumulate(a[:, k0:k0 + 1000].contiguous(), b[k0:k0 + 1000], acc, splits=3)
    out = finish(acc, torch.empty(128, 1024, device="cuda", dtype=torch.bfloat16))
    assert max_error(out.float(), (a.double() @ b.double()).float()) <= tolerance(torch.bfloat16).rtol * 4

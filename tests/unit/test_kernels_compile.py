"""The Triton kernels compile for an H100/H200 (sm_90) target without a GPU.

Triton's interpreter accepts code the compiler rejects (non-constexpr globals, loop
types), so every kernel is also compiled here for sm_90, specialised the way a real
launch on contiguous, 16-byte-aligned operands is (unit strides become constants).
"""

import inspect
import os
import re

import pytest

if os.environ.get("TRITON_INTERPRET", "") not in ("", "0"):
    pytest.skip("TRITON_INTERPRET is set in this process: compiled kernels are not available", allow_module_level=True)
triton = pytest.importorskip("triton")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from hocket.kernels.config import BF16_CONFIGS, FP32_CONFIGS, FP_FUSION  # noqa: E402
from hocket.kernels.consumer import consumer_gemm_kernel  # noqa: E402
from hocket.kernels.flags import set_flag_kernel, wait_flag_kernel  # noqa: E402
from hocket.kernels.producer import producer_gemm_kernel  # noqa: E402

SM90 = GPUTarget("cuda", 90, 32)
UNIT_STRIDES = ("stride_ak", "stride_bn", "stride_cn")
ALIGNED = ("M", "N", "K", "stride_am", "stride_bk", "stride_cm")


POINTER_LOADS = dict(a_desc=None, b_desc=None, b_narrow_desc=None, TMA=False, PROXY_FENCE=False)
"""Constexprs of a launch that loads through pointers (no tensor descriptors)."""


def _compile(kernel, pointers: dict, constants: dict, **options):
    params = list(inspect.signature(kernel.fn).parameters)
    constants = {k: v for k, v in POINTER_LOADS.items() if k in params and k not in pointers} | dict(constants)
    constants.update({p: 1 for p in UNIT_STRIDES if p in params})
    signature = {p: pointers.get(p, "constexpr" if p in constants else "i32") for p in params}
    attrs = {(params.index(p),): [["tt.divisibility", 16]] for p in params if p in pointers or p in ALIGNED}
    src = ASTSource(fn=kernel, signature=signature, constexprs={(params.index(k),): v for k, v in constants.items()},
                    attrs=attrs)
    return triton.compile(src, target=SM90, options={**FP_FUSION, **options})


def _gemm_constants(cfg, narrow_n=0, split=False, **extra):
    return dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, NARROW_N=narrow_n, EVEN_M=True,
                EVEN_N=True, EVEN_NARROW_N=narrow_n > 0, EVEN_K=True, INPUT_PRECISION="ieee", UPCAST=False,
                SPLIT=split, PART_STRIDE=cfg.block_m * cfg.block_n if split else 0, **extra)


SPLIT_POINTERS = {"split_ptr": "*i32", "part_ptr": "*fp32", "split_count_ptr": "*i32"}
"""The split table, fp32 partials and per-tile arrival counters of a launch with K-split edge tiles."""


@pytest.mark.parametrize("dtype,cfg", [("bf16", BF16_CONFIGS[0]), ("fp32", FP32_CONFIGS[0])])
def test_consumer_compiles_pipelined_with_acquire_polls(dtype, cfg):
    pointers = {f"{x}_ptr": f"*{dtype}" for x in "abc"} | {"table_ptr": "*i32", "flags_ptr": "*i32", "err_ptr": "*i32"}
    kernel = _compile(consumer_gemm_kernel, pointers, _gemm_constants(cfg, WAIT=True),
                      num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    ptx = kernel.asm["ptx"]
    assert re.search(r"(ld|atom)\.global\.(sys\.acquire|acquire\.sys)", ptx), "chunk flags: acquire at system scope"
    assert "cp.async" in ptx, "the K loop must be software-pipelined (async copies)"
    assert kernel.metadata.shared <= 227 * 1024


def test_producer_compiles_with_release_flag():
    cfg = BF16_CONFIGS[0]
    pointers = {f"{x}_ptr": "*bf16" for x in "abc"} | {"table_ptr": "*i32", "counters_ptr": "*i32", "flags_ptr": "*i32"}
    kernel = _compile(producer_gemm_kernel, pointers, _gemm_constants(cfg, SIGNAL=True),
                      num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    ptx = kernel.asm["ptx"]
    assert re.search(r"atom\.global\.(gpu\.acq_rel|acq_rel\.gpu)\.add", ptx), "group counter: acq_rel at gpu scope"
    assert re.search(r"atom\.global\.(sys\.release|release\.sys)\.exch", ptx), "group flag: release at system scope"
    assert kernel.metadata.shared <= 227 * 1024


def _gemm_kernel(kind: str, active: bool):
    """(kernel, bf16 pointer signature, its WAIT/SIGNAL constexpr) of the producer or consumer."""
    pointers = {f"{x}_ptr": "*bf16" for x in "abc"} | {"table_ptr": "*i32", "flags_ptr": "*i32"}
    if kind == "producer":
        return producer_gemm_kernel, pointers | {"counters_ptr": "*i32"}, dict(SIGNAL=active)
    return consumer_gemm_kernel, pointers | {"err_ptr": "*i32"}, dict(WAIT=active)


@pytest.mark.parametrize("kind", ["producer", "consumer"])
def test_narrow_edge_tiles_share_shared_memory(kind):
    """A kernel with narrow edge tiles has two pipelined K loops; they must reuse one
    shared-memory allocation (the wide loop's), or the launch would not fit an SM."""
    cfg = BF16_CONFIGS[1]
    kernel_fn, pointers, extra = _gemm_kernel(kind, True)
    plain = _compile(kernel_fn, pointers, _gemm_constants(cfg, **extra), num_warps=cfg.num_warps,
                     num_stages=cfg.num_stages)
    edged = _compile(kernel_fn, pointers, _gemm_constants(cfg, narrow_n=cfg.narrow_n, **extra),
                     num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    assert edged.metadata.shared == plain.metadata.shared <= 227 * 1024
    assert edged.asm["ptx"].count("wgmma.mma_async") > plain.asm["ptx"].count("wgmma.mma_async"), \
        "the narrow tiles get their own tensor-core loop"


def test_static_gemm_tiles_take_no_atomics():
    """The tile-fused GEMMs walk their table with a fixed stride: without waits or signals the
    compiled kernel has no atomics at all."""
    cfg = BF16_CONFIGS[0]
    for kind in ("producer", "consumer"):
        kernel_fn, pointers, extra = _gemm_kernel(kind, False)
        ptx = _compile(kernel_fn, pointers, _gemm_constants(cfg, **extra), num_warps=cfg.num_warps,
                       num_stages=cfg.num_stages).asm["ptx"]
        assert not re.search(r"atom\.global", ptx), f"{kind}: static tiles, no atomics without waits or signals"


PEER_READ_POINTERS = ({f"{x}_ptr": "*bf16" for x in ("local", "stage", "b", "c")} | {f"r{i}": "*bf16" for i in range(8)}
                      | {f"{x}_ptr": "*i32" for x in ("table", "peer_flags", "row_flags", "err", "ticket")})


def test_peer_read_dynamic_tiles_take_tickets():
    """The peer-read GEMM's DYNAMIC=True: tiles come from a relaxed gpu-scope ticket counter that
    the last program resets (an exchange); with DYNAMIC=False there are no ticket atomics."""
    from hocket.kernels.peer_read_gemm import peer_read_gemm_kernel

    constants = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, EVEN_M=True, EVEN_N=True, EVEN_K=True, STAGE_K=128,
                     EVEN_STAGE_K=True, INPUT_PRECISION="ieee", UPCAST=False)
    ptx = {dyn: _compile(peer_read_gemm_kernel, PEER_READ_POINTERS, dict(constants, DYNAMIC=dyn), num_warps=8,
                         num_stages=3).asm["ptx"] for dyn in (False, True)}
    relaxed_adds = r"atom\.global(\.relaxed)?(\.gpu)?(\.relaxed)?\.add"
    assert not re.findall(relaxed_adds, ptx[False]), "fixed-stride tiles: no ticket atomics"
    assert len(re.findall(relaxed_adds, ptx[True])) >= 2, "a ticket for the first tile and one per next tile"
    exchanges = r"atom\.global\.[a-z.]*exch"
    assert len(re.findall(exchanges, ptx[True])) > len(re.findall(exchanges, ptx[False])), \
        "the last program resets the counter"


def test_flag_kernels_compile():
    wait = _compile(wait_flag_kernel, {"flags_ptr": "*i32", "err_ptr": "*i32"}, {"ERR_SLOT": 1}, num_warps=1)
    assert re.search(r"(ld|atom)\.global\.(sys\.acquire|acquire\.sys)", wait.asm["ptx"])
    setter = _compile(set_flag_kernel, {"flags_ptr": "*i32"}, {}, num_warps=1)
    assert re.search(r"atom\.global\.(sys\.release|release\.sys)\.exch", setter.asm["ptx"])


@pytest.mark.parametrize("kind", ["consumer", "producer"])
def test_operators_wide_config_fits_with_half_width_narrow_tiles(kind):
    """config_for's 128x256x64/s4 config with 128-wide narrow tiles compiles for sm_90 within
    shared memory (the narrow tiles share the wide loop's buffers)."""
    from hocket.kernels.config import WIDE_BF16, config_for

    cfg = config_for(8192, 1280, 8192, "bfloat16")
    assert cfg == WIDE_BF16
    pointers = {f"{x}_ptr": "*bf16" for x in "abc"} | {"table_ptr": "*i32", "flags_ptr": "*i32"}
    if kind == "consumer":
        kernel_fn, extra = consumer_gemm_kernel, dict(WAIT=True)
        pointers["err_ptr"] = "*i32"
    else:
        kernel_fn, extra = producer_gemm_kernel, dict(SIGNAL=True)
        pointers["counters_ptr"] = "*i32"
    kernel = _compile(kernel_fn, pointers, _gemm_constants(cfg, narrow_n=cfg.narrow_n, **extra),
                      num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    assert "cp.async" in kernel.asm["ptx"]
    assert kernel.metadata.shared <= 227 * 1024


@pytest.mark.parametrize("kind", ["consumer", "producer"])
def test_descriptor_loads_compile_to_tma_with_a_proxy_fence_after_waits(kind):
    """``TileConfig(tma=True)``: operand tiles come through tensor descriptors (bulk tensor
    copies, Hopper's TMA), narrow tiles through their own descriptor; the consumer fences the
    async proxy after its flag waits so the loads see the landed chunk."""
    from hocket.kernels.config import TileConfig

    cfg = TileConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4, tma=True)
    kernel_fn, pointers, extra = _gemm_kernel(kind, True)
    pointers = pointers | {"a_desc": "tensordesc<bf16[128,64]>", "b_desc": "tensordesc<bf16[64,256]>",
                           "b_narrow_desc": "tensordesc<bf16[64,64]>"}
    if kind == "consumer":
        extra = dict(extra, PROXY_FENCE=True)
    kernel = _compile(kernel_fn, pointers, _gemm_constants(cfg, narrow_n=64, TMA=True, **extra),
                      num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    ptx = kernel.asm["ptx"]
    assert "cp.async.bulk.tensor" in ptx, "descriptor loads must lower to TMA"
    assert ("fence.proxy.async.global" in ptx) == (kind == "consumer")
    assert ptx.count("wgmma.mma_async") >= 2, "wide and narrow tiles each get a tensor-core loop"
    assert kernel.metadata.shared <= 227 * 1024


def _stack_bytes(kernel) -> int | None:
    """Per-thread stack (register spills) of a compiled kernel, read from its cubin with the
    ``cuobjdump`` that Triton ships (None where it does not). A first version of the split
    kernels held the partials' sum beside the accumulator: 255 registers and 184 bytes of
    spills, which made every tile of the launch slower (h200 run34)."""
    import subprocess
    import tempfile
    from pathlib import Path

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.exists():
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        usage = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"STACK:(\d+)", usage)
    return int(found.group(1)) if found else None


@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize("kind", ["consumer", "producer"])
def test_split_edge_tiles_compile_with_partials_past_l1(kind, tma):
    """SPLIT=True: an entry may be one K slice of its tile. Each slice stores an fp32 partial and
    bumps the tile's counter (acq_rel, gpu scope); the last slice loads the others' partials
    with ``.cg`` (L2, never a stale L1 line) and zeroes the counter (an exchange). The
    unsplit kernel has none of this, and both fit in shared memory."""
    from hocket.kernels.config import TileConfig

    cfg = TileConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4, tma=tma)
    kernel_fn, pointers, extra = _gemm_kernel(kind, True)
    pointers = pointers | SPLIT_POINTERS
    if tma:
        pointers |= {"a_desc": "tensordesc<bf16[128,64]>", "b_desc": "tensordesc<bf16[64,256]>",
                     "b_narrow_desc": "tensordesc<bf16[64,128]>"}
        extra = dict(extra, TMA=True, **({"PROXY_FENCE": True} if kind == "consumer" else {}))
    ptx = {}
    for split in (False, True):
        kernel = _compile(kernel_fn, pointers, _gemm_constants(cfg, narrow_n=128, split=split, **extra),
                          num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        assert kernel.metadata.shared <= 227 * 1024
        assert _stack_bytes(kernel) in (0, None), "registers spilled: the K loop of every tile would pay for it"
        ptx[split] = kernel.asm["ptx"]
    assert re.search(r"ld\.global\.cg", ptx[True]), "partials are read from L2"
    assert not re.search(r"ld\.global\.cg", ptx[False])
    counter_adds = len(re.findall(r"atom\.global\.(gpu\.acq_rel|acq_rel\.gpu)\.add", ptx[True]))
    assert counter_adds >= len(re.findall(r"atom\.global\.(gpu\.acq_rel|acq_rel\.gpu)\.add", ptx[False])) + 1
    assert re.search(r"atom\.global\.[a-z.]*exch", ptx[True]), "the last slice resets its tile's counter"
    assert ptx[True].count("wgmma.mma_async") >= ptx[False].count("wgmma.mma_async")

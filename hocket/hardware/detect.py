"""probe(): describe this machine as a ClusterSpec (never fails on a CPU-only host).

GPUs come from ``torch.cuda`` (names, SM counts, memory); the link topology from
``nvidia-smi topo -m`` when present, else from NVML (``pynvml``, when importable), else
from the catalogue node that holds the same device, else a PCIe tree. Known GPU names
map to the catalogue's DeviceSpecs (``probe_names`` in devices.yaml); unknown ones get a
DeviceSpec whose peaks are unknown.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, replace

from hocket.hardware.catalog import builtin_catalog
from hocket.hardware.spec import ClusterSpec, DeviceSpec, IslandSpec, LinkSpec, NodeGroup, NodeSpec, PairOverride

ALL_TRANSPORTS = frozenset({"collective", "p2p", "copy_engine", "peer_read", "host_staged"})
NO_PEER_TRANSPORTS = frozenset({"collective", "host_staged"})
NVLINK_GBPS_PER_LINK = 25.0
"""NVLink 2, 3 and 4 each move 25 GB/s per direction per link (NVIDIA V100/A100/H100 whitepapers)."""
MAX_DEFAULT_CPU_RANKS = 8
TOOL_TIMEOUT_S = 20.0


@dataclass(frozen=True, kw_only=True)
class HostInfo:
    cpu_cores: int
    memory_gib: float | None


def host_info() -> HostInfo:
    """Usable CPU cores (affinity-aware) and physical memory of this host."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not every platform has sched_getaffinity
        cores = os.cpu_count() or 1
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory = None
    return HostInfo(cpu_cores=max(1, cores), memory_gib=memory)


def probe(*, cpu_ranks: int | None = None) -> ClusterSpec:
    """This machine as a one-node ClusterSpec.

    Without GPUs the ranks are CPU processes: ``cpu_ranks`` of them (default: one per
    usable core, at most 8).
    """
    host = host_info()
    gpus = _torch_gpus()
    if not gpus:
        return _cpu_cluster(host, cpu_ranks)
    return _gpu_cluster(host, gpus)


def _cpu_cluster(host: HostInfo, cpu_ranks: int | None) -> ClusterSpec:
    if cpu_ranks is None:
        cpu_ranks = min(host.cpu_cores, MAX_DEFAULT_CPU_RANKS)
    if isinstance(cpu_ranks, bool) or not isinstance(cpu_ranks, int) or cpu_ranks < 1:
        raise ValueError(f"cpu_ranks={cpu_ranks!r} must be an int >= 1 (CPU processes used as ranks)")
    template = builtin_catalog().nodes["cpu-host"]
    island = replace(template.islands[0], count=cpu_ranks)
    node = replace(template, name="probed-cpu-host", islands=(island,), cpu_cores=host.cpu_cores,
                   host_memory_gib=host.memory_gib)
    return ClusterSpec(name="probed", groups=(NodeGroup(node=node, count=1),),
                       description=f"this host: {host.cpu_cores} cores, CPU ranks over gloo")


@dataclass(frozen=True, kw_only=True)
class _Gpu:
    index: int
    name: str
    sm_count: int
    memory_gib: float
    vendor: str


def _torch_gpus() -> list[_Gpu]:
    import torch

    if not torch.cuda.is_available():
        return []
    vendor = "amd" if getattr(torch.version, "hip", None) else "nvidia"
    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        gpus.append(_Gpu(index=i, name=props.name, sm_count=props.multi_processor_count,
                         memory_gib=props.total_memory / 2**30, vendor=vendor))
    return gpus


def match_device(name: str) -> tuple[str | None, DeviceSpec | None]:
    """The catalogue key and DeviceSpec whose ``probe_names`` match a GPU name, if any."""
    catalog = builtin_catalog()
    for key, patterns in catalog.probe_names.items():
        if any(re.search(p, name, flags=re.IGNORECASE) for p in patterns):
            return key, catalog.devices[key]
    return None, None


def _device_spec(gpu: _Gpu) -> tuple[str | None, DeviceSpec]:
    key, known = match_device(gpu.name)
    if known is not None:
        return key, replace(known, sm_count=gpu.sm_count, memory_gib=round(gpu.memory_gib, 1))
    return None, DeviceSpec(vendor=gpu.vendor, model=gpu.name, peak_tflops={}, memory_gib=round(gpu.memory_gib, 1),
                            memory_gbps=None, sm_count=gpu.sm_count)


def _catalog_node_for(device_key: str | None) -> NodeSpec | None:
    if device_key is None:
        return None
    for node in builtin_catalog().nodes.values():
        if len(node.islands) == 1 and node.islands[0].device.model == builtin_catalog().devices[device_key].model:
            return node
    return None


def _gpu_cluster(host: HostInfo, gpus: list[_Gpu]) -> ClusterSpec:
    specs = [_device_spec(g) for g in gpus]
    key, device = specs[0]
    if any(s[1].model != device.model for s in specs):
        # several models in one host: one island per model run, joined through host memory
        return _mixed_gpu_cluster(host, specs)
    preset_node = _catalog_node_for(key)
    links = nvidia_topology(len(gpus)) if gpus[0].vendor == "nvidia" else None
    peer = _peer_access(len(gpus))
    generic_pcie = builtin_catalog().links["pcie4-x16"]
    host_link = preset_node.host_link if preset_node else builtin_catalog().links["host-pcie4"]
    fabric, link, transports, overrides = "pcie", generic_pcie, ALL_TRANSPORTS if peer else NO_PEER_TRANSPORTS, ()
    if links is not None and len(gpus) > 1:
        nv_counts = {links[a][b] for a in range(len(gpus)) for b in range(len(gpus)) if a != b}
        if len(nv_counts) == 1 and next(iter(nv_counts)) > 0:
            fabric, transports = "switch", ALL_TRANSPORTS
            link = _nvlink(next(iter(nv_counts)), preset_node)
        else:
            overrides = tuple(PairOverride(a=a, b=b, link=_nvlink(links[a][b], None), transports=ALL_TRANSPORTS)
                              for a in range(len(gpus)) for b in range(a + 1, len(gpus)) if links[a][b] > 0)
    elif preset_node is not None and peer:
        fabric, link, transports = (preset_node.islands[0].fabric, preset_node.islands[0].link,
                                    preset_node.islands[0].transports)
    island = IslandSpec(device=device, count=len(gpus), fabric=fabric, link=link, transports=transports)
    node = NodeSpec(name="probed-node", islands=(island,), host_link=host_link, overrides=overrides,
                    cpu_cores=host.cpu_cores, host_memory_gib=host.memory_gib)
    return ClusterSpec(name="probed", groups=(NodeGroup(node=node, count=1),),
                       description=f"this host: {len(gpus)}x {device.model}, fabric {fabric}")


def _mixed_gpu_cluster(host: HostInfo, specs: list[tuple[str | None, DeviceSpec]]) -> ClusterSpec:
    islands: list[IslandSpec] = []
    pcie = builtin_catalog().links["pcie4-x16"]
    for _, device in specs:
        if islands and islands[-1].device == device:
            islands[-1] = replace(islands[-1], count=islands[-1].count + 1)
        else:
            islands.append(IslandSpec(device=device, count=1, fabric="pcie", link=pcie,
                                      transports=NO_PEER_TRANSPORTS))
    host_link = builtin_catalog().links["host-pcie4"]
    node = NodeSpec(name="probed-node", islands=tuple(islands), host_link=host_link, bridge=host_link,
                    cpu_cores=host.cpu_cores, host_memory_gib=host.memory_gib)
    return ClusterSpec(name="probed", groups=(NodeGroup(node=node, count=1),), description="this host: mixed GPUs")


def _nvlink(count: int, preset_node: NodeSpec | None) -> LinkSpec:
    """NVLink of ``count`` links; the preset's figure when the preset's link matches."""
    generic = LinkSpec(kind="nvlink", gbps_per_direction=count * NVLINK_GBPS_PER_LINK, latency_us=3.0,
                       name=f"nvlink-x{count}")
    if preset_node is not None and preset_node.islands[0].link.kind == "nvlink":
        return preset_node.islands[0].link
    return generic


def _peer_access(n: int) -> bool:
    if n < 2:
        return True
    import torch

    return all(torch.cuda.can_device_access_peer(a, b) for a in range(n) for b in range(n) if a != b)


def parse_topo_matrix(text: str, n: int) -> list[list[int]] | None:
    """NVLink counts per GPU pair from ``nvidia-smi topo -m`` output (0 = no NVLink)."""
    rows = [line.split() for line in text.splitlines() if re.match(r"^GPU\d+\s", line)]
    if len(rows) < n:
        return None
    matrix = [[0] * n for _ in range(n)]
    for a, row in enumerate(rows[:n]):
        cells = row[1:1 + n]
        if len(cells) < n:
            return None
        for b, cell in enumerate(cells):
            found = re.fullmatch(r"NV(\d+)", cell)
            matrix[a][b] = int(found.group(1)) if found else 0
    return matrix


def nvidia_topology(n: int) -> list[list[int]] | None:
    """NVLink counts per GPU pair through nvidia-smi, else NVML; None when neither is present."""
    tool = shutil.which("nvidia-smi")
    if tool is not None:
        try:
            out = subprocess.run([tool, "topo", "-m"], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            out = None
        if out is not None and out.returncode == 0:
            parsed = parse_topo_matrix(out.stdout, n)
            if parsed is not None:
                return parsed
    return _nvml_topology(n)


def _nvml_topology(n: int) -> list[list[int]] | None:
    """Active NVLink counts through NVML; a GPU with links is taken to reach every other GPU
    through NVSwitch (NVML's remote-device query is left for a later change)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        counts = []
        for i in range(n):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            active = 0
            for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    active += int(pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED)
                except pynvml.NVMLError:
                    break
            counts.append(active)
    finally:
        pynvml.nvmlShutdown()
    return [[0 if a == b else min(counts[a], counts[b]) for b in range(n)] for a in range(n)]


def driver_version() -> str | None:
    """The GPU driver version (nvidia-smi or NVML), or None without one."""
    tool = shutil.which("nvidia-smi")
    if tool is not None:
        try:
            out = subprocess.run([tool, "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            out = None
        if out is not None and out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0].strip()
    return None

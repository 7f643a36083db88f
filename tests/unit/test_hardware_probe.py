"""probe() works on this machine; fingerprints are stable and see what they should."""

from __future__ import annotations

import pytest

from hocket.hardware import fingerprint, fingerprint_hash, load_preset, probe
from hocket.hardware.detect import host_info, match_device, parse_topo_matrix

TOPO_NVSWITCH = """\
\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNV18\tNV18\t0-47\t0
GPU1\tNV18\t X \tNV18\t0-47\t0
GPU2\tNV18\tNV18\t X \t0-47\t0

Legend:
  X    = Self
"""
TOPO_PCIE = """\
        GPU0    GPU1    CPU Affinity
GPU0     X      PHB     0-15
GPU1    PHB      X      0-15
"""


def test_probe_describes_this_host():
    cluster = probe()
    host = host_info()
    assert cluster.world_size >= 1 and cluster.num_nodes == 1
    node = cluster.node(0)
    assert node.cpu_cores == host.cpu_cores
    if cluster.device(0).is_cpu:
        assert cluster.world_size == min(host.cpu_cores, 8)
        assert probe(cpu_ranks=3).world_size == 3
        assert cluster.world_size == 1 or cluster.transports(0, cluster.world_size - 1) == {"collective", "p2p"}


def test_probe_rejects_bad_cpu_ranks():
    if not probe().device(0).is_cpu:
        pytest.skip("GPU host: cpu_ranks does not apply")
    with pytest.raises(ValueError, match="cpu_ranks=0"):
        probe(cpu_ranks=0)


def test_topology_parser_reads_nvlink_counts():
    assert parse_topo_matrix(TOPO_NVSWITCH, 3) == [[0, 18, 18], [18, 0, 18], [18, 18, 0]]
    assert parse_topo_matrix(TOPO_PCIE, 2) == [[0, 0], [0, 0]]
    assert parse_topo_matrix(TOPO_PCIE, 4) is None


@pytest.mark.parametrize("name,model", [("NVIDIA H200", "H200 SXM"), ("NVIDIA H100 80GB HBM3", "H100 SXM"),
                                        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
                                        ("AMD Instinct MI300X", "Instinct MI300X"), ("NVIDIA L20", "L20")])
def test_known_gpu_names_map_to_catalogue_devices(name, model):
    assert match_device(name)[1].model == model


def test_unknown_gpu_name_maps_to_nothing():
    assert match_device("NVIDIA H100 PCIe") == (None, None)
    assert match_device("Imaginary Accelerator 9000") == (None, None)


def test_fingerprint_is_stable_and_hash_matches_content():
    first, second = fingerprint(), fingerprint()
    assert first == second
    assert first["hash"] == fingerprint_hash(first) and len(first["hash"]) == 16
    assert first["versions"]["torch"]


def test_fingerprint_changes_with_transport_env_and_hardware(monkeypatch):
    monkeypatch.delenv("NCCL_P2P_DISABLE", raising=False)
    base_fp = fingerprint(load_preset("h100x8"))
    base = base_fp["hash"]
    assert fingerprint(load_preset("h800x8"))["hash"] != base
    assert fingerprint(load_preset("h100-ib-2node"))["hash"] != base
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    changed = fingerprint(load_preset("h100x8"))
    assert changed["env"] == {**base_fp["env"], "NCCL_P2P_DISABLE": "1"} and changed["hash"] != base
    monkeypatch.delenv("NCCL_P2P_DISABLE")
    monkeypatch.setenv("HOCKET_DISABLE", "1")  # not transport-affecting
    assert fingerprint(load_preset("h100x8"))["hash"] == base


def _fake_gpus(monkeypatch, name: str, count: int, *, nvlinks: int, peer: bool) -> None:
    from hocket.hardware import detect as probe_module

    gpus = [probe_module._Gpu(index=i, name=name, sm_count=132, memory_gib=139.8, vendor="nvidia")
            for i in range(count)]
    matrix = [[0 if a == b else nvlinks for b in range(count)] for a in range(count)]
    monkeypatch.setattr(probe_module, "_torch_gpus", lambda: gpus)
    monkeypatch.setattr(probe_module, "nvidia_topology", lambda n: matrix)
    monkeypatch.setattr(probe_module, "_peer_access", lambda n: peer)


def test_probe_of_an_nvswitch_h200_pair_matches_the_preset_fingerprint(monkeypatch):
    _fake_gpus(monkeypatch, "NVIDIA H200", 2, nvlinks=18, peer=True)
    cluster = probe()
    assert cluster.device(0).model == "H200 SXM" and cluster.device(0).memory_gib == 139.8
    assert cluster.link(0, 1).kind == "nvlink" and cluster.transports(0, 1) == {
        "collective", "p2p", "copy_engine", "peer_read", "host_staged"}
    assert fingerprint(cluster)["hash"] == fingerprint(load_preset("h200x2"))["hash"]


def test_probe_of_pcie_cards_without_peer_access_prunes_transports(monkeypatch):
    _fake_gpus(monkeypatch, "NVIDIA GeForce RTX 4090", 4, nvlinks=0, peer=False)
    cluster = probe()
    assert cluster.link(0, 3).kind == "pcie"
    assert cluster.group_transports(range(4)) == {"collective", "host_staged"}


def test_probe_of_an_unknown_gpu_keeps_its_peaks_unknown(monkeypatch):
    _fake_gpus(monkeypatch, "Imaginary Accelerator 9000", 2, nvlinks=4, peer=True)
    cluster = probe()
    device = cluster.device(1)
    assert device.model == "Imaginary Accelerator 9000" and device.peak("bfloat16") is None
    assert device.sm_count == 132 and cluster.link(0, 1).gbps_per_direction == 4 * 25

"""Mixed-device presets: one PCIe host of 4 A100 and 4 H100 (a TP group that mixes them), beside
mixed-a100-h100 (one device type per node) and mixed-nvidia-amd (two vendors joined by host memory), and the
shard sizes hocket.plan.shards recommends on each."""

from __future__ import annotations

from hocket.core.site import Site
from hocket.cost.compute import achievable_tflops
from hocket.hardware import load_preset
from hocket.plan.shards import recommend_shards


def test_the_pcie_host_mixes_a100_and_h100_in_one_group():
    cluster = load_preset("mixed-a100-h100-pcie")
    assert cluster.world_size == 8 and cluster.num_nodes == 1
    assert cluster.device_counts() == {"A100 PCIe": 4, "H100 PCIe": 4}
    assert achievable_tflops(cluster.device(4), "bfloat16") > 2 * achievable_tflops(cluster.device(0), "bfloat16")
    # within one device type: peer to peer over PCIe; across the two: NCCL and the host relay only
    assert {"p2p", "copy_engine"} <= cluster.group_transports(range(4))
    assert {"p2p", "copy_engine"} <= cluster.group_transports(range(4, 8))
    assert cluster.group_transports(range(8)) == {"collective", "host_staged"}
    assert cluster.link(0, 4).kind == "host"


def test_one_type_per_node_keeps_tp_groups_homogeneous():
    cluster = load_preset("mixed-a100-h100")
    for first in (0, 16):
        rec = recommend_shards(Site(kind="mm_rs", m=4096, k=3584, n=8192, world=8,
                                    ranks=tuple(range(first, first + 8))), cluster)
        assert not rec.uneven and len({t.device for t in rec.ranks[0]}) == 1


def test_a_group_without_peer_paths_plans_uneven_shards_over_host_staged():
    cluster = load_preset("mixed-nvidia-amd")
    assert cluster.group_transports(range(8)) == {"host_staged"}
    rec = recommend_shards(Site(kind="ag_mm", m=8192, k=8192, n=3584, world=8, num_b=2, name="mlp.up"), cluster)
    assert rec.transports == ("host_staged",)
    assert all(p.transport == "host_staged" for p in rec.plans + rec.even_plans)
    l20 = {t.size for t in rec.ranks[0] if t.device == "L20"}
    mi210 = {t.size for t in rec.ranks[0] if t.device == "Instinct MI210"}
    assert rec.uneven and max(l20) < min(mi210) and rec.gain > 1.0


def test_the_l20_is_priced_as_a_gpu():
    l20 = load_preset("l20x8").device(0)
    assert l20.sm_count == 92 and not l20.is_cpu

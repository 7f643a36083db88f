"""Presets load and validate; bad YAML gives errors naming the file, the field and the unit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from hocket.core.plan import TRANSPORTS
from hocket.hardware import PresetError, list_presets, load_cluster, load_preset
from hocket.hardware.catalog import CATALOG_FILES, builtin_catalog

REQUIRED = ["h200x1", "h200x2", "h200x8", "h100x8", "h800x8", "a100x8", "a800x8", "l20x8", "rtx4090x8",
            "mi300xx8", "mi250xx8", "h100-ib-2node", "h100-ib-32node", "h100-16k", "mixed-a100-h100",
            "mixed-nvidia-amd", "h100-a100-16k", "cpu-host"]
PRESETS_DIR = Path(__file__).resolve().parents[2] / "hocket" / "hardware" / "presets"


def test_required_presets_are_listed():
    names = list_presets()
    assert set(REQUIRED) <= set(names)
    assert not set(CATALOG_FILES) & set(names)


@pytest.mark.parametrize("name", REQUIRED)
def test_every_preset_loads_and_is_consistent(name):
    cluster = load_preset(name)
    if cluster.num_nodes <= 64:
        assert cluster.world_size == sum(cluster.ranks_per_node(i) for i in range(cluster.num_nodes))
    last = cluster.world_size - 1
    assert cluster.node_of(last) == cluster.num_nodes - 1
    for rank in {0, last}:
        device = cluster.device(rank)
        assert device.vendor and device.model
    if cluster.world_size > 1:
        assert cluster.transports(0, 1) <= set(TRANSPORTS)
        assert cluster.link(0, 1).gbps_per_direction > 0


def test_world_sizes_and_node_counts():
    sizes = {name: (load_preset(name).world_size, load_preset(name).num_nodes) for name in REQUIRED}
    assert sizes["h200x1"] == (1, 1) and sizes["h200x2"] == (2, 1) and sizes["h100x8"] == (8, 1)
    assert sizes["h100-ib-2node"] == (16, 2) and sizes["h100-ib-32node"] == (256, 32)
    assert sizes["h100-16k"] == (16384, 2048) and sizes["h100-a100-16k"] == (16384, 2048)


def test_16k_cluster_is_stored_structurally():
    cluster = load_preset("h100-16k")
    assert len(cluster.groups) == 1
    hetero = load_preset("h100-a100-16k")
    assert len(hetero.groups) == 2
    assert hetero.device(0).model == "H100 SXM" and hetero.device(16383).model == "A100 SXM"
    # across the halves a pair runs at the slower NIC
    assert hetero.link(0, 16383).gbps_per_direction == min(g.node.nic.gbps_per_direction for g in hetero.groups)


def test_peak_rates_are_dense_with_fp32_accumulate():
    devices = builtin_catalog().devices
    assert devices["h100-sxm"].peak("bfloat16") == pytest.approx(989.5, rel=0.01)
    assert devices["h200-sxm"].peak("bfloat16") == devices["h100-sxm"].peak("bfloat16")
    assert devices["h800-sxm"].peak("bfloat16") == devices["h100-sxm"].peak("bfloat16")
    # a GeForce card halves the fp32-accumulate rate compared with its datacenter sibling class
    assert devices["rtx4090"].peak("bfloat16") < devices["l20"].peak("bfloat16") * 1.5
    assert devices["a100-sxm"].peak("float8_e4m3fn") is None  # unsupported/unknown stays unknown
    assert devices["cpu"].peak("float32") is None


def test_every_figure_in_catalogues_has_a_source_comment():
    for name in ("devices", "links"):
        for line in (PRESETS_DIR / f"{name}.yaml").read_text().splitlines():
            figure = re.match(r"\s+(\w+):\s+([0-9.]+)\s*(#.*)?$", line)
            if figure and figure.group(1) not in ("count",):
                assert figure.group(3), f"{name}.yaml: figure without a source comment: {line.strip()}"


def test_h800_and_a800_nvlink_is_slower_than_h100_and_a100():
    assert load_preset("h800x8").link(0, 1).gbps_per_direction < load_preset("h100x8").link(0, 1).gbps_per_direction
    assert load_preset("a800x8").link(0, 1).gbps_per_direction < load_preset("a100x8").link(0, 1).gbps_per_direction


def test_transports_pruned_for_no_p2p_and_cross_vendor_pairs():
    rtx = load_preset("rtx4090x8")
    assert rtx.transports(0, 1) == {"collective", "host_staged"}
    assert rtx.group_transports(range(8)) == {"collective", "host_staged"}
    mixed = load_preset("mixed-nvidia-amd")
    vendors = [mixed.device(r).vendor for r in range(mixed.world_size)]
    nv = [r for r, v in enumerate(vendors) if v == "nvidia"]
    amd = [r for r, v in enumerate(vendors) if v == "amd"]
    assert nv and amd
    assert mixed.transports(nv[0], amd[0]) == {"host_staged"}
    assert "copy_engine" in mixed.transports(nv[0], nv[1])
    assert mixed.group_transports(range(mixed.world_size)) == {"host_staged"}
    assert load_preset("h100x8").transports(0, 7) == set(TRANSPORTS) - {"triggered"}  # hypothetical: never offered
    cpu = load_preset("cpu-host")
    assert cpu.transports(0, 1) == {"collective", "p2p"}
    two = load_preset("h100-ib-2node")
    assert "copy_engine" not in two.transports(0, 8) and "collective" in two.transports(0, 8)


def test_mi300x_is_a_mesh_of_pair_links():
    mi = load_preset("mi300xx8")
    assert mi.groups[0].node.islands[0].fabric == "mesh"
    assert mi.link(0, 5).kind == "xgmi"
    assert mi.link(0, 5).gbps_per_direction < load_preset("h100x8").link(0, 5).gbps_per_direction


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match="h100x8") as info:
        load_preset("h900x8")
    assert "cpu-host" in str(info.value)


# -- bad YAML ---------------------------------------------------------------------------
def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "my-cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _custom(link_overrides: dict | None = None, island_overrides: dict | None = None) -> dict:
    link = {"kind": "nvlink", "gbps_per_direction": 100.0, "latency_us": 2.0, **(link_overrides or {})}
    island = {"device": "h100-sxm", "count": 4, "fabric": "switch", "link": "my-link",
              "transports": ["collective", "p2p"], **(island_overrides or {})}
    return {"name": "mine", "links": {"my-link": link},
            "node_types": {"my-node": {"islands": [island], "host_link": "host-pcie5"}},
            "nodes": [{"node": "my-node", "count": 1}]}


def test_custom_cluster_file_loads(tmp_path):
    cluster = load_cluster(_write(tmp_path, _custom()))
    assert cluster.world_size == 4 and cluster.link(0, 3).gbps_per_direction == 100.0


def test_missing_field_names_file_field_and_unit(tmp_path):
    data = _custom()
    del data["links"]["my-link"]["gbps_per_direction"]
    with pytest.raises(PresetError, match=r"my-cluster\.yaml.*links\.my-link\.gbps_per_direction.*missing.*GB/s"):
        load_cluster(_write(tmp_path, data))


@pytest.mark.parametrize("value", [0, -25.0])
def test_zero_or_negative_bandwidth_is_rejected(tmp_path, value):
    with pytest.raises(PresetError, match=r"my-cluster\.yaml.*gbps_per_direction.*must be > 0.*GB/s"):
        load_cluster(_write(tmp_path, _custom(link_overrides={"gbps_per_direction": value})))


def test_zero_devices_is_rejected(tmp_path):
    with pytest.raises(PresetError, match=r"my-cluster\.yaml.*islands\[0\]\.count.*zero devices"):
        load_cluster(_write(tmp_path, _custom(island_overrides={"count": 0})))
    data = _custom()
    data["nodes"] = []
    with pytest.raises(PresetError, match=r"my-cluster\.yaml.*nodes.*zero devices"):
        load_cluster(_write(tmp_path, data))


def test_unknown_device_reference_lists_known_devices(tmp_path):
    with pytest.raises(PresetError, match=r"islands\[0\]\.device.*'h900'.*unknown device.*h100-sxm"):
        load_cluster(_write(tmp_path, _custom(island_overrides={"device": "h900"})))


def test_unknown_transport_and_field_are_rejected(tmp_path):
    with pytest.raises(PresetError, match="unknown transports"):
        load_cluster(_write(tmp_path, _custom(island_overrides={"transports": ["teleport"]})))
    with pytest.raises(PresetError, match="unknown fields.*gbps"):
        load_cluster(_write(tmp_path, _custom(link_overrides={"gbps": 3})))


def test_invalid_yaml_and_unsafe_tags_name_the_file(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(PresetError, match="broken.yaml.*not valid YAML"):
        load_cluster(bad)
    unsafe = tmp_path / "unsafe.yaml"
    unsafe.write_text("name: !!python/object/apply:os.system ['true']\nnodes: []\n")
    with pytest.raises(PresetError, match="unsafe.yaml"):
        load_cluster(unsafe)


def test_world_larger_than_cluster_is_a_clear_error():
    cluster = load_preset("h100x8")
    cluster.check_world(8)
    with pytest.raises(ValueError, match="world=16 is larger than cluster 'h100x8'"):
        cluster.check_world(16)
    with pytest.raises(ValueError, match="rank=8 is outside"):
        cluster.device(8)


# -- published matmul efficiency ----------------------------------------------------------
def _with_device(tmp_path: Path, **fields) -> Path:
    data = _custom(island_overrides={"device": "my-gpu"})
    data["devices"] = {"my-gpu": {"vendor": "nvidia", "model": "My GPU", "peak_tflops": {"bfloat16": 500.0},
                                  "memory_gib": 80, "memory_gbps": 3000, "sm_count": 100, "copy_engines": None,
                                  "power_limit_w": 500, **fields}}
    return _write(tmp_path, data)


def test_matmul_efficiency_is_optional_and_unknown_when_absent(tmp_path):
    assert load_cluster(_with_device(tmp_path)).device(0).matmul_efficiency is None
    assert load_cluster(_with_device(tmp_path, matmul_efficiency=0.6)).device(0).matmul_efficiency == 0.6


@pytest.mark.parametrize("value", [1.2, 80])
def test_matmul_efficiency_above_one_names_the_field_and_the_fix(tmp_path, value):
    with pytest.raises(PresetError, match=r"my-cluster\.yaml.*devices\.my-gpu\.matmul_efficiency.*\(0, 1\].*0\.80"):
        load_cluster(_with_device(tmp_path, matmul_efficiency=value))


def test_matmul_efficiency_zero_is_rejected(tmp_path):
    with pytest.raises(PresetError, match=r"matmul_efficiency.*must be > 0.*fraction"):
        load_cluster(_with_device(tmp_path, matmul_efficiency=0))


def test_published_matmul_efficiencies_rank_the_vendors():
    eff = {name: load_cluster(name).device(0).matmul_efficiency for name in ("h100x8", "a100x8", "mi300xx8")}
    assert eff["mi300xx8"] < eff["h100x8"] < eff["a100x8"] <= 1.0

"""Validation of hardware YAML: every error names the file, the field and its unit."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hocket.core.files import ConfigFileError, load_yaml_file
from hocket.core.plan import TRANSPORTS
from hocket.core.site import DTYPE_BYTES
from hocket.hardware.spec import FABRICS, LINK_KINDS, DeviceSpec, IslandSpec, LinkSpec, NodeSpec, PairOverride

DEVICE_FIELDS = {"vendor": "text", "model": "text", "probe_names": "list of regular expressions",
                 "peak_tflops": "TFLOP/s per dtype, dense, fp32 accumulate", "memory_gib": "GiB",
                 "memory_gbps": "GB/s", "sm_count": "SMs/CUs", "copy_engines": "count", "power_limit_w": "W",
                 "matmul_efficiency": "fraction of the dense peak, (0, 1]; optional"}
LINK_FIELDS = {"kind": f"one of {LINK_KINDS}", "gbps_per_direction": "GB/s per direction",
               "latency_us": "microseconds"}
NODE_FIELDS = {"islands": "list of {device, count, fabric, link, transports}", "host_link": "link key or null",
               "bridge": "link key", "bridge_transports": "list of transports", "nic": "link key",
               "nics": "count", "overrides": "list of {a, b, link, transports}", "cpu_cores": "cores",
               "host_memory_gib": "GiB"}
ISLAND_FIELDS = {"device": "device key", "count": "devices", "fabric": f"one of {FABRICS}", "link": "link key",
                 "transports": f"subset of {TRANSPORTS}"}


class PresetError(ValueError):
    """A hardware YAML problem; the message names the file and the field."""

    def __init__(self, file: str, where: str, problem: str) -> None:
        self.file, self.where = file, where
        location = f"{file}: {where}" if where else file
        super().__init__(f"{location} {problem}")


def read_yaml(path: Path) -> Any:
    """Parse a YAML file with the bounded loader (:mod:`hocket.core.files`: size-limited, no aliases);
    errors name the file."""
    try:
        return load_yaml_file(path, what="hardware YAML file")
    except ConfigFileError as exc:
        raise PresetError(exc.path, "", str(exc)[len(exc.path) + 2:]) from None


_KIND_NAMES = {float: "a number", int: "an integer", str: "a string", list: "a list", dict: "a mapping"}


def take(data: dict, key: str, where: str, file: str, unit: str, *, kind: type = float,
         nullable: bool = False, required: bool = True, positive: bool = True) -> Any:
    """``data[key]`` checked for presence, type and sign; errors name file, field and unit."""
    path = f"{where}.{key}" if where else key
    if key not in data:
        if required:
            raise PresetError(file, path, f"is missing ({unit}); add it" + (", or null when unknown" if nullable else ""))
        return None
    value = data[key]
    if value is None:
        if nullable or not required:
            return None
        raise PresetError(file, path, f"is null but required ({unit})")
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise PresetError(file, path, f"= {value!r} must be {_KIND_NAMES.get(kind, kind.__name__)} ({unit})")
    if positive and kind in (float, int) and value <= 0:
        raise PresetError(file, path, f"= {value!r} must be > 0 ({unit})")
    return value


def _check_fields(data: Any, known: dict, where: str, file: str) -> dict:
    if not isinstance(data, dict):
        raise PresetError(file, where, f"must be a mapping, got {type(data).__name__}")
    unknown = set(data) - set(known)
    if unknown:
        raise PresetError(file, where, f"has unknown fields {sorted(unknown)}; known: {sorted(known)}")
    return data


@dataclass(frozen=True, kw_only=True)
class Catalog:
    """Devices, links and nodes by key, plus each device's probe name patterns."""

    devices: dict[str, DeviceSpec] = field(default_factory=dict)
    links: dict[str, LinkSpec] = field(default_factory=dict)
    nodes: dict[str, NodeSpec] = field(default_factory=dict)
    probe_names: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def _lookup(self, table: dict, what: str, key: Any, file: str, where: str):
        if not isinstance(key, str) or key not in table:
            raise PresetError(file, where, f"= {key!r} is an unknown {what} reference; known {what}s: "
                                           f"{', '.join(sorted(table))}")
        return table[key]

    def device(self, key: Any, *, file: str, where: str) -> DeviceSpec:
        return self._lookup(self.devices, "device", key, file, where)

    def link(self, key: Any, *, file: str, where: str) -> LinkSpec:
        return self._lookup(self.links, "link", key, file, where)

    def node(self, key: Any, *, file: str, where: str) -> NodeSpec:
        return self._lookup(self.nodes, "node", key, file, where)

    @staticmethod
    def transports(value: Any, *, file: str, where: str) -> frozenset[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise PresetError(file, where, f"= {value!r} must be a list of transport names from {TRANSPORTS}")
        unknown = set(value) - set(TRANSPORTS)
        if unknown:
            raise PresetError(file, where, f"has unknown transports {sorted(unknown)}; use a subset of {TRANSPORTS}")
        return frozenset(value)


def build_catalog(sections: dict[str, tuple[Any, str]], *, base: Catalog | None) -> Catalog:
    """Validate ``{"devices"|"links"|"nodes": (mapping, file)}`` on top of ``base``."""
    cat = Catalog(devices=dict(base.devices) if base else {}, links=dict(base.links) if base else {},
                  nodes=dict(base.nodes) if base else {}, probe_names=dict(base.probe_names) if base else {})
    for section in ("devices", "links", "nodes"):
        if section not in sections:
            continue
        body, file = sections[section]
        if not isinstance(body, dict) or not body:
            raise PresetError(file, section, "must be a non-empty mapping of key -> definition")
        for key, data in body.items():
            where = f"{section}.{key}"
            if section == "devices":
                cat.devices[key], cat.probe_names[key] = _device(data, where, file)
            elif section == "links":
                cat.links[key] = _link(data, where, file, name=str(key))
            else:
                cat.nodes[key] = _node(data, where, file, cat, name=str(key))
    return cat


def _device(data: Any, where: str, file: str) -> tuple[DeviceSpec, tuple[str, ...]]:
    data = _check_fields(data, DEVICE_FIELDS, where, file)
    peaks_raw = take(data, "peak_tflops", where, file, DEVICE_FIELDS["peak_tflops"], kind=dict, positive=False)
    peaks = {}
    for dtype, value in peaks_raw.items():
        if dtype not in DTYPE_BYTES:
            raise PresetError(file, f"{where}.peak_tflops.{dtype}",
                              f"is not a dtype name; use one of {sorted(DTYPE_BYTES)}")
        peaks[dtype] = take(peaks_raw, dtype, f"{where}.peak_tflops", file, "TFLOP/s dense", nullable=True)
    probe = data.get("probe_names") or []
    if not isinstance(probe, list) or not all(isinstance(p, str) for p in probe):
        raise PresetError(file, f"{where}.probe_names", f"= {probe!r} must be a list of regular expressions")
    device = DeviceSpec(
        vendor=take(data, "vendor", where, file, "text", kind=str),
        model=take(data, "model", where, file, "text", kind=str),
        peak_tflops=peaks,
        memory_gib=take(data, "memory_gib", where, file, "GiB", nullable=True),
        memory_gbps=take(data, "memory_gbps", where, file, "GB/s", nullable=True),
        sm_count=take(data, "sm_count", where, file, "SMs/CUs", kind=int, nullable=True),
        copy_engines=take(data, "copy_engines", where, file, "count", kind=int, nullable=True),
        power_limit_w=take(data, "power_limit_w", where, file, "W", nullable=True),
        matmul_efficiency=_fraction(data, "matmul_efficiency", where, file),
    )
    return device, tuple(probe)


def _fraction(data: dict, key: str, where: str, file: str) -> float | None:
    """An optional fraction in (0, 1] (absent or null: unknown)."""
    value = take(data, key, where, file, DEVICE_FIELDS[key], nullable=True, required=False)
    if value is not None and value > 1:
        raise PresetError(file, f"{where}.{key}", f"= {value!r} must be a fraction of the dense peak in (0, 1] "
                                                 f"(write 0.80 for 80%)")
    return value


def _link(data: Any, where: str, file: str, *, name: str) -> LinkSpec:
    data = _check_fields(data, LINK_FIELDS, where, file)
    kind = take(data, "kind", where, file, LINK_FIELDS["kind"], kind=str)
    if kind not in LINK_KINDS:
        raise PresetError(file, f"{where}.kind", f"= {kind!r} is unknown; use one of {LINK_KINDS}")
    return LinkSpec(kind=kind, name=name,
                    gbps_per_direction=take(data, "gbps_per_direction", where, file, "GB/s per direction"),
                    latency_us=take(data, "latency_us", where, file, "microseconds"))


def _node(data: Any, where: str, file: str, cat: Catalog, *, name: str) -> NodeSpec:
    data = _check_fields(data, NODE_FIELDS, where, file)
    raw_islands = take(data, "islands", where, file, NODE_FIELDS["islands"], kind=list)
    if not raw_islands:
        raise PresetError(file, f"{where}.islands", "is empty: a node needs at least one device (zero devices)")
    islands = []
    for i, raw in enumerate(raw_islands):
        at = f"{where}.islands[{i}]"
        raw = _check_fields(raw, ISLAND_FIELDS, at, file)
        count = take(raw, "count", at, file, "devices", kind=int, positive=False)
        if count < 1:
            raise PresetError(file, f"{at}.count", f"= {count}: an island needs at least one device (zero devices)")
        fabric = take(raw, "fabric", at, file, ISLAND_FIELDS["fabric"], kind=str)
        if fabric not in FABRICS:
            raise PresetError(file, f"{at}.fabric", f"= {fabric!r} is unknown; use one of {FABRICS}")
        islands.append(IslandSpec(
            device=cat.device(take(raw, "device", at, file, "device key", kind=str), file=file, where=f"{at}.device"),
            count=count, fabric=fabric,
            link=cat.link(take(raw, "link", at, file, "link key", kind=str), file=file, where=f"{at}.link"),
            transports=cat.transports(take(raw, "transports", at, file, "list", kind=list, positive=False),
                                      file=file, where=f"{at}.transports")))
    host = take(data, "host_link", where, file, "link key or null (CPU ranks)", kind=str, nullable=True)
    bridge = data.get("bridge")
    nic = data.get("nic")
    overrides = []
    for i, raw in enumerate(data.get("overrides") or []):
        at = f"{where}.overrides[{i}]"
        raw = _check_fields(raw, {"a": "local rank", "b": "local rank", "link": "link key",
                                  "transports": "list"}, at, file)
        overrides.append(PairOverride(
            a=take(raw, "a", at, file, "local rank", kind=int, positive=False),
            b=take(raw, "b", at, file, "local rank", kind=int, positive=False),
            link=cat.link(raw.get("link"), file=file, where=f"{at}.link"),
            transports=cat.transports(raw.get("transports"), file=file, where=f"{at}.transports")))
    kwargs: dict[str, Any] = {}
    if "bridge_transports" in data:
        kwargs["bridge_transports"] = cat.transports(data["bridge_transports"], file=file,
                                                     where=f"{where}.bridge_transports")
    try:
        return NodeSpec(
            name=name, islands=tuple(islands),
            host_link=cat.link(host, file=file, where=f"{where}.host_link") if host else None,
            bridge=cat.link(bridge, file=file, where=f"{where}.bridge") if bridge is not None else None,
            nic=cat.link(nic, file=file, where=f"{where}.nic") if nic is not None else None,
            nics=take(data, "nics", where, file, "NICs per node", kind=int, required=False, positive=False) or 0,
            overrides=tuple(overrides),
            cpu_cores=take(data, "cpu_cores", where, file, "cores", kind=int, required=False),
            host_memory_gib=take(data, "host_memory_gib", where, file, "GiB", required=False),
            **kwargs)
    except ValueError as exc:
        raise PresetError(file, where, str(exc)) from None

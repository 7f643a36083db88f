"""Cluster presets: YAML files under ``presets/``, read with a safe loader and validated.

``devices.yaml``, ``links.yaml`` and ``nodes.yaml`` are catalogues (each device, link
and node defined once); every other ``presets/<name>.yaml`` is a cluster that refers to
them by key. A cluster file of the user's own (``load_cluster(path)``) may add its own
``devices:``, ``links:`` and ``node_types:`` sections (same format as the catalogues)
beside the built-in ones.

Cluster file::

    name: h100-ib-2node
    nodes:
      - {node: hgx-h100, count: 2}          # optional ranks_per_node: first N local ranks
    network: {topology: rail, transports: [collective, p2p, host_staged]}
    what_if: [triggered]                    # optional: hypothetical transports, for what-if pricing only

``what_if`` declares hypothetical transports (``hocket.hardware.spec.HYPOTHETICAL_TRANSPORTS``) the
cluster's devices are imagined to have; hocket prices them in what-ifs and never runs them.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

from hocket.hardware.spec import HYPOTHETICAL_TRANSPORTS, ClusterSpec, NodeGroup
from hocket.hardware.yaml_schema import Catalog, PresetError, build_catalog, read_yaml, take

CATALOG_FILES = ("devices", "links", "nodes")
CLUSTER_FIELDS = {"name", "description", "nodes", "network", "devices", "links", "node_types", "what_if"}


def _presets_dir() -> Path:
    return Path(str(resources.files("hocket.hardware") / "presets"))


def list_presets() -> list[str]:
    """Names of the built-in cluster presets (``h100x8``, ``cpu-host``, ...)."""
    return sorted(p.stem for p in _presets_dir().glob("*.yaml") if p.stem not in CATALOG_FILES)


@functools.lru_cache(maxsize=1)
def builtin_catalog() -> Catalog:
    """Devices, links and nodes of the built-in catalogue files."""
    folder = _presets_dir()
    sections = {}
    for name in CATALOG_FILES:
        data = read_yaml(folder / f"{name}.yaml")
        if not isinstance(data, dict) or set(data) != {name}:
            raise PresetError(str(folder / f"{name}.yaml"), "", f"must hold one top-level section '{name}:'")
        sections[name] = (data[name], str(folder / f"{name}.yaml"))
    return build_catalog(sections, base=None)


def load_preset(name: str) -> ClusterSpec:
    """The built-in cluster preset ``name``; an unknown name lists the presets."""
    if not isinstance(name, str):
        raise TypeError(f"preset name must be a string, got {type(name).__name__}")
    names = list_presets()
    if name not in names:
        raise ValueError(f"cluster preset {name!r} is unknown; presets: {', '.join(names)} "
                         f"(or give a path to a cluster YAML file)")
    return _load_cluster_file(_presets_dir() / f"{name}.yaml")


def load_cluster(name_or_path: str | Path | ClusterSpec) -> ClusterSpec:
    """A ClusterSpec from a preset name, a YAML path, or a ClusterSpec (returned as is)."""
    if isinstance(name_or_path, ClusterSpec):
        return name_or_path
    if isinstance(name_or_path, Path) or str(name_or_path).endswith((".yaml", ".yml")) or "/" in str(name_or_path):
        path = Path(name_or_path).expanduser()
        if path.is_dir():
            raise ValueError(f"cluster file {str(path)!r} is a directory; give a preset name "
                             f"({', '.join(list_presets())}) or the path of a cluster YAML file")
        if not path.is_file():
            raise ValueError(f"cluster file {str(path)!r} does not exist; give a preset name "
                             f"({', '.join(list_presets())}) or an existing YAML path")
        return _load_cluster_file(path)
    return load_preset(str(name_or_path))


def _load_cluster_file(path: Path) -> ClusterSpec:
    data = read_yaml(path)
    return cluster_from_dict(data, file=str(path))


def cluster_from_dict(data: Any, *, file: str = "<dict>") -> ClusterSpec:
    """Build and validate a ClusterSpec from parsed YAML (errors name ``file`` and the field)."""
    if not isinstance(data, dict):
        raise PresetError(file, "", f"must be a mapping with 'name' and 'nodes', got {type(data).__name__}")
    unknown = set(data) - CLUSTER_FIELDS
    if unknown:
        raise PresetError(file, "", f"unknown fields {sorted(unknown)}; known: {sorted(CLUSTER_FIELDS)}")
    local_sections = {k: (data[k], file) for k in ("devices", "links") if k in data}
    if "node_types" in data:
        local_sections["nodes"] = (data["node_types"], file)
    catalog = builtin_catalog()
    if local_sections:
        catalog = build_catalog(local_sections, base=catalog)
    name = take(data, "name", "", file, "text", kind=str)
    entries = take(data, "nodes", "", file, "list of {node, count}", kind=list)
    if not entries:
        raise PresetError(file, "nodes", "is empty: a cluster needs at least one node entry (zero devices)")
    groups = []
    for i, entry in enumerate(entries):
        where = f"nodes[{i}]"
        if not isinstance(entry, dict):
            raise PresetError(file, where, f"must be a mapping {{node, count}}, got {entry!r}")
        extra = set(entry) - {"node", "count", "ranks_per_node"}
        if extra:
            raise PresetError(file, where, f"unknown fields {sorted(extra)}; known: node, count, ranks_per_node")
        key = take(entry, "node", where, file, "node key from nodes.yaml", kind=str)
        node = catalog.node(key, file=file, where=f"{where}.node")
        count = take(entry, "count", where, file, "nodes", kind=int)
        if count < 1:
            raise PresetError(file, f"{where}.count", f"= {count}: a cluster needs at least one node of each entry")
        ranks = entry.get("ranks_per_node")
        if ranks is not None:
            if isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= node.size:
                raise PresetError(file, f"{where}.ranks_per_node",
                                  f"= {ranks!r} must be an int in 1..{node.size} (devices per node)")
            node = node.restrict(range(ranks))
        groups.append(NodeGroup(node=node, count=count))
    network = data.get("network") or {}
    if not isinstance(network, dict):
        raise PresetError(file, "network", f"must be a mapping {{topology, transports}}, got {network!r}")
    extra = set(network) - {"topology", "transports"}
    if extra:
        raise PresetError(file, "network", f"unknown fields {sorted(extra)}; known: topology, transports")
    kwargs: dict[str, Any] = {}
    if "transports" in network:
        kwargs["network_transports"] = catalog.transports(network["transports"], file=file,
                                                          where="network.transports")
    what_if = data.get("what_if") or []
    if not isinstance(what_if, list) or not all(isinstance(v, str) for v in what_if):
        raise PresetError(file, "what_if", f"= {what_if!r} must be a list of hypothetical transport names from "
                                           f"{HYPOTHETICAL_TRANSPORTS}, e.g. [triggered]")
    unknown = set(what_if) - set(HYPOTHETICAL_TRANSPORTS)
    if unknown:
        raise PresetError(file, "what_if", f"has {sorted(unknown)}, which are not hypothetical transports; use a "
                                           f"subset of {HYPOTHETICAL_TRANSPORTS} (real transports belong in the "
                                           f"node islands and the network)")
    if what_if:
        kwargs["what_if_transports"] = frozenset(what_if)
    topology = network.get("topology", "none")
    if topology not in ("none", "rail", "fat_tree"):
        raise PresetError(file, "network.topology", f"= {topology!r}; use rail, fat_tree or none")
    try:
        return ClusterSpec(name=name, groups=tuple(groups), network_topology=topology,
                           description=str(data.get("description", "")), **kwargs)
    except ValueError as exc:
        raise PresetError(file, "", str(exc)) from None


"""Plan cache: hit, miss, stale environment, corrupt file, atomic concurrent writes."""

from __future__ import annotations

import json
import multiprocessing as mp
import random
import uuid

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.plan.cache import (
    CacheEnvironment,
    PlanCache,
    PlanCacheWarning,
    current_environment,
    parse_cache,
)

ENV = CacheEnvironment(fingerprint="abc123", hocket_version="0.1.0", torch_version="2.13.0")


def _site_key() -> str:
    rng = random.Random()
    return Site(kind="ag_mm", m=8 * rng.randint(1, 4096), k=rng.randint(1, 8192), n=rng.randint(1, 8192),
                world=8).key


def _plan() -> Plan:
    return Plan(strategy="chunked", chunks=random.choice([2, 4, 8, 16]))


def test_miss_then_hit_across_instances(tmp_path):
    path = tmp_path / "plans.json"
    key, plan = _site_key(), _plan()
    cache = PlanCache(ENV, path)
    assert cache.get(key) is None
    cache.put(key, plan, source="autotune", timings_ms={plan.to_json(): 1.5, Plan().to_json(): 2.0})
    fresh = PlanCache(ENV, path)
    entry = fresh.get(key)
    assert entry is not None and entry.plan == plan and entry.source == "autotune"
    assert entry.timings_ms[Plan().to_json()] == 2.0
    data = json.loads(path.read_text())  # plain JSON on disk
    assert data["format"] == "hocket-plan-cache" and len(data["entries"]) == 1


@pytest.mark.parametrize("changed", ["fingerprint", "hocket_version", "torch_version"])
def test_entry_from_another_environment_is_ignored_with_a_warning(tmp_path, changed):
    path = tmp_path / "plans.json"
    key = _site_key()
    PlanCache(ENV, path).put(key, _plan(), source="predicted")
    other = CacheEnvironment(**{**ENV.to_dict(), changed: "other-" + uuid.uuid4().hex[:6]})
    cache = PlanCache(other, path)
    with pytest.warns(PlanCacheWarning, match="another environment"):
        assert cache.get(key) is None
    plan = _plan().with_(order="reverse")
    cache.put(key, plan, source="predicted")  # both environments' entries coexist
    assert PlanCache(other, path).get(key).plan == plan
    assert PlanCache(ENV, path).get(key).plan != plan


@pytest.mark.parametrize("content", [
    "{not json", "[]", '{"format": "something-else"}',
    '{"format": "hocket-plan-cache", "schema": 1, "entries": {"k": {"site_key": "k"}}}',
    '{"format": "hocket-plan-cache", "schema": 1, "entries": []}',
    '{"format": "hocket-plan-cache", "schema": 99, "entries": {}}',
])
def test_corrupt_cache_is_reported_moved_aside_and_rebuilt(tmp_path, content):
    path = tmp_path / "plans.json"
    path.write_text(content)
    cache = PlanCache(ENV, path)
    with pytest.warns(PlanCacheWarning, match="corrupt"):
        assert cache.get(_site_key()) is None
    assert (tmp_path / "plans.json.corrupt").read_text() == content
    key, plan = _site_key(), _plan()
    cache.put(key, plan, source="predicted")
    assert PlanCache(ENV, path).get(key).plan == plan


def test_entry_under_a_wrong_key_is_not_trusted(tmp_path):
    path = tmp_path / "plans.json"
    key = _site_key()
    PlanCache(ENV, path).put(key, _plan(), source="predicted")
    data = json.loads(path.read_text())
    (entry,) = data["entries"].values()
    data["entries"] = {"forged|key": entry}
    path.write_text(json.dumps(data))
    with pytest.warns(PlanCacheWarning, match="wrong key"):
        assert PlanCache(ENV, path).get(key) is None


def _writer(path: str, worker: int, count: int) -> None:
    cache = PlanCache(ENV, path)
    for i in range(count):
        cache.put(f"site-{worker}-{i}", Plan(strategy="chunked", chunks=2 + i), source="predicted")


def test_concurrent_writers_never_tear_or_drop_entries(tmp_path):
    path = tmp_path / "plans.json"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(path), w, 6)) for w in range(4)]
    for p in procs:
        p.start()
    seen_valid = 0
    while any(p.is_alive() for p in procs):
        if path.exists():
            parse_cache(path.read_text())  # a reader never sees a torn file
            seen_valid += 1
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    entries = parse_cache(path.read_text())
    assert sorted(e.site_key for e in entries.values()) == sorted(f"site-{w}-{i}" for w in range(4) for i in range(6))
    assert not list(tmp_path.glob(".plans.json.*.tmp"))


def test_bad_arguments():
    with pytest.raises(TypeError, match="CacheEnvironment"):
        PlanCache({"fingerprint": "x"})
    with pytest.raises(ValueError, match="fingerprint"):
        CacheEnvironment(fingerprint="", hocket_version="1", torch_version="2")
    with pytest.raises(ValueError, match="source"):
        PlanCache(ENV, "/nonexistent/x.json").put("k", Plan(), source="guessed")


def test_current_environment_names_this_process():
    import torch

    from hocket import __version__

    env = current_environment("ffff")
    assert env.torch_version == torch.__version__ and env.hocket_version == __version__
    assert "hw=ffff" in env.token

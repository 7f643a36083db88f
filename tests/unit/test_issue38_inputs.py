"""Issue 38, one process: cache faults degrade, inputs get clear errors, the CLI refuses what the operators reject,
``--list-clusters`` exists, and a successful spawn run exits cleanly."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from hocket.core.plan import Plan, as_plan
from hocket.core.site import Site
from hocket.plan.cache import CacheEnvironment, PlanCache, PlanCacheWarning

ENV = CacheEnvironment(fingerprint="unit", hocket_version="0", torch_version="0")
ROOT = Path(__file__).resolve().parents[2]


def _hocket(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hocket", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, **(env or {})})


# -- the plan cache degrades -------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["below_a_file", "is_a_directory"])
def test_an_unusable_cache_path_warns_once_and_keeps_decisions_in_memory(tmp_path, layout):
    if layout == "below_a_file":
        (tmp_path / "f").write_text("x")
        path = tmp_path / "f" / "sub" / "plans.json"
    else:
        path = tmp_path / "plans.json"
        path.mkdir()
    cache = PlanCache(ENV, path)
    with pytest.warns(PlanCacheWarning, match=rf"plan cache {path} cannot be used: reading it failed"):
        assert cache.get("k") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache.put("k", Plan(strategy="chunked", chunks=2), source="predicted")  # no second warning
        assert cache.get("k").plan == Plan(strategy="chunked", chunks=2)
    assert cache.unusable is not None


def test_a_full_disk_on_write_warns_and_plans_on(tmp_path, monkeypatch):
    cache = PlanCache(ENV, tmp_path / "plans.json")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.warns(PlanCacheWarning, match=r"writing it failed with OSError: No space left on device"):
        entry = cache.put("k", Plan(), source="predicted")
    assert cache.get("k") == entry
    assert not list(tmp_path.glob(".plans.json.*.tmp"))  # no temporary file left behind


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n", b'{"format": "hocket-plan-cache", "schema": 1, "entr',
                                     b'{"format": "other"}', b'[1, 2]'])
def test_a_corrupt_cache_file_is_moved_aside_with_a_warning(tmp_path, content):
    path = tmp_path / "plans.json"
    path.write_bytes(content)
    with pytest.warns(PlanCacheWarning, match=rf"plan cache {path} is corrupt: .*moved it to {path}.corrupt"):
        assert PlanCache(ENV, path).get("k") is None
    assert (tmp_path / "plans.json.corrupt").read_bytes() == content


# -- clear errors --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["[1,2,3]", "3", "null", "true"])
def test_plan_json_that_is_not_an_object_is_refused(text):
    with pytest.raises(ValueError, match=r"is JSON of a \w+, not an object; give a plan as a JSON object"):
        as_plan(text)
    with pytest.raises(ValueError, match=r"not an object"):
        Plan.from_json(text)


def test_a_site_with_a_bad_field_names_it():
    with pytest.raises(ValueError, match=r"Site.m='lots' must be a positive int"):
        Site.from_dict({"kind": "ag_mm", "m": "lots", "k": 4, "n": 4})
    with pytest.raises(ValueError, match=r"Site.ranks=\('a', 'b'\) must be global ranks"):
        Site.from_dict({"kind": "ag_mm", "m": 4, "k": 4, "n": 4, "world": 2, "ranks": ["a", "b"]})
    with pytest.raises(TypeError, match=r"a Site dict was expected, got list"):
        Site.from_dict([1, 2])


def test_plan_file_errors_name_the_file_and_the_field(tmp_path):
    from hocket.sim.plans import load_plan_file, parse_plan_file

    entry = {"name": "qkv", "kind": "ag_mm", "m": "lots", "k": 4, "n": 4, "plan": {"strategy": "chunked"}}
    with pytest.raises(ValueError, match=r"f.json: sites\[0\].m='lots' must be a positive int"):
        parse_plan_file({"sites": [entry]}, source="f.json")
    with pytest.raises(ValueError, match=r"f.json: 'sites' is missing; a plan file holds a list"):
        parse_plan_file({"model": "llama3-70b", "cluster": "h100x8"}, source="f.json")
    (tmp_path / "big.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match=r"big.json: is not UTF-8 text"):
        load_plan_file(tmp_path / "big.json")
    with pytest.raises(ValueError, match=r"is a directory, not a plan file"):
        load_plan_file(tmp_path)


def test_simulate_refuses_a_plan_file_without_sites(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"model": "llama3-70b", "cluster": "h100x8", "parallel": {"tp": 8, "seq": 8192}}))
    done = _hocket("simulate", "--plan", str(path))
    assert done.returncode == 2 and "'sites' is missing" in done.stderr, done.stderr
    path.write_text("[1, 2]")
    done = _hocket("simulate", "--plan", str(path))
    assert done.returncode == 2 and "holds JSON of a list" in done.stderr, done.stderr
    path.write_text(json.dumps({"sites": [{"kind": "ag_mm", "m": "lots", "k": 1, "n": 1, "plan": "{}"}],
                                "model": "llama3-70b", "cluster": "h100x8"}))
    done = _hocket("simulate", "--plan", str(path))
    assert done.returncode == 2 and "sites[0].m='lots' must be a positive int" in done.stderr, done.stderr


def test_predict_plan_file_errors_name_the_file(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("[1,2,3]")
    done = _hocket("predict", "mm_ar", "--m", "64", "--k", "64", "--n", "64", "--world", "8", "--cluster", "h200x8",
                   "--plan", str(path))
    assert done.returncode == 2 and f"{path}: holds JSON of a list" in done.stderr, done.stderr


def test_predict_and_plan_refuse_shapes_the_operators_reject():
    done = _hocket("predict", "mm_rs", "--m", "4097", "--k", "64", "--n", "64", "--world", "8", "--cluster", "h200x8")
    assert done.returncode == 2 and "--m 4097 is not divisible by --world 8" in done.stderr
    assert "use --m 4104" in done.stderr
    done = _hocket("plan", "--model", "llama3-70b", "--cluster", "h100x8", "--tp", "8", "--seq", "1001")
    assert done.returncode == 2 and "--seq 1001 with --batch 1 gives 1001 tokens, not divisible by --tp 8" \
        in done.stderr and "use --seq 1008" in done.stderr


@pytest.mark.parametrize("command", ["predict", "plan", "simulate"])
def test_list_clusters_lists_the_presets(command):
    from hocket.hardware.catalog import list_presets

    done = _hocket(command, "--list-clusters")
    assert done.returncode == 0 and done.stdout.split() == list_presets()
    assert "--list-clusters" in _hocket(command, "--help").stdout


def test_a_directory_as_cluster_is_named():
    done = _hocket("predict", "mm_ar", "--m", "64", "--k", "64", "--n", "64", "--world", "2", "--cluster",
                   str(ROOT / "hocket"))
    assert done.returncode == 2 and "is a directory" in done.stderr, done.stderr


def test_spawn_timeout_settings_are_refused_before_any_rank_starts(monkeypatch):
    from hocket.launch import spawn
    from hocket.launch.validate import check_seconds

    monkeypatch.setenv("HOCKET_TIMEOUT_S", "inf")
    with pytest.raises(ValueError, match=r"HOCKET_TIMEOUT_S='inf' must be a finite number of seconds > 0"):
        spawn(print, world_size=2)
    for value in (float("inf"), float("nan"), 1e300):
        with pytest.raises(ValueError, match=r"timeout_s=.* must be a finite number of seconds > 0"):
            check_seconds("timeout_s", value)


# -- a successful spawn run exits cleanly --------------------------------------------------------------------

SPAWN_JOB = """
import sys
sys.path.insert(0, {here!r})
from _spawn_job import two_ops
from hocket.launch import spawn
if __name__ == "__main__":
    print(spawn(two_ops, world_size=2, timeout_s=90, start_method={method!r}))
"""


@pytest.mark.timeout(600)
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_successful_spawn_run_prints_nothing_on_stderr_at_exit(tmp_path, method):
    here = str(Path(__file__).parent)
    script = tmp_path / "job.py"
    script.write_text(SPAWN_JOB.format(here=here, method=method))
    for _ in range(3 if method == "spawn" else 4):
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, cwd=ROOT,
                              env={**os.environ, "HOCKET_CACHE_DIR": str(tmp_path / "cache")})
        assert done.returncode == 0, done.stderr
        assert "terminate called" not in done.stderr, done.stderr
        assert "[True, True]" in done.stdout

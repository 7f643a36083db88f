"""Provenance: HOCKET_GIT_HASH replaces asking git (device machines carry a stale .git)."""

from __future__ import annotations

import random
import subprocess

import pytest

from hocket.bench import provenance
from hocket.bench.provenance import collect, git_hash
from hocket.env import git_hash_env


def _commit(rng: random.Random) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(40))


def test_flag_is_recorded_and_git_is_not_asked(monkeypatch, tmp_path):
    commit = _commit(random.Random()) + random.choice(["", "+dirty"])
    monkeypatch.setenv("HOCKET_GIT_HASH", f"  {commit}\n")

    def no_git(*args, **kwargs):
        raise AssertionError(f"git was asked although HOCKET_GIT_HASH is set: {args}")

    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    assert git_hash_env() == commit
    assert git_hash() == commit
    assert git_hash(tmp_path) == commit  # not a checkout: the flag still names the commit
    line = collect(command="hocket bench ag_mm", hardware={"devices": {"cpu": random.randint(1, 8)}})
    assert line.git_hash == commit


def test_unset_or_empty_flag_asks_git(monkeypatch, tmp_path):
    monkeypatch.delenv("HOCKET_GIT_HASH", raising=False)
    assert git_hash_env() is None
    assert git_hash(tmp_path) is None  # tmp_path is no git checkout
    monkeypatch.setenv("HOCKET_GIT_HASH", "   ")
    assert git_hash_env() is None
    head = _commit(random.Random())
    calls = []

    def fake_git(cmd, **kwargs):
        calls.append(cmd)
        out = head + "\n" if cmd[1] == "rev-parse" else " M hocket/x.py\n"
        return subprocess.CompletedProcess(cmd, 0, stdout=out, stderr="")

    monkeypatch.setattr(provenance.subprocess, "run", fake_git)
    assert git_hash(tmp_path) == head + "+dirty"
    assert [c[1] for c in calls] == ["rev-parse", "status"]


def test_flag_with_spaces_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setenv("HOCKET_GIT_HASH", f"{_commit(random.Random())} dirty")
    with pytest.raises(ValueError, match="HOCKET_GIT_HASH=.*git rev-parse HEAD"):
        git_hash()

"""hocket.env.overridden: set variables for a block, restore what was there (set or unset), also on errors."""

import os
import uuid

import pytest

from hocket.env import overridden


def test_sets_then_restores_set_and_unset_variables(monkeypatch):
    unset, kept = f"HOCKET_TEST_{uuid.uuid4().hex}", f"HOCKET_TEST_{uuid.uuid4().hex}"
    monkeypatch.setenv(kept, "before")
    with pytest.raises(RuntimeError, match="inside"):
        with overridden({unset: "a", kept: "b"}):
            assert os.environ[unset] == "a" and os.environ[kept] == "b"
            raise RuntimeError("inside")
    assert unset not in os.environ and os.environ[kept] == "before"

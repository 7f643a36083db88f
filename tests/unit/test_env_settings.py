"""hocket.env: the documented user settings are the only HOCKET_* variables hocket knows, each read by one
function with a docstring naming its variable and default, and env.py is the only reader of the
environment."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from hocket import env

HOCKET = Path(env.__file__).parent
NAME = re.compile(r"HOCKET_[A-Z0-9_]*[A-Z0-9]")

REMOVED = ("HOCKET_HOST_STAGE_SIGNAL", "HOCKET_HOST_STAGE_PIPELINE", "HOCKET_HOST_STAGE_THREAD",
           "HOCKET_HOST_STAGE_SLOTS", "HOCKET_HOST_STAGE_PIECE_MB", "HOCKET_SYMM_MAILBOX_MB", "HOCKET_EAGER_GRAPHS_MAX",
           "HOCKET_OWN_BLOCK_ZERO", "HOCKET_PEER_PROTOCOL", "HOCKET_HOST_STAGE_CALLS", "HOCKET_OWN_BLOCK_SUM")
"""variables that were settings and are gone (A/B variants deleted, sizes now arguments, the peer protocol
a Plan field)"""
REMOVED_FUNCTIONS = ("host_stage_signal", "host_stage_pipeline", "host_stage_slots", "HOST_STAGE_SIGNALS",
                     "HOST_STAGE_PIPELINES", "own_block_zero", "OWN_BLOCK_ZERO", "peer_protocol", "PEER_PROTOCOLS",
                     "host_stage_calls", "HOST_STAGE_CALLS", "own_block_sum", "OWN_BLOCK_SUMS", "host_stage_piece_bytes")
"""names hocket.env had for them, gone with their last importer"""

ENVIRON_WRITERS = {"launch/threads.py", "launch/rank_main.py", "launch/ranks.py"}
"""modules that set or copy the environment for the processes they start (no setting is read there)"""


def _sources():
    return sorted(p for p in HOCKET.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_hocket_variable_named_in_hocket_is_a_documented_setting():
    known = {s.name for s in env.SETTINGS}
    unknown = {}
    for path in _sources():
        for name in set(NAME.findall(path.read_text())) - known:
            unknown.setdefault(name, []).append(str(path.relative_to(HOCKET)))
    assert not unknown, f"HOCKET_* names that are not in hocket.env.SETTINGS: {unknown}"


def test_the_settings_are_about_ten_with_their_defaults_units_and_effects():
    names = [s.name for s in env.SETTINGS]
    assert len(names) == len(set(names)) and 8 <= len(names) <= 12
    assert not set(names) & set(REMOVED)
    for setting in env.SETTINGS:
        assert setting.default and setting.unit and len(setting.changes) > 20, setting


@pytest.mark.parametrize("setting", env.SETTINGS, ids=lambda s: s.name)
def test_each_setting_has_a_function_whose_docstring_names_it_and_its_default(setting):
    readers = [fn for _, fn in inspect.getmembers(env, inspect.isfunction)
               if fn.__module__ == env.__name__ and f'"{setting.name}' in inspect.getsource(fn)]
    assert readers, f"no function of hocket.env reads {setting.name}"
    for fn in readers:
        doc = inspect.getdoc(fn) or ""
        assert setting.name in doc and "default" in doc, (fn.__name__, doc)


def test_removed_variables_are_no_longer_read_or_recorded():
    source = Path(env.__file__).read_text()
    for name in REMOVED:
        assert name not in source, name
        assert name not in env.TRANSPORT_ENV_VARS
    assert not [name for name in REMOVED_FUNCTIONS if hasattr(env, name)]


def test_only_env_reads_the_environment():
    readers = []
    for path in _sources():
        where = str(path.relative_to(HOCKET))
        if where == "env.py" or where in ENVIRON_WRITERS:
            continue
        text = path.read_text()
        if re.search(r"os\.environ|os\.getenv|getenv\(", text):
            readers.append(where)
    assert not readers, f"modules reading os.environ outside hocket/env.py: {readers}"


@pytest.mark.parametrize("raw,mode", [("", "1"), ("1", "1"), (" 0 ", "0"), ("Always", "always")])
def test_agreement_modes_parse(monkeypatch, raw, mode):
    monkeypatch.setenv("HOCKET_AGREEMENT", raw)
    assert env.agreement_mode() == mode
    assert env.agreement_check() == (mode != "0") and env.agreement_every_call() == (mode == "always")


def test_bad_values_name_the_variable_the_value_and_the_choices(monkeypatch):
    monkeypatch.setenv("HOCKET_AGREEMENT", "sometimes")
    with pytest.raises(ValueError, match=r"HOCKET_AGREEMENT='sometimes' must be one of \('1', '0', 'always'\)"):
        env.agreement_mode()
    for raw in ("0", "-2", "inf", "nan", "1e300"):
        monkeypatch.setenv("HOCKET_TIMEOUT_S", raw)
        with pytest.raises(ValueError, match=f"HOCKET_TIMEOUT_S='{raw}' must be a finite number of seconds > 0"):
            env.wait_timeout_s()
    for raw in ("soon", "abc"):
        monkeypatch.setenv("HOCKET_TIMEOUT_S", raw)
        with pytest.raises(ValueError, match=f"HOCKET_TIMEOUT_S='{raw}' is not a number; set it to a number of "
                                             f"seconds > 0, e.g. HOCKET_TIMEOUT_S=300"):
            env.wait_timeout_s()
    monkeypatch.setenv("HOCKET_TIMEOUT_S", " 2.5 ")
    assert env.wait_timeout_s() == 2.5
    monkeypatch.delenv("HOCKET_TIMEOUT_S")
    assert env.wait_timeout_s() == 300.0


def test_raw_reads_the_values_as_they_are_now(monkeypatch):
    monkeypatch.setenv("HOCKET_DISABLE", " yes")
    monkeypatch.delenv("HOCKET_EAGER_GRAPHS", raising=False)
    assert env.raw(("HOCKET_DISABLE", "HOCKET_EAGER_GRAPHS")) == (" yes", None)
    assert env.raw_values(("HOCKET_DISABLE", "HOCKET_EAGER_GRAPHS")) == {"HOCKET_DISABLE": " yes"}
    assert env.process_environment()["HOCKET_DISABLE"] == " yes"

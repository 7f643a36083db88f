"""Configuration files are bounded: size, encoding, YAML aliases; every error names the file."""

from __future__ import annotations

import pytest

from hocket.core.files import MAX_CONFIG_BYTES, ConfigFileError, load_json_file, load_yaml_file, read_bounded
from hocket.hardware import PresetError, load_cluster
from hocket.models.catalog import load_model

ALIAS_BOMB = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]" for i in range(8)]
) + "\n"
"""nine nested levels of ten aliases each: 10^9 leaves once expanded"""


@pytest.mark.timeout(20)
def test_an_alias_bomb_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    with pytest.raises(ConfigFileError, match=r"bomb\.yaml.*alias \(\*a\)"):
        load_yaml_file(path)


@pytest.mark.timeout(20)
def test_a_cluster_file_with_an_alias_bomb_is_a_preset_error(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(ALIAS_BOMB)
    with pytest.raises(PresetError, match=r"cluster\.yaml.*alias"):
        load_cluster(path)


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 64)
    with pytest.raises(ConfigFileError, match=r"big\.json: is 64 bytes, over the 10-byte limit"):
        read_bounded(path, max_bytes=10)
    assert MAX_CONFIG_BYTES >= 2**20  # shipped presets and profiles stay well under it


def test_a_binary_file_names_the_file_and_the_byte(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_bytes(b"name: x\n\xff\xfe\x00")
    with pytest.raises(PresetError, match=r"cluster\.yaml.*not UTF-8 text \(byte 8 is 0xff\)"):
        load_cluster(path)


def test_a_directory_is_named_as_one(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        load_cluster(tmp_path / "")
    folder = tmp_path / "c.yaml"
    folder.mkdir()
    with pytest.raises(ValueError, match=r"c\.yaml' is a directory"):
        load_cluster(folder)


def test_json_errors_name_file_line_and_column(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text('{"a": 1,\n "b": }')
    with pytest.raises(ConfigFileError, match=r"profile\.json: is not valid JSON .* line 2, column 7"):
        load_json_file(path)


def test_a_model_config_that_is_not_json_names_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("not json")
    with pytest.raises(ValueError, match=r"config\.json: is not valid JSON"):
        load_model(path)


def test_plain_yaml_still_loads(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("a: [1, 2]\nb: {c: 3}\n")
    assert load_yaml_file(path) == {"a": [1, 2], "b": {"c": 3}}

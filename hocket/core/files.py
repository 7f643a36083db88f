"""Reading the configuration files users hand to hocket (cluster presets, model configs, plans, profiles).

Every such file is read through :func:`read_bounded` and parsed by :func:`parse_yaml` / :func:`parse_json`,
so a broken or hostile file is refused at once with an error that names it:

* a file over :data:`MAX_CONFIG_BYTES` (16 MiB; the largest shipped preset or profile is under 1 MiB) is
  refused before it is read;
* a file that is not UTF-8 text, or a directory, is refused with what it is;
* YAML aliases (``*name``) are refused: a preset never needs one, and nested aliases expand
  exponentially (an "alias bomb" of depth 9 holds 10^9 nodes in a file of a kilobyte).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

MAX_CONFIG_BYTES = 16 * 2**20


class ConfigFileError(ValueError):
    """A configuration file that cannot be used; the message names the file, the problem and the fix."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        super().__init__(f"{path}: {problem}")


def read_bounded(path: str | Path, *, what: str = "file", max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """The text of ``path`` (a ``what``: "cluster file", "plan file", ...), refused when it is missing, a
    directory, larger than ``max_bytes`` or not UTF-8 text."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ConfigFileError(path, f"is a directory, not a {what}; give the path of the file itself")
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ConfigFileError(path, f"does not exist; give the path of a {what}") from None
    except OSError as exc:
        raise ConfigFileError(path, f"cannot be read ({exc.strerror})") from None
    if size > max_bytes:
        raise ConfigFileError(path, f"is {size} bytes, over the {max_bytes}-byte limit for a {what}; "
                                    f"is it the right file?")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigFileError(path, f"cannot be read ({exc.strerror})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(path, f"is not UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x}); a {what} "
                                    f"is YAML or JSON text") from None


@cache
def _loader() -> type:
    """PyYAML's safe loader, refusing aliases (see the module docstring). PyYAML is imported here, when a YAML
    file is first read, so code that reads none (an operator call, a kernel) runs without it."""
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):  # noqa: ANN001, ANN201 (PyYAML's signature)
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, f"found an alias (*{event.anchor}); hocket's YAML "
                                                  "files take no aliases: write the value out", event.start_mark)
            return super().compose_node(parent, index)

    return NoAliasLoader


def parse_yaml(text: str, source: object) -> Any:
    """``text`` parsed as YAML (safe, no aliases); errors name ``source``."""
    import yaml

    try:
        return yaml.load(text, Loader=_loader())  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        raise ConfigFileError(source, f"is not valid YAML for hocket ({exc})") from None


def parse_json(text: str, source: object) -> Any:
    """``text`` parsed as JSON; errors name ``source``, the line and the column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigFileError(source, f"is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
                              ) from None


def load_yaml_file(path: str | Path, *, what: str = "YAML file") -> Any:
    return parse_yaml(read_bounded(path, what=what), path)


def load_json_file(path: str | Path, *, what: str = "JSON file") -> Any:
    return parse_json(read_bounded(path, what=what), path)

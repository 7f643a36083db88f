"""README.md stays short and starts with the two fresh-machine commands (CI runs the second line as it is)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 150
DEMO = "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e '.[test]' && hocket demo"
TESTS = "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e '.[test]' && python -m pytest -q"


def _blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced code block, in order."""
    return [(m.group(1), m.group(2).splitlines()) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)]


def test_the_readme_is_at_most_150_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, (f"README.md has {len(lines)} lines; at most {MAX_LINES}: move detail to docs/ "
                                     f"(a feature adds a docs page and at most three README lines)")


def test_the_first_code_block_is_the_demo_command_then_the_test_command():
    language, lines = _blocks(README.read_text(encoding="utf-8"))[0]
    assert language == "bash"
    assert lines == [DEMO, TESTS], "the README's first code block must be exactly the demo and the test command"


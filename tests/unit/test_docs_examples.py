"""Every example in README.md and docs/*.md runs on CPU, and the docs and results index stay true to the tree.

* Each ```python block runs as a script of its own (``python block.py`` in a fresh folder, so blocks that spawn
  ranks guard them with ``if __name__ == "__main__":``), bounded by ``BLOCK_TIMEOUT_S``.
* Each line of a ```bash block that starts with ``hocket `` is classified: run (in a folder per page, in page order,
  so ``hocket plan --json plan.json`` feeds the ``hocket simulate --plan plan.json`` after it), or listed in
  ``NOT_RUN`` with the reason. A new command must be classified.
* docs/cli.md lists every subcommand and flag ``hocket <command> --help`` prints; docs/configuration.md every
  setting of ``hocket.env.SETTINGS``.
* Relative links of README.md, docs/ and the results reports point at files that exist; ``benchmarks/results/MANIFEST``
  lists exactly the committed results files, and reports are named ``<machine>/<YYYY-MM-DD>_<topic>.md``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RESULTS = ROOT / "benchmarks" / "results"
BLOCK_TIMEOUT_S = 150
NOT_RUN: dict[str, str] = {}
"""``hocket ...`` shell lines of the docs that the test does not run, each with the reason (none today)."""
PENDING_PAGES = {"docs/adding-a-strategy.md"}
"""Pages linked from the docs that another change writes; a link to one is checked once the page exists."""


def _blocks(path: Path) -> list[tuple[str, str]]:
    text = path.read_text(encoding="utf-8")
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "HOCKET_CACHE_DIR": str(tmp_path / "cache"), "HOCKET_TIMEOUT_S": "60",
           "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "110"}
    for name in ("HOCKET_PROFILE", "HOCKET_CLUSTER", "HOCKET_AUTOTUNE", "HOCKET_DISABLE", "HOCKET_EAGER_GRAPHS"):
        env.pop(name, None)
    return env


PYTHON_BLOCKS = [(page, i, code) for page in PAGES for i, (lang, code) in enumerate(_blocks(page)) if lang == "python"]


def _shell_lines(page: Path) -> list[str]:
    lines = []
    for lang, code in _blocks(page):
        if lang not in ("bash", "sh", "shell"):
            continue
        joined = code.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("hocket "):
                lines.append(" ".join(line.split()))
    return lines


SHELL_PAGES = [page for page in PAGES if _shell_lines(page)]


def test_the_docs_hold_python_examples():
    assert len(PYTHON_BLOCKS) >= 8 and any(p.name == "README.md" for p, _, _ in PYTHON_BLOCKS)


@pytest.mark.parametrize("page,index,code", PYTHON_BLOCKS,
                         ids=[f"{p.relative_to(ROOT)}#{i}" for p, i, _ in PYTHON_BLOCKS])
def test_every_python_block_runs(page, index, code, tmp_path):
    if "spawn(" in code:
        assert 'if __name__ == "__main__":' in code, f"{page.name} block {index} spawns ranks without a __main__ guard"
    script = tmp_path / f"block{index}.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=BLOCK_TIMEOUT_S)
    assert done.returncode == 0, f"{page.relative_to(ROOT)} block {index} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("page", SHELL_PAGES, ids=[str(p.relative_to(ROOT)) for p in SHELL_PAGES])
def test_every_hocket_command_of_a_page_runs_in_order(page, tmp_path):
    for line in _shell_lines(page):
        if line in NOT_RUN:
            continue
        words = shlex.split(line)
        done = subprocess.run([sys.executable, "-m", "hocket", *words[1:]], cwd=tmp_path, env=_env(tmp_path),
                              capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
        assert done.returncode == 0, f"{page.relative_to(ROOT)}: `{line}` failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"


def test_every_not_run_command_is_still_in_the_docs():
    everywhere = {line for page in PAGES for line in _shell_lines(page)}
    assert set(NOT_RUN) <= everywhere, f"NOT_RUN lists commands no page holds: {sorted(set(NOT_RUN) - everywhere)}"


def test_the_cli_reference_lists_every_subcommand_and_flag():
    from hocket.cli.main import build_parser

    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sub in subparsers.choices.items():
        assert f"## `hocket {name}`" in text, f"docs/cli.md has no section for `hocket {name}`: regenerate it"
        section = text.split(f"## `hocket {name}`", 1)[1].split("\n## ", 1)[0]
        for action in sub._actions:
            for flag in action.option_strings:
                assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", section), \
                    f"docs/cli.md's `hocket {name}` lacks {flag}: regenerate it from `hocket {name} --help`"


def test_the_configuration_page_documents_every_setting():
    from hocket.env import SETTINGS

    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`(HOCKET_[A-Z0-9_]+)`", text))
    names = {s.name for s in SETTINGS}
    assert names <= documented, f"docs/configuration.md lacks {sorted(names - documented)}"
    for setting in SETTINGS:
        assert f"| `{setting.name}` | {setting.default} |" in text, f"the default of {setting.name} differs from SETTINGS"


def _links(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) if "://" not in t]


REPORTS = sorted(p for p in RESULTS.rglob("*.md") if p.name != "README.md")


@pytest.mark.parametrize("path", [*PAGES, *REPORTS, RESULTS / "README.md", ROOT / "benchmarks" / "README.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files(path):
    for target in _links(path):
        resolved = (path.parent / target).resolve()
        rel = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(resolved)
        if rel in PENDING_PAGES and not resolved.exists():
            continue
        assert resolved.exists(), f"{path.relative_to(ROOT)} links to {target}, which does not exist"


def test_reports_are_dated_and_in_a_machine_folder():
    for report in REPORTS:
        rel = report.relative_to(RESULTS)
        assert len(rel.parts) == 2 and re.fullmatch(r"\d{4}-\d{2}-\d{2}_[a-z0-9-]+\.md", rel.name), \
            f"benchmarks/results/{rel} is not <machine>/<YYYY-MM-DD>_<topic>.md"


def test_the_manifest_lists_exactly_the_committed_results():
    listed = {line.strip() for line in (RESULTS / "MANIFEST").read_text(encoding="utf-8").splitlines()
              if line.strip() and not line.startswith("#")}
    present = {p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("*") if p.is_file() and p.name != "MANIFEST"}
    assert not listed - present, f"MANIFEST lists missing files: {sorted(listed - present)[:10]}"
    assert not present - listed, f"files under benchmarks/results missing from MANIFEST: {sorted(present - listed)[:10]}"

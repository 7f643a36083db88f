"""Without Triton: every hocket module outside ``hocket.kernels.TRITON_MODULES`` imports, and the
CPU paths a new user runs first work (``hocket demo``, ``hocket plan``, ``hocket simulate``, the
operators with ``plan=None`` on gloo).

Each case runs in a fresh interpreter whose ``sitecustomize`` (on ``PYTHONPATH``, so the rank
processes and the forkserver load it too) puts a ``sys.meta_path`` finder first that raises
``ModuleNotFoundError`` for ``triton`` and ``triton.*``, as on a machine where it is not installed.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hocket
from hocket.kernels import TRITON_MODULES

RUN_TIMEOUT_S = 120

SITECUSTOMIZE = '''
import importlib.abc
import sys


class _NoTriton(importlib.abc.MetaPathFinder):
    """Triton is not installed: raise for it and everything under it."""

    def find_spec(self, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the no-Triton test)", name=name)
        return None


sys.meta_path.insert(0, _NoTriton())
'''

RANK_TASKS = '''
"""Rank functions of the no-Triton test (imported by name in the rank processes)."""

import sys

import torch


def triton_blocked() -> bool:
    try:
        import triton  # noqa: F401
    except ModuleNotFoundError as exc:
        return "blocked" in str(exc)
    return False


def operators(rank, world):
    import hocket
    from hocket.ops import reference as R
    from hocket.ops.tolerance import assert_close

    group = torch.distributed.group.WORLD
    gen = torch.Generator().manual_seed(7)
    a_shards = [torch.randn(16, 32, generator=gen) for _ in range(world)]
    b = torch.randn(32, 24, generator=gen)
    a_local = [torch.randn(32, 24, generator=gen) for _ in range(world)]
    b_local = [torch.randn(24, 16, generator=gen) for _ in range(world)]
    ops = hocket.ops  # reached through the lazy attribute of `import hocket`
    A, (out,) = ops.all_gather_matmul(a_shards[rank], [b], 0, group, plan=None)
    gathered, (expected,) = R.all_gather_matmul_global(a_shards, [b], 0)
    assert_close(A, gathered, world=world, what="all_gather_matmul A")
    assert_close(out, expected, world=world, what="all_gather_matmul")
    rs = ops.matmul_reduce_scatter(a_local[rank], b_local[rank], "sum", 0, group, plan=None)
    assert_close(rs, R.matmul_reduce_scatter_global(a_local, b_local, "sum", 0)[rank], world=world,
                 what="matmul_reduce_scatter")
    ar = ops.matmul_all_reduce(a_local[rank], b_local[rank], "sum", group, plan=None)
    assert_close(ar, R.matmul_all_reduce_global(a_local, b_local, "sum"), world=world, what="matmul_all_reduce")
    offload = {}
    for name, call in (("matmul_to_host", lambda: ops.matmul_to_host(b, b.T.contiguous(), plan=None)),
                       ("matmul_from_host", lambda: ops.matmul_from_host(b, b.T.contiguous(), plan=None))):
        try:
            call()
        except ModuleNotFoundError as exc:
            offload[name] = "ModuleNotFoundError: " + str(exc)
        except Exception as exc:  # noqa: BLE001 - the message is the result
            offload[name] = type(exc).__name__ + ": " + str(exc)
        else:
            offload[name] = "ran"
    ops.close_contexts()
    return {"blocked": triton_blocked(), "triton_loaded": "triton" in sys.modules, "offload": offload}
'''

MODULES = '''
import importlib, json, pkgutil, sys
import hocket
from hocket.kernels import TRITON_MODULES

kernel_modules = {"hocket.kernels." + name for name in TRITON_MODULES}
ok, failed, needs_triton = [], {}, {}
for info in pkgutil.walk_packages(hocket.__path__, "hocket.", onerror=lambda name: failed.setdefault(name, "walk")):
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as exc:
        (needs_triton if exc.name == "triton" else failed)[info.name] = str(exc)
    except Exception as exc:
        failed[info.name] = repr(exc)
    else:
        ok.append(info.name)
print(json.dumps({"ok": ok, "failed": failed, "needs_triton": needs_triton,
                  "kernel_modules": sorted(kernel_modules), "triton_loaded": "triton" in sys.modules,
                  "attrs": {n: type(getattr(hocket, n)).__name__ for n in hocket.SUBPACKAGES}}))
'''

OPERATORS = '''
import json
from hocket.launch import spawn
import no_triton_ranks

print(json.dumps({"driver_blocked": no_triton_ranks.triton_blocked(),
                  "ranks": spawn(no_triton_ranks.operators, world_size=2, backend="gloo", timeout_s=90)}))
'''


@pytest.fixture(scope="module")
def no_triton(tmp_path_factory) -> tuple[Path, dict]:
    """A folder holding the blocker and the rank tasks, and the environment that loads them."""
    root = tmp_path_factory.mktemp("no_triton")
    (root / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (root / "no_triton_ranks.py").write_text(RANK_TASKS)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                           "MASTER_PORT", "LOCAL_WORLD_SIZE", "TRITON_INTERPRET")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    env["COLUMNS"] = "250"
    return root, env


def _python(no_triton, *argv: str) -> subprocess.CompletedProcess:
    root, env = no_triton
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env,
                          cwd=root, check=False)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _hocket(no_triton, *argv: str) -> subprocess.CompletedProcess:
    return _python(no_triton, "-m", "hocket", *argv)


def test_blocker_makes_triton_unimportable(no_triton):
    root, env = no_triton
    proc = subprocess.run([sys.executable, "-c", "import triton"], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=env, cwd=root, check=False)
    assert proc.returncode == 1
    assert "ModuleNotFoundError" in proc.stderr and "blocked by the no-Triton test" in proc.stderr


def _load_time_imports(body: list[ast.stmt]):
    """The import statements run when a module loads: not those inside a def or a class."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                yield from _load_time_imports(getattr(node, field, []))


def _module_level_triton_imports() -> set[str]:
    """hocket modules that import ``triton`` (or ``triton.*``) when they load."""
    found = set()
    package = Path(hocket.__file__).parent
    for path in package.rglob("*.py"):
        for node in _load_time_imports(ast.parse(path.read_text(), filename=str(path)).body):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if not getattr(node, "level", 0) and any(n == "triton" or n.startswith("triton.") for n in names):
                found.add(".".join(path.relative_to(package.parent).with_suffix("").parts))
    return found


def test_only_the_kernel_modules_import_triton_at_load():
    importing = _module_level_triton_imports()
    assert "hocket.kernels.tickets" in importing  # the scan sees a known one
    assert importing <= {f"hocket.kernels.{name}" for name in TRITON_MODULES}


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_every_module_but_the_kernels_imports_without_triton(no_triton):
    result = json.loads(_python(no_triton, "-c", MODULES).stdout)
    assert result["failed"] == {}
    # the Triton kernel modules, and only they, need Triton
    assert sorted(result["needs_triton"]) == result["kernel_modules"]
    subpackages = {f"hocket.{name}" for name in hocket.SUBPACKAGES}
    assert subpackages <= set(result["ok"])
    assert set(result["attrs"].values()) == {"module"}
    assert result["triton_loaded"] is False


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_operators_with_plan_none_on_two_gloo_ranks(no_triton):
    result = json.loads(_python(no_triton, "-c", textwrap.dedent(OPERATORS)).stdout.splitlines()[-1])
    assert result["driver_blocked"] is True
    assert len(result["ranks"]) == 2
    for rank in result["ranks"]:
        assert rank["blocked"] is True and rank["triton_loaded"] is False
        # the offloads need a GPU: on CPU they say so, never that Triton is missing
        for name, outcome in rank["offload"].items():
            assert outcome.startswith("RuntimeError") and "CUDA" in outcome, (name, outcome)


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_demo_with_fewest_iterations(no_triton):
    proc = _hocket(no_triton, "demo", "--world-size", "2", "--iters", "1", "--warmup", "0")
    for kind in ("ag_mm", "mm_rs", "mm_ar"):
        assert kind in proc.stdout
    assert "fastest plan of the site" in proc.stdout


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_plan_then_simulate(no_triton):
    root, _ = no_triton
    plan_json = root / "plan.json"
    proc = _hocket(no_triton, "plan", "--model", "llama3-8b", "--cluster", "h100x8", "--tp", "8", "--seq", "1024",
                   "--json", str(plan_json))
    assert "predicted step" in proc.stdout
    planned = json.loads(plan_json.read_text())
    assert planned["sites"]
    proc = _hocket(no_triton, "simulate", "--plan", str(plan_json), "--json")
    summary = json.loads(proc.stdout)
    assert summary["world"] == 8 and summary["step_ms"] > 0

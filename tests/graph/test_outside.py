"""run_outside_compiler: the compiler's thread-local state stays behind; results, errors and a bound come back."""

from __future__ import annotations

import threading

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from hocket.graph.outside import OutsideTimeout, run_outside_compiler


def _python_dispatcher_on() -> bool:
    return torch._C._dispatch_tls_is_dispatch_key_included(torch._C.DispatchKey.PythonDispatcher)


def test_work_runs_without_the_compilers_thread_local_state():
    seen = {}

    def work():
        seen["dispatcher"] = _python_dispatcher_on()
        seen["tensor"] = torch.randn(3, 5)
        return seen["tensor"].sum()

    with FakeTensorMode(), torch._C._EnablePythonDispatcher():
        assert _python_dispatcher_on()  # the caller is in the state a compiler pass runs in
        result = run_outside_compiler(work, what="a test", timeout_s=60)
    assert seen["dispatcher"] is False
    assert not isinstance(seen["tensor"], FakeTensor)
    assert torch.equal(result, seen["tensor"].sum())


def test_errors_come_back_to_the_caller():
    def work():
        raise KeyError("from the worker")

    with pytest.raises(KeyError, match="from the worker"):
        run_outside_compiler(work, what="a test", timeout_s=60)


def test_a_stuck_call_becomes_a_clear_error():
    release = threading.Event()
    try:
        with pytest.raises(OutsideTimeout, match=r"measuring site X did not finish within 0.2 s on this process"):
            run_outside_compiler(lambda: release.wait(60), what="measuring site X", timeout_s=0.2)
    finally:
        release.set()


@pytest.mark.parametrize("timeout_s", [0, -1.0, True, "5"])
def test_bad_timeout_names_the_argument(timeout_s):
    with pytest.raises(ValueError, match="timeout_s="):
        run_outside_compiler(lambda: None, what="x", timeout_s=timeout_s)


def test_not_callable_is_a_type_error():
    with pytest.raises(TypeError, match="fn="):
        run_outside_compiler(3, what="x", timeout_s=1)

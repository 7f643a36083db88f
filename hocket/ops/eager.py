"""When a public operator may skip ``torch.ops.hocket.*`` and call its implementation directly.

Going through the torch.library custom op costs ~100 us of host time per call (the
dispatcher, the autograd wrapper, the ``torch._dynamo`` disable wrapper, the output
aliasing check), which dominates small operators. In plain eager mode none of that
changes the result: the custom op's CPU/CUDA kernel *is* the ``run_*`` function. The
custom op is still needed whenever something else has to see the call as one op, so
:func:`direct_call_ok` says "direct" only when none of the following holds (each line
is one reason the op must stay visible):

* ``torch.compiler.is_compiling()``: dynamo (torch.compile, strict export) is tracing;
  it must record ``torch.ops.hocket.*`` as one opaque node, not trace into our Python.
* ``torch.jit`` tracing is on: the trace must record the op, not its pieces.
* grad is enabled and an input requires grad: the custom op carries the registered
  autograd formula (the backward is its own hocket operator with its own Site/plan).
* an input is not exactly a ``torch.Tensor`` (``nn.Parameter``, which defines no
  ``__torch_function__`` behaviour of its own, is allowed): DTensor, FakeTensor,
  functional and other subclasses, fx ``Proxy`` objects must see the op.
* a torch-function mode is active (``TorchFunctionMode`` subclasses, e.g. device
  contexts): it intercepts ``torch.ops`` calls and may rewrite them.
* a torch-dispatch mode is active (FakeTensorMode, ProxyTorchDispatchMode / make_fx,
  FunctionalTensorMode, CommDebugMode, FlopCounterMode, user modes): it must see the op.
  Checked both by the mode stack length and by the TLS ``Python`` dispatch key, which
  infra modes (fake, proxy, functional) set without using the user stack.
* functorch transforms (vmap, grad, jvp, functionalize) are active: their wrapped
  tensors look like plain ``torch.Tensor`` objects from Python.
* autocast is enabled: the op has no autocast rule of its own, and which dtype its inner
  matmuls run in is then up to the dispatcher (on torch 2.13 CPU they are re-cast inside
  the kernel, as a direct call would be); keeping the op under autocast keeps exactly the
  behaviour users had, whatever a torch version does there.

Every private torch API is looked up with ``getattr``; when one is missing the predicate
answers "no" (the custom op), which is always correct, only slower.
"""

from __future__ import annotations

import torch

_C = torch._C
_DISPATCH_KEY_PYTHON = getattr(getattr(_C, "DispatchKey", None), "Python", None)
_TLS_KEY_INCLUDED = getattr(_C, "_dispatch_tls_is_dispatch_key_included", None)
_DISPATCH_STACK_LEN = getattr(_C, "_len_torch_dispatch_stack", None)
_FUNCTION_MODE_ON = getattr(_C, "_is_torch_function_mode_enabled", None)
_FUNCTORCH_STACK = getattr(getattr(_C, "_functorch", None), "peek_interpreter_stack", None)
_AUTOCAST_ON = getattr(_C, "_is_any_autocast_enabled", None)
_JIT_TRACING_STATE = getattr(_C, "_get_tracing_state", None)
_IS_COMPILING = getattr(getattr(torch, "compiler", None), "is_compiling", None)

_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)

_AVAILABLE = None not in (_DISPATCH_KEY_PYTHON, _TLS_KEY_INCLUDED, _DISPATCH_STACK_LEN, _FUNCTION_MODE_ON,
                          _FUNCTORCH_STACK, _AUTOCAST_ON, _JIT_TRACING_STATE, _IS_COMPILING)
"""False when this torch lacks one of the checks: then every call goes through the custom op."""


def direct_call_ok(tensors: list) -> bool:
    """True when calling the ``run_*`` implementation directly equals calling the custom op.

    ``tensors``: every tensor argument of the call (A and the Bs). See the module
    docstring for why each condition is checked. Costs ~2 us.
    """
    if not _AVAILABLE:
        return False
    grad_on = torch.is_grad_enabled()
    for t in tensors:
        if type(t) not in _PLAIN_TYPES or (grad_on and t.requires_grad):
            return False
    return not (_IS_COMPILING() or _DISPATCH_STACK_LEN() or _TLS_KEY_INCLUDED(_DISPATCH_KEY_PYTHON)
                or _FUNCTION_MODE_ON() or _FUNCTORCH_STACK() is not None or _AUTOCAST_ON()
                or _JIT_TRACING_STATE() is not None)

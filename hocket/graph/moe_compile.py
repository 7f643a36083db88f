"""``compile_moe``: ``hocket.compile`` for models whose MoE dispatch reads its split sizes on the host.

```python
from hocket.graph.moe_compile import compile_moe
model = compile_moe(model, backend="aot_eager")   # hocket.compile, split sizes traced
```

The rewritten layers trace into hocket's MoE ops, so each Dynamo graph is compiled by the backend in one piece
(the layers' forward and backward included).
"""

from __future__ import annotations

from torch import nn

from hocket.graph.api import compile as hocket_compile
from hocket.graph.moe import capture_split_sizes


def compile_moe(model: nn.Module, **options) -> nn.Module:
    """``hocket.compile(model, **options)`` whose calls run under :func:`capture_split_sizes` (the split sizes'
    ``.tolist()`` traced, and data-dependent output sizes allowed for ``splits="exchanged"``).

    torchtitan's dispatcher calls ``.tolist()`` inside a context manager Dynamo cannot resume in; without
    ``capture_scalar_outputs`` Dynamo runs the whole ``RoutedExperts.forward`` eagerly, so no graph holds the
    layer and the pass never sees it. ``hocket.explain`` works on the result as on ``hocket.compile``'s."""
    compiled = hocket_compile(model, **options)
    traced_forward = compiled.forward

    def forward(*args, **kwargs):
        with capture_split_sizes():
            return traced_forward(*args, **kwargs)

    compiled.forward = forward
    return compiled

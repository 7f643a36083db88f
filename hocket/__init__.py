"""hocket: compute-communication overlap operators for distributed accelerator clusters."""

from hocket.plan.plan import Plan
from hocket.site import Site

__version__ = "0.1.0"

__all__ = ["Plan", "Site", "__version__"]

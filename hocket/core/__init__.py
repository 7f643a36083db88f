"""The leaf layer: the vocabularies every other layer speaks (Site, HaloSite, Plan, piece arithmetic).

Nothing here imports torch or any other hocket package but :mod:`hocket.env`.
"""

from hocket.core.halo import HaloSite
from hocket.core.plan import SEQUENTIAL, STRATEGIES, TRANSPORTS, Plan, as_plan
from hocket.core.site import SITE_KINDS, Site

__all__ = ["SEQUENTIAL", "SITE_KINDS", "STRATEGIES", "TRANSPORTS", "HaloSite", "Plan", "Site", "as_plan"]

"""The planner: candidate space, search, the decision cache and measured autotune.

``enumerate_plans``/``group_facts`` list the valid plans of a Site on a cluster (pruned
ones with reasons); ``search``/``search_sites`` price and choose (never slower than
sequential by the margin); ``autotune`` measures candidates with runners the caller gives
(the operators' own runners and the process planner of ``plan=None`` calls are in
:mod:`hocket.ops.live`; a model step's plan is :func:`hocket.sim.model_plan.plan_model`).
"""

from hocket.core.plan import PLAN_VERSION, SEQUENTIAL, STRATEGIES, TRANSPORTS, Plan, as_plan
from hocket.plan.autotune import AutotuneConfig, autotune, autotune_enabled
from hocket.plan.bucket import BucketPolicy, bucket_m, bucket_site, fit_plan
from hocket.plan.cache import CacheEnvironment, PlanCache, PlanCacheWarning
from hocket.plan.memory import MemoryEstimate, estimate_extra_memory
from hocket.plan.search import SearchConfig, SearchResult, search, search_sites, select
from hocket.plan.space import GroupFacts, PlanSpace, SpaceConfig, enumerate_plans, group_facts

__all__ = [
    "PLAN_VERSION", "SEQUENTIAL", "STRATEGIES", "TRANSPORTS", "AutotuneConfig", "BucketPolicy", "CacheEnvironment",
    "GroupFacts", "MemoryEstimate", "Plan", "PlanCache", "PlanCacheWarning",
    "PlanSpace", "SearchConfig", "SearchResult", "SpaceConfig", "as_plan", "autotune", "autotune_enabled",
    "bucket_m", "bucket_site", "enumerate_plans", "estimate_extra_memory", "fit_plan", "group_facts",
    "search", "search_sites", "select",
]

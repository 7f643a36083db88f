"""Plans: the Plan type, candidate space, search and measured autotune.

``enumerate_plans``/``group_facts`` list the valid plans of a Site on a cluster (pruned
ones with reasons); ``search``/``search_sites`` price and choose (never slower than
sequential by the margin); ``autotune`` measures on the live group; ``tune`` and the
process planner in ``hocket.plan.live`` are what ``plan=None`` uses; ``plan_model``
plans a model's training step (``hocket plan``).
"""

from hocket.plan.autotune import AutotuneConfig, autotune, autotune_enabled
from hocket.plan.bucket import BucketPolicy, bucket_m, bucket_site, fit_plan
from hocket.plan.cache import CacheEnvironment, PlanCache, PlanCacheWarning
from hocket.plan.live import LiveConfig, LivePlanner, process_planner, set_process_planner, tune
from hocket.plan.memory import MemoryEstimate, estimate_extra_memory
from hocket.plan.plan import PLAN_VERSION, SEQUENTIAL, STRATEGIES, TRANSPORTS, Plan, as_plan
from hocket.plan.report import plan_model
from hocket.plan.search import SearchConfig, SearchResult, search, search_sites, select
from hocket.plan.space import GroupFacts, PlanSpace, SpaceConfig, enumerate_plans, group_facts

__all__ = [
    "PLAN_VERSION", "SEQUENTIAL", "STRATEGIES", "TRANSPORTS", "AutotuneConfig", "BucketPolicy", "CacheEnvironment",
    "GroupFacts", "LiveConfig", "LivePlanner", "MemoryEstimate", "Plan", "PlanCache", "PlanCacheWarning",
    "PlanSpace", "SearchConfig", "SearchResult", "SpaceConfig", "as_plan", "autotune", "autotune_enabled",
    "bucket_m", "bucket_site", "enumerate_plans", "estimate_extra_memory", "fit_plan", "group_facts", "plan_model",
    "process_planner", "search", "search_sites", "select", "set_process_planner", "tune",
]

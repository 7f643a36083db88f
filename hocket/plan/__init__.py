"""Plans: the Plan type, candidate space, search and measured autotune."""

from hocket.plan.plan import PLAN_VERSION, SEQUENTIAL, STRATEGIES, TRANSPORTS, Plan, as_plan

__all__ = ["PLAN_VERSION", "SEQUENTIAL", "STRATEGIES", "TRANSPORTS", "Plan", "as_plan"]

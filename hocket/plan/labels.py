"""Labels of plans as tables print them."""

from __future__ import annotations

from hocket.core.pieces import split_pattern


def plan_label(plan) -> str:
    """``Plan.describe()`` plus the fields it leaves out (hierarchy, SM budget, uneven pieces' shape)."""
    label = plan.describe()
    if plan.hierarchy:
        label += f"/{plan.hierarchy}"
    if plan.comm_sms is not None:
        label += f"/sms={plan.comm_sms}"
    if plan.split_sizes is not None:
        label += f"~{split_pattern(plan.split_sizes)}"
    return label

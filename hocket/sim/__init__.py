"""hocket.sim: discrete-event simulation of plans, sites and whole training steps.

* ``engine``: tasks on exclusive in-order resources, dependencies, contention (``simulate``);
* ``site``: one Site under one Plan from ``hocket.strategies.pipeline_stages`` (``simulate_site``);
* ``step``: a ``hocket.models.StepGraph`` under 1F1B across rank classes (``simulate_step``);
* ``layout``: rank placement and the symmetry reduction (``rank_classes``);
* ``trace`` / ``plot``: Chrome-trace JSON and PNG timeline; ``metrics``: utilisation, exposed comm.

Heavy modules (models, cost, matplotlib) load on first use of the function that needs them.
"""

from hocket.sim.engine import TaskGraph, Timeline, simulate
from hocket.sim.site import SiteSimulation, simulate_site
from hocket.sim.trace import chrome_trace, trace_json, write_trace

__all__ = ["SiteSimulation", "TaskGraph", "Timeline", "chrome_trace", "simulate", "simulate_site", "simulate_step",
           "trace_json", "write_trace"]


def simulate_step(step, cluster, *, plan=None, profile=None, explicit_ranks: bool = False):
    """See ``hocket.sim.step.simulate_step`` (imported on first use: it needs hocket.models)."""
    from hocket.sim.step import simulate_step as _simulate_step

    return _simulate_step(step, cluster, plan=plan, profile=profile, explicit_ranks=explicit_ranks)

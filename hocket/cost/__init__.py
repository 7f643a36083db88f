"""hocket.cost: contention-aware cost model of overlap plans (DESIGN.md section 3).

``predict(site, plan, cluster, profile=None) -> Prediction`` prices one plan;
``pipeline_stages`` gives the stage pipeline the prediction (and the simulator) runs;
``candidate_plans`` is a small candidate list (the planner's space replaces it).
"""

from hocket.cost.candidates import candidate_plans
from hocket.cost.pipeline import pipeline_stages
from hocket.cost.predict import Prediction, predict
from hocket.cost.stages import Schedule, Stage, schedule

__all__ = ["Prediction", "Schedule", "Stage", "candidate_plans", "pipeline_stages", "predict", "schedule"]

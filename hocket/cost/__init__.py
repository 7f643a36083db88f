"""hocket.cost: the primitives of the contention-aware cost model of overlap plans (docs/cost-model.md).

Transfers (``comm``), GEMMs (``compute``), contention, host issue costs, the stage builder every
strategy's cost builder writes against (``builder.StageBuilder``), the stage scheduler (``stages``) and
the steady state (``steady``). Pricing a plan reads the strategy registry, one layer up:
``hocket.strategies.predict`` / ``hocket.strategies.pipeline_stages``.
"""

from hocket.cost.builder import StageBuilder
from hocket.cost.predict import Prediction
from hocket.cost.stages import Schedule, Stage, schedule

__all__ = ["Prediction", "Schedule", "Stage", "StageBuilder", "schedule"]

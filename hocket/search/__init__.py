"""hocket.search: choose a training job's parallel configuration (``hocket plan --search``).

* ``space``: the candidates (tp, cp, pp, dp, ep for MoE models, micro-batches, schedule, sharding,
  recomputation, device grouping on mixed clusters: stages, replicas, tensor-parallel groups over device types) and the pruned points with their reasons (``enumerate_space``);
* ``memory``: one rank's memory per stage and device type (``stage_memory``);
* ``run``: the analytic step estimate over every candidate, the event-simulator re-rank of the best few
  (``search_parallel``);
* ``report``: the ranked table, the JSON ``hocket simulate --plan`` reads, torchtitan and Megatron-LM
  settings for the winner.
"""

from hocket.search.memory import Memory, stage_memory
from hocket.search.run import SearchError, SearchOutcome, flops_per_token, search_parallel
from hocket.search.space import Candidate, ParallelSpace, enumerate_space

__all__ = ["Candidate", "Memory", "ParallelSpace", "SearchError", "SearchOutcome", "enumerate_space",
           "flops_per_token", "search_parallel", "stage_memory"]

"""hocket.models: model presets (YAML) and Hugging Face configs -> the Sites of a training step.

``load_model(name_or_config_path)``, ``list_models()``,
``model_step_sites(model, *, tp, pp, dp, seq, batch, cluster=None, ep=1, ...) -> StepGraph`` (MoE presets:
mixtral-8x7b, qwen3-30b-a3b, deepseek-v3; ``ep > 1`` adds their expert-parallel all-to-all sites).
"""

from hocket.models.catalog import list_models, load_hf_config, load_model
from hocket.models.graph import CommOp, ComputeOp, PipelineStage, StepGraph, StepNode
from hocket.models.spec import ModelSpec
from hocket.models.step import model_step_sites

__all__ = ["CommOp", "ComputeOp", "ModelSpec", "PipelineStage", "StepGraph", "StepNode", "list_models",
           "load_hf_config", "load_model", "model_step_sites"]

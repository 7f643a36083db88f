"""Checks of the cost model and the planner against committed measurements (``hocket validate``, ``hocket regret``).

* :mod:`hocket.validate.lines`: which results lines are read and how each ran (executor, timing mode, protocol);
* :mod:`hocket.validate.sites`: lines grouped per run of a site and machine, and the frozen held-out split;
* :mod:`hocket.validate.cost_model`: :func:`~hocket.validate.cost_model.validate`, the held-out validation;
* :mod:`hocket.validate.regret`: :func:`~hocket.validate.regret.regret`, the planner's regret against the best
  measured plan;
* :mod:`hocket.validate.allowances`: :func:`~hocket.validate.allowances.derive_allowances`, the model-error
  allowances of ``hocket.plan.uncertainty``;
* :mod:`hocket.validate.published`: :func:`~hocket.validate.published.rows`, presets priced against published
  figures.

Each returns plain data and has a table printer beside it (``print_validation``, ``print_regret``,
``print_allowances``, ``print_published``). Where the model stands: docs/validation.md and
benchmarks/results/validation/2026-12-01_cost-model.md.
"""

"""How far a predicted saving over sequential can be trusted, per class of plan.

The saving rule of :mod:`hocket.plan.search` compares a plan's predicted time with
sequential's. The cost model's error is not the same for every plan: it prices whole
collectives well (a profile measures them directly) but leaves out costs that only
overlapped plans pay, and leaves out more of them for some mechanisms than for others:

* ``pipelined`` (``chunked``/``bulk``/``substituted`` over an SM-driven collective or
  P2P): per-piece launches and stream waits, and a GEMM slowed by the NCCL kernel
  beside it beyond the profile's one contention factor;
* ``copy_engine``: the same pipeline over copy-engine pulls (per-piece signalling);
* ``ring``: one Python-issued send/recv pair per step and sub-step;
* ``tile_fused``: a persistent kernel's flag waits and a grid capped below the SM count;
* ``host_staged``: a slow link whose transfer time dominates; the model's pieces are
  the best understood (PCIe copies at a measured bandwidth).

``DEFAULT_REL_ERROR`` holds, per class, how much the model may under-price a plan
*relative to sequential*: the plan may run ``(1 + e)`` times slower (relative to the
sequential run) than predicted. They are documented constants (see their docstring for
where they come from: the calibration sites of `hocket validate`, never its held-out ones). Each
further piece adds ``per_piece_error`` (the un-priced overhead grows with the piece
count), up to ``max_error``.

A calibration profile lowers the error of the classes whose transfers it measured
(their curve and their contention factor): a class it did not measure (or no profile at
all) gets the error derived for that case where the measurements hold such points
(``DEFAULT_UNCALIBRATED_REL_ERROR``), else ``uncalibrated_factor`` times the error. Across
ranks, ``host_staged`` counts as measured only with the relay's own curve
(``RELAY_TRANSFERS``). :func:`uncertainty_from_profile` derives that from the profile's content
and the site's rank count.

The rule (:meth:`Uncertainty.pessimistic_ms`): a plan's price is inflated by its error
before it is compared with ``sequential * (1 - margin)``; a plan is chosen only if even
its pessimistic price wins, and among the plans that qualify the lowest pessimistic
price wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hocket.core.plan import Plan
from hocket.strategies import spec

PLAN_CLASSES = ("sequential", "pipelined", "copy_engine", "ring", "tile_fused", "host_staged")

DEFAULT_REL_ERROR: Mapping[str, float] = {
    "sequential": 0.0,
    "pipelined": 0.06,
    "copy_engine": 0.06,
    "ring": 0.06,
    "tile_fused": 0.09,
    "host_staged": 0.01,
}
"""Per class: how much slower relative to sequential a plan may run than predicted (see module doc),
where the profile the planner prices with measured the class (:func:`calibrated_classes`).

Derived, not hand-set: per class, the 75th percentile of how much the cost model under-priced
``plan / sequential`` (less the per-piece allowance), over the plans whose profile measured their class, on the
*calibration* sites of the validation's frozen split only (never its held-out sites): every H200 results line with
current executors (graph replays priced as such), each priced with the profile ``hocket calibrate`` made on its own
lease where it has one, sequential priced as the planner's own baseline on the line's cluster. On the model of
2026-12-01: pipelined 0.06 of 585 plans, copy_engine 0.06 of 191, ring 0.06 of 156, tile_fused 0.09 of 55,
host_staged 0.01 of 2315 (medians +0.032 / +0.033 / +0.032 / +0.025 / -0.013); the planner regret tables did not
move with it. Command and table (with the earlier derivations):
benchmarks/results/validation/2026-12-01_measured-rules.md
("Uncertainty allowances"). A plan must win by the margin even if its prediction is that far off. Re-derive
when the cost model changes; copy the values here and the table into a dated report."""

DEFAULT_UNCALIBRATED_REL_ERROR: Mapping[str, float] = {"copy_engine": 0.11, "tile_fused": 0.12, "host_staged": 0.17}
"""Per class where the same derivation has points whose profile did *not* measure the class: the
error the planner allows there instead of ``uncalibrated_factor`` times ``DEFAULT_REL_ERROR``.
copy_engine and tile_fused: the 2xH200 lines priced with the first shared profile, whose copy-engine curve
and contention ``hocket.hardware.profile`` ignores (they timed another copy): p75 +0.105 of 60 plans and +0.122 of
61 (medians +0.064 / +0.065). host_staged: the 2xH200 relay lines priced with a profile that has no
``host_relay`` curve: p75 +0.17 of 506 plans (median +0.061), against +0.01 with one. Table:
benchmarks/results/validation/2026-12-01_measured-rules.md ("Uncertainty allowances")."""

DEFAULT_HOST_SPREAD = 2.0
"""How much slower than the model the host may issue a call: the same call's host time differed
2.1x between two 2xH200 leases of one machine kind (chunked(1)/copy_engine 370 vs 789 us per call), and
those per-call host times were 1.6-6x the issue chain the defaults of ``hocket.cost.issue`` price. A candidate
whose host issue time, stretched by this, exceeds its predicted time is priced at that: a pipeline that is
host-bound on a slower host must still win. Not applied to the ``host_staged`` class: its relay and host-copy
issue costs were derived from those pipelines' own per-piece times on the calibration sites
(``hocket.cost.issue``), so they already sit at the measured hosts' level (chunked(8)/host_staged[reverse] of
mm_rs 8192x14336x8192 ran in 3.60 ms, under the 3.16 ms of host time the model gives it plus its tail).

Kept at 2.0 where the profile measured the issue costs on the same lease (``issue_us``): those costs moved
1.5-1.9x within one lease (the NVLink and the host-mode calibration of one lease: entry 93.8 vs 63.0 us, p2p
97.4 vs 53.2; two calibrations a minute apart: entry 119.7 vs 62.7), and a steady-state chunked(1)/copy_engine
put of ag_mm 8192x4096x1536, priced host-bound at 0.198 ms with its lease's profile, measured 0.376 ms (1.9x).
The price of keeping it: prediction alone leaves a pull plan of mm_rs 8192x2048x4096 that ran 0.269 ms (0.73x
sequential) for sequential (regret 1.375); the autotuner takes it. Measurements:
benchmarks/results/validation/2026-12-01_measured-rules.md
("Host issue spread")."""
DEFAULT_PER_PIECE_ERROR = 0.003
"""Added per piece beyond the first (chunks, ring sub-steps, flag groups)."""
DEFAULT_MAX_ERROR = 0.30
DEFAULT_UNCALIBRATED_FACTOR = 1.5

CLASS_TRANSFERS: Mapping[str, tuple[str, ...]] = {
    "sequential": (),
    "pipelined": ("collectives", "sm_collective"),
    "copy_engine": ("copy_engine", "copy_engine_contention"),
    "ring": ("p2p", "sm_p2p"),
    "tile_fused": ("copy_engine", "copy_engine_contention"),
    "host_staged": ("host_link", "host_link_contention"),
}
"""What a profile must hold for a class to count as calibrated: a transfer curve and the
contention kind the cost model uses for it (``*_contention`` names the contention entry of
the same transfer). Between ranks ``host_staged`` also needs ``RELAY_TRANSFERS``."""
RELAY_TRANSFERS: tuple[str, ...] = ("host_relay",)
"""What ``host_staged`` between ranks (the relay of ``hocket.transport.host_relay``: a PCIe pipeline
through shared host memory, and its own issue costs) further needs a profile to hold: without the
relay's curve the model prices it from the datasheet's PCIe rate and default issue costs, which on
2xH200 under-priced it relative to sequential by a p75 of 0.13 (the allowance derivation over the relay lines
priced with a profile without the relay's curve) against 0.04 with the profile of each lease
(benchmarks/results/validation/2026-12-01_measured-rules.md, "Uncertainty allowances")."""


def plan_class(plan: Plan) -> str:
    """The class of ``plan`` (one of ``PLAN_CLASSES``) whose error applies to it: its spec's
    ``error_class``; a pipelined plan (and any but the baseline over ``host_staged``) by its transport."""
    error_class = spec(plan.strategy).error_class
    if error_class == "sequential":
        return "sequential"
    if plan.transport == "host_staged":
        return "host_staged"
    if error_class != "pipelined":
        return error_class
    if plan.transport == "copy_engine":
        return "copy_engine"
    return "pipelined"


def plan_pieces(plan: Plan) -> int:
    """Pieces the executor issues one by one (what the per-piece error counts)."""
    if plan.strategy == "sequential":
        return 1
    if plan.split_sizes is not None:
        return len(plan.split_sizes)
    return plan.chunks


@dataclass(frozen=True, kw_only=True)
class Uncertainty:
    """Relative error of predicted savings per plan class (see the module docstring)."""

    rel_error: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_REL_ERROR))
    per_piece_error: float = DEFAULT_PER_PIECE_ERROR
    max_error: float = DEFAULT_MAX_ERROR
    uncalibrated_factor: float = DEFAULT_UNCALIBRATED_FACTOR
    uncalibrated_rel_error: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_UNCALIBRATED_REL_ERROR))
    """per class, the error where the profile did not measure it (classes absent here: ``uncalibrated_factor``
    times ``rel_error``)."""
    host_spread: float = DEFAULT_HOST_SPREAD
    """a candidate's host issue time may be this many times the model's (``DEFAULT_HOST_SPREAD``)."""
    calibrated: frozenset[str] | None = None
    """classes a profile measured; None = treat every class as calibrated (no factor)."""

    def __post_init__(self) -> None:
        missing = [c for c in PLAN_CLASSES if c not in self.rel_error]
        unknown = [c for c in self.rel_error if c not in PLAN_CLASSES]
        if missing or unknown:
            raise ValueError(f"Uncertainty.rel_error must give every class of {PLAN_CLASSES}; "
                             f"missing {missing}, unknown {unknown}")
        for name, value in self.rel_error.items():
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"Uncertainty.rel_error[{name!r}]={value!r} must be a fraction in [0, 1)")
        for name, value in self.uncalibrated_rel_error.items():
            if name not in PLAN_CLASSES:
                raise ValueError(f"Uncertainty.uncalibrated_rel_error has unknown class {name!r}; use {PLAN_CLASSES}")
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"Uncertainty.uncalibrated_rel_error[{name!r}]={value!r} must be a fraction in [0, 1)")
        for name in ("per_piece_error", "max_error"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"Uncertainty.{name}={value!r} must be a fraction in [0, 1)")
        if isinstance(self.host_spread, bool) or not isinstance(self.host_spread, (int, float)) \
                or not 1.0 <= self.host_spread < 10.0:
            raise ValueError(f"Uncertainty.host_spread={self.host_spread!r} must be in [1, 10): how many times the "
                             f"model's host issue time a slower host may take (1 = trust it)")
        if not isinstance(self.uncalibrated_factor, (int, float)) or self.uncalibrated_factor < 1.0:
            raise ValueError(f"Uncertainty.uncalibrated_factor={self.uncalibrated_factor!r} must be >= 1 "
                             f"(a class the profile did not measure is no better known than one it did)")
        if self.calibrated is not None:
            object.__setattr__(self, "calibrated", frozenset(self.calibrated))
            unknown = sorted(self.calibrated - set(PLAN_CLASSES))
            if unknown:
                raise ValueError(f"Uncertainty.calibrated has unknown classes {unknown}; use {PLAN_CLASSES}")

    def error_of(self, plan: Plan) -> float:
        """How much slower, relative to sequential, ``plan`` may run than predicted."""
        cls = plan_class(plan)
        if cls == "sequential":
            return 0.0
        per_piece = self.per_piece_error * (plan_pieces(plan) - 1)
        error = self.rel_error[cls] + per_piece
        if self.calibrated is not None and cls not in self.calibrated:
            known = self.uncalibrated_rel_error.get(cls)
            error = known + per_piece if known is not None else error * self.uncalibrated_factor
        return min(error, self.max_error)

    def pessimistic_ms(self, plan: Plan, predicted_ms: float, host_ms: float = 0.0) -> float:
        """``predicted_ms`` inflated by the plan's error, or the plan's host issue time ``host_ms``
        stretched by ``host_spread`` (not for ``host_staged`` plans, see ``DEFAULT_HOST_SPREAD``)
        when that is longer (what the saving rule compares)."""
        spread = 1.0 if plan_class(plan) == "host_staged" else self.host_spread
        return max(predicted_ms * (1.0 + self.error_of(plan)), host_ms * spread)


NO_UNCERTAINTY = Uncertainty(rel_error={c: 0.0 for c in PLAN_CLASSES}, per_piece_error=0.0, host_spread=1.0)
"""Trust every prediction as it is (only the plain margin applies)."""


def calibrated_classes(profile: object, world: int = 1) -> frozenset[str]:
    """The classes whose transfers ``profile`` (a CalibrationProfile, a CalibrationView over
    one, or None) measured for a site of ``world`` ranks: a curve of the class's transfer and its
    contention entry (and, for ``host_staged`` across ranks, ``RELAY_TRANSFERS``)."""
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ValueError(f"world={world!r} must be the site's rank count, an int >= 1")
    profile = getattr(profile, "profile", profile)  # a CalibrationView holds its profile
    if profile is None:
        return frozenset({"sequential"})
    contention = getattr(profile, "contention", None) or {}
    held = {
        "collectives": bool(getattr(profile, "collectives", None)),
        "p2p": bool(getattr(profile, "p2p", ())),
        "copy_engine": bool(getattr(profile, "copy_engine", ())),
        "host_link": bool(getattr(profile, "host_link", ())),
        "sm_collective": "sm_collective" in contention or "cpu_collective" in contention,
        "sm_p2p": "sm_p2p" in contention or "cpu_p2p" in contention,
        "copy_engine_contention": "copy_engine" in contention,
        "host_link_contention": "host_link" in contention,
        "host_relay": bool(getattr(profile, "host_relay", ())),
    }
    needs = {cls: CLASS_TRANSFERS[cls] + (RELAY_TRANSFERS if cls == "host_staged" and world > 1 else ())
             for cls in CLASS_TRANSFERS}
    return frozenset(cls for cls, wanted in needs.items() if all(held[n] for n in wanted))


def uncertainty_from_profile(profile: object, base: Uncertainty | None = None, *, world: int = 1) -> Uncertainty:
    """``base`` (default: the documented constants) with the classes ``profile`` measured for a
    site of ``world`` ranks (:func:`calibrated_classes`)."""
    base = base or Uncertainty()
    return Uncertainty(rel_error=base.rel_error, per_piece_error=base.per_piece_error, max_error=base.max_error,
                       uncalibrated_factor=base.uncalibrated_factor,
                       uncalibrated_rel_error=base.uncalibrated_rel_error, host_spread=base.host_spread,
                       calibrated=calibrated_classes(profile, world))

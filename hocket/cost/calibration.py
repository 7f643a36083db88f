"""What the cost model reads from a calibration profile, in one place.

A profile (``hocket.hardware.profile.CalibrationProfile``) holds measured points of the
machine it was calibrated on: GEMM throughputs, bandwidth-vs-size curves per
collective and transfer kind, and contention factors. The cost model never replaces its
mechanisms by these points; it scales them: at each measured point it computes
``measured / model`` and interpolates that ratio (in log space) at the query, so the
model's structure (waves, algorithms, topology) is kept and its level is measured.

A profile describes the cluster it was calibrated on: pass it only with that cluster.
Points are read as mappings (``{"m":..,"tflops":..}``), objects with those attributes,
or tuples in the documented order ``(m, k, n, dtype, tflops)`` / ``(bytes, ms)``.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping

RATIO_LIMITS = (0.05, 20.0)
"""Ratios outside this range are treated as measurement accidents and clipped."""
NEAREST_GEMM_POINTS = 4

_GEMM_FIELDS = ("m", "k", "n", "dtype", "tflops")
_CURVE_FIELDS = ("bytes", "ms")


def _field(point, name: str, position: int):
    if isinstance(point, Mapping):
        return point[name]
    if isinstance(point, (tuple, list)):
        return point[position]
    return getattr(point, name)


def _log_linear(xs: list[float], ys: list[float], x: float) -> float:
    """``ys`` interpolated linearly at ``x`` between sorted ``xs``, constant beyond them."""
    i = bisect.bisect_left(xs, x)
    if i <= 0:
        return ys[0]
    if i >= len(xs):
        return ys[-1]
    x0, x1 = xs[i - 1], xs[i]
    t = 0.0 if x1 == x0 else (x - x0) / (x1 - x0)
    return ys[i - 1] + t * (ys[i] - ys[i - 1])


def _clip(ratio: float) -> float:
    if not math.isfinite(ratio) or ratio <= 0:
        return 1.0
    return min(max(ratio, RATIO_LIMITS[0]), RATIO_LIMITS[1])


class CalibrationView:
    """Read-only accessors over one profile, with per-view memo tables.

    Build one per prediction batch (``CalibrationView(profile)``); it caches ratios it
    has computed, so pricing many plans of one site stays cheap. It holds no global state.
    """

    def __init__(self, profile, *, steady: bool = False, captured: bool = False) -> None:
        self.profile = profile
        # collective curves read from the profile's collectives_steady where it has them (for_steady_state)
        self.steady = steady or captured
        # the relay's curve read from host_relay_captured where the profile has it (for_captured)
        self.captured = captured
        gemm = getattr(profile, "gemm", None) or ()
        self._gemm = []
        for point in gemm:
            m, k, n = (int(_field(point, f, i)) for i, f in enumerate(_GEMM_FIELDS[:3]))
            dtype = str(_field(point, "dtype", 3))
            tflops = float(_field(point, "tflops", 4))
            if min(m, k, n) >= 1 and tflops > 0 and math.isfinite(tflops):
                self._gemm.append((m, k, n, dtype, tflops))
        self._memo: dict[tuple, float] = {}

    # -- GEMM ---------------------------------------------------------------------
    def gemm_ratio(self, *, m: int, k: int, n: int, dtype: str,
                   model_ms: Callable[[int, int, int], float]) -> float:
        """measured/model time ratio interpolated at (m, k, n); 1.0 without points."""
        key = ("gemm", m, k, n, dtype)
        if key in self._memo:
            return self._memo[key]
        points = [p for p in self._gemm if p[3] == dtype] or self._gemm
        ratio = 1.0
        if points:
            q = (math.log2(m), math.log2(k), math.log2(n))
            scored = []
            for pm, pk, pn, _, tflops in points:
                d2 = (math.log2(pm) - q[0]) ** 2 + (math.log2(pk) - q[1]) ** 2 + (math.log2(pn) - q[2]) ** 2
                scored.append((d2, pm, pk, pn, tflops))
            scored.sort()
            # points measured at the query's own shape (several runs of one shape) decide alone, all of
            # them alike (geometric mean): the first of them in sort order would be the slowest
            exact = [p for p in scored if p[0] == 0.0]
            log_sum = weight_sum = 0.0
            for d2, pm, pk, pn, tflops in exact or scored[:NEAREST_GEMM_POINTS]:
                measured_ms = 2.0 * pm * pk * pn / (tflops * 1e9)
                r = _clip(measured_ms / model_ms(pm, pk, pn))
                w = 1.0 if d2 == 0.0 else 1.0 / d2
                log_sum += w * math.log(r)
                weight_sum += w
            ratio = _clip(math.exp(log_sum / weight_sum))
        self._memo[key] = ratio
        return ratio

    def gemm_sustained_tflops(self) -> float | None:
        """The profile's sustained GEMM ceiling in TFLOP/s (``gemm_sustained``, see
        ``hocket.hardware.profile``): the rate of its fastest GEMM run back to back for seconds, at the
        GPU's power cap. None where the profile has none (old profiles, CPU ranks)."""
        entry = getattr(self.profile, "gemm_sustained", None)
        if entry is None:
            return None
        m, k, n = (float(_field(entry, name, i)) for i, name in enumerate(("m", "k", "n")))
        tflops = 2.0 * m * k * n / (float(_field(entry, "sustained_ms", 5)) * 1e9)
        return tflops if math.isfinite(tflops) and tflops > 0 else None

    def for_steady_state(self) -> CalibrationView:
        """The view steady-state predictions price with: collective curves measured back to back
        (``collectives_steady``) replace the from-idle ones, op by op, and the relay's
        (``host_relay_steady``) the relay's, where the profile has them;
        ``self`` where it has none (old profiles). Built once per view."""
        if self.steady or not ((getattr(self.profile, "collectives_steady", None) or {})
                               or getattr(self.profile, "host_relay_steady", ())):
            return self
        key = ("steady_view",)
        if key not in self._memo:
            self._memo[key] = CalibrationView(self.profile, steady=True)  # type: ignore[assignment]
        return self._memo[key]  # type: ignore[return-value]

    def for_captured(self) -> CalibrationView:
        """The view predictions of CUDA graph replays price with: the steady view's curves, and the
        relay's replayed back to back (``host_relay_captured``) where the profile has it (else the
        steady view itself). Built once per view."""
        if self.captured or not getattr(self.profile, "host_relay_captured", ()):
            return self.for_steady_state()
        key = ("captured_view",)
        if key not in self._memo:
            self._memo[key] = CalibrationView(self.profile, captured=True)  # type: ignore[assignment]
        return self._memo[key]  # type: ignore[return-value]

    # -- transfers ----------------------------------------------------------------
    def curve(self, transfer: str) -> list[tuple[float, float]]:
        """Measured (bytes, ms) points of a collective op name ("all_gather", ...) or of
        "p2p", "copy_engine", "host_link", "host_relay"; [] when the profile has none."""
        key = ("curve", transfer)
        if key in self._memo:
            return self._memo[key]  # type: ignore[return-value]
        raw = None
        if transfer == "host_relay" and self.steady:  # replayed, or back to back, where measured, else from idle
            raw = (self.captured and getattr(self.profile, "host_relay_captured", None)) or \
                getattr(self.profile, "host_relay_steady", None) or getattr(self.profile, "host_relay", None)
        elif transfer == "p2p":  # back to back, where measured (collectives_steady["p2p"]), else from idle
            steady = (getattr(self.profile, "collectives_steady", None) or {}) if self.steady else {}
            raw = steady.get("p2p") or getattr(self.profile, "p2p", None)
        elif transfer in ("copy_engine", "host_link", "host_relay"):
            raw = getattr(self.profile, transfer, None)
        else:
            steady = (getattr(self.profile, "collectives_steady", None) or {}) if self.steady else {}
            collectives = getattr(self.profile, "collectives", None) or {}
            raw = steady.get(transfer) or collectives.get(transfer)
        points = []
        for point in raw or ():
            nbytes, ms = float(_field(point, "bytes", 0)), float(_field(point, "ms", 1))
            if nbytes > 0 and ms > 0 and math.isfinite(nbytes) and math.isfinite(ms):
                points.append((nbytes, ms))
        points.sort()
        self._memo[key] = points  # type: ignore[assignment]
        return points

    def transfer_ratio(self, transfer: str, nbytes: float, model_ms: Callable[[float], float],
                       context: tuple = ()) -> float:
        """measured/model ratio of a transfer at ``nbytes``, linear in log(bytes) between
        measured points and constant beyond them; 1.0 without a curve. ``context`` names
        what else ``model_ms`` depends on (group, transport), for the memo table."""
        points = self.curve(transfer)
        if not points or nbytes <= 0:
            return 1.0
        key = ("ratio", transfer, float(nbytes), context)
        if key in self._memo:
            return self._memo[key]
        logs = [math.log(b) for b, _ in points]
        ratios = [math.log(_clip(ms / model_ms(b))) for b, ms in points]
        ratio = _clip(math.exp(_log_linear(logs, ratios, math.log(nbytes))))
        self._memo[key] = ratio
        return ratio

    def transfer_ms(self, transfer: str, nbytes: float, model_ms: Callable[[float], float],
                    context: tuple = ()) -> float:
        """Calibrated time of a transfer of ``nbytes``: the model's fixed part (its time at 0
        bytes: call overhead, latency steps) plus its size-dependent part scaled by the
        measured/model ratio of the size-dependent parts at the profile's points (log-linear
        between them, constant beyond). A curve point timed from an idle GPU holds one call's
        host launch latency; it is not multiplied into every byte of a large transfer, nor into
        pieces queued back to back (whose fixed part the pipeline prices itself).
        The model alone without a curve."""
        model = model_ms(nbytes)
        points = self.curve(transfer)
        if not points or nbytes <= 0:
            return model
        fixed = model_ms(0.0)
        key = ("variable", transfer, float(nbytes), context)
        if key not in self._memo:
            logs, ratios = [], []
            for b, ms in points:
                variable = model_ms(b) - fixed
                if variable <= 0:
                    continue
                logs.append(math.log(b))
                ratios.append(math.log(_clip((ms - fixed) / variable) if ms > fixed else RATIO_LIMITS[0]))
            self._memo[key] = _clip(math.exp(_log_linear(logs, ratios, math.log(nbytes)))) if logs else 1.0
        return fixed + self._memo[key] * max(0.0, model - fixed)

    # -- contention -----------------------------------------------------------------
    def contention(self, transfer_kind: str) -> tuple[float, float] | None:
        """Measured (gemm_slowdown, transfer_slowdown) beside each other, or None."""
        table = getattr(self.profile, "contention", None) or {}
        entry = table.get(transfer_kind)
        if not entry:
            return None
        gemm = float(_field(entry, "gemm_slowdown", 0))
        transfer = float(_field(entry, "transfer_slowdown", 1))
        if not (math.isfinite(gemm) and math.isfinite(transfer)):
            return None
        return max(1.0, gemm), max(1.0, transfer)


def calibration_view(profile) -> CalibrationView | None:
    """A view over ``profile`` (None stays None; a view is passed through)."""
    if profile is None or isinstance(profile, CalibrationView):
        return profile
    return CalibrationView(profile)

r"""What the neighbours know: the regressors of ``baseline="autoregressive+spatial"``.

The autoregressive baseline (:mod:`xnp.data.lagged`) regresses the change at a
place on that place's own lagged changes.  Weather moves, so the changes around a
place say more: the spatial variant adds, for each earlier context frame ``k``,
the lagged change ``v_{-k} - v_0`` *averaged over the neighbourhood* at two
scales, and the place's anomaly from its surroundings in the last frame,
``v_0`` minus the neighbourhood mean of the last frame.

A neighbourhood mean is a Gaussian-kernel average over the observations of one
frame:

.. math::

    \bar x(m) = \frac{\sum_j w_{mj} x_j}{\sum_j w_{mj}},\qquad
    w_{mj} = \exp\!\left(-\tfrac12 (d_{mj} / \sigma)^2\right),\ d_{mj} < 3\sigma,

with ``d`` the straight-line (chord) distance, within 0.2 % of the great-circle
distance up to 1,200 km; with no observation within ``3σ`` it is 0
(no information: no change).  The scales are multiples (:data:`SMOOTHING`,
:data:`ANOMALY`) of the data's point spacing (the median distance from a training
place to its nearest neighbour), so the same regressors serve a 0.25° grid and a
station network.  The same function averages over the training places when the
coefficients are fitted and over the context points at prediction.

The scales were chosen on the validation days of ERA5 UK (days 17–18; fitted on days
1–16) by what matters, the forecasts of a network trained on the change from the
baseline (the 100 % case of ``recipes/benchmarks/era5_forecast.py``, scored by
``era5_forecast_validation.py``): with 1.5, 4 and 3 spacings (24, 65 and 49 km on
the 0.25° grid) its RMSE / CRPS were 0.964 / 0.549 K, with 150, 400 and 300 km
1.060 / 0.607 K, and with the per-cell ``"autoregressive"`` baseline 0.998 / 0.564 K.
The regression alone prefers the larger scales (RMSE 1.110 K against 1.172 K, and
1.233 K without the neighbourhood): what a network does not see well from a random
subset of the context is the close neighbourhood; the wide one it averages itself.

When the context keeps only a share of each frame (``context_fraction``), the
spacing is that of the kept observations, ``spacing / sqrt(fraction)``.  Chosen on
the same validation days with a random 10 % of the cells: with the full grid's
spacing the kernels hold one or no observation and the network's forecasts were
worse than with the per-cell regression (RMSE 1.302 / CRPS 0.648 K against 1.141 /
0.640 K); with the thinned spacing (77, 207 and 155 km) 1.112 / 0.633 K (the
regression alone: 1.206 K against 1.248 K with the grid's spacing and 1.376 K per
cell).

Examples
--------
>>> sites = np.array([[50.0, 0.0], [50.0, 0.25], [50.0, 0.5]])
>>> round(spacing_km(sites), 1)
17.9
>>> [round(x, 1) for x in scales_km(sites)]
[26.8, 71.5, 53.6]
>>> values, observed = np.array([[1.0], [2.0], [3.0]]), np.ones((3, 1), bool)
>>> smooth(sites, sites[:1], 10.0, values, observed).round(3)  # one target
array([[1.168]])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.spatial import cKDTree

from xnp.errors import ConfigError
from xnp.geo.distance import EARTH_RADIUS_KM
from xnp.geo.sphere import unit_vectors

__all__ = [
    "ANOMALY",
    "CUTOFF",
    "MAX_WEIGHTS",
    "SMOOTHING",
    "at_targets",
    "scales_km",
    "smooth",
    "spacing_km",
]

#: Scales of the smoothed lagged changes, in point spacings.
SMOOTHING = (1.5, 4.0)
#: Scale of the neighbourhood the anomaly is taken from, in point spacings.
ANOMALY = 3.0
#: The kernel is cut at this many scales.
CUTOFF = 3.0
#: Most kernel weights :func:`smooth` holds at once.
MAX_WEIGHTS = 1 << 22


def scales_km(sites: np.ndarray, fraction: float = 1.0) -> tuple[float, ...]:
    """The kernel scales (km) for data at ``sites``: the smoothings', then the anomaly's.

    ``fraction`` is the share of each frame's places the context keeps
    (``ForecastTasks(context_fraction=...)``): the regressors are averages over the
    kept observations, whose spacing is about ``spacing / sqrt(fraction)``, so the
    scales are multiples of that.
    """
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"fraction must be in (0, 1]; got {fraction}.")
    spacing = spacing_km(sites) / np.sqrt(fraction)
    return tuple(float(k * spacing) for k in (*SMOOTHING, ANOMALY))


def spacing_km(sites: np.ndarray) -> float:
    """The median great-circle distance (km) from each place to its nearest other place."""
    xyz = unit_vectors(np.asarray(sites, np.float64))
    if len(xyz) < 2:
        raise ConfigError(
            "baseline='autoregressive+spatial' needs at least two places to have neighbours; "
            "use baseline='autoregressive'."
        )
    chord, _ = cKDTree(xyz).query(xyz, k=2)
    spacing = float(np.median(_km(chord[:, 1])))
    if not spacing > 0:
        raise ConfigError(
            "most places of the training data coincide (median spacing 0 km): "
            "baseline='autoregressive+spatial' needs distinct places."
        )
    return spacing


def smooth(
    sources: np.ndarray,
    targets: np.ndarray,
    sigma_km: float,
    values: np.ndarray,
    observed: np.ndarray,
) -> np.ndarray:
    """Kernel averages ``[M, B]`` at ``targets`` of ``values`` ``[N, B]`` at ``sources``.

    ``sources`` and ``targets`` are latitude and longitude (degrees).  Each column is
    averaged over its own ``observed`` sources with Gaussian weights of scale
    ``sigma_km``, cut at :data:`CUTOFF` scales; 0 where a target has none within
    reach.  The weights are formed densely, a chunk of targets at a time
    (:data:`MAX_WEIGHTS` at once): the cost is ``M × N`` per call, which suits the
    neighbourhoods of hundreds of kilometres this baseline uses.
    """
    src = unit_vectors(np.asarray(sources, np.float64))
    dst = unit_vectors(np.asarray(targets, np.float64))
    observed = np.asarray(observed, bool)
    values = np.asarray(values, np.float64)
    both = np.concatenate([np.where(observed, values, 0.0), observed.astype(np.float64)], 1)
    out = np.zeros((len(dst), both.shape[1]))
    chunk = max(1, MAX_WEIGHTS // max(len(src), 1))
    # (d / σ)² = (R / σ)² |a - b|² = 2 (R / σ)² (1 - a·b) for unit vectors a, b
    rate = (EARTH_RADIUS_KM / sigma_km) ** 2
    least = 1.0 - 0.5 * (CUTOFF * sigma_km / EARTH_RADIUS_KM) ** 2  # a·b at the cutoff
    for start in range(0, len(dst), chunk):
        dot = dst[start : start + chunk] @ src.T
        weight = np.where(dot > least, np.exp(rate * (dot - 1.0)), 0.0)
        out[start : start + chunk] = weight @ both
    total, weight = np.split(out, 2, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(weight > 0, total / np.where(weight > 0, weight, 1.0), 0.0)


def at_targets(
    context: tuple[np.ndarray, np.ndarray, np.ndarray],
    targets: np.ndarray,
    *,
    last: np.ndarray,
    before: np.ndarray,
    latest: float,
    lags: Sequence[float],
    scales: Sequence[float],
) -> list[np.ndarray]:
    """The neighbourhood regressors ``[M, Dy]`` at ``targets``, from context points.

    ``context`` is ``(s, t, f)`` of the context points; ``last`` ``[M, Dy]`` the
    persisted value at the targets and ``before`` ``[N, Dy]`` at the context points
    (the last frame's nearest observation); ``latest`` the time of the last frame,
    ``lags`` those of the earlier ones relative to it, ``scales`` the kernel scales.
    As :func:`xnp.data.lagged.spatial_at_sites` forms them at the training places:
    each earlier frame's change at its observations, kernel-averaged at the targets
    at each smoothing scale; then the targets' last value less the last frame's
    kernel average.
    """
    s, t, f = (np.asarray(a, np.float64) for a in context)
    frames = [np.abs(t - (latest + lag)) < 1.0 / 60.0 for lag in lags]
    newest = np.abs(t - latest) < 1.0 / 60.0
    # frames observed at the same places (gridded data) are averaged in one pass
    groups: list[tuple[np.ndarray, list[int]]] = []
    for j, in_frame in enumerate(frames):
        same = [g for g in groups if np.array_equal(s[g[0]], s[in_frame])]
        if same:
            same[0][1].append(j)
        else:
            groups.append((in_frame, [j]))
    dy = f.shape[1]
    by_frame: dict[tuple[float, int], np.ndarray] = {}
    for sigma in scales[:-1]:
        for where, members in groups:
            change = np.concatenate([f[frames[j]] - before[frames[j]] for j in members], 1)
            out = smooth(s[where], targets, sigma, change, np.isfinite(change))
            for i, j in enumerate(members):
                by_frame[sigma, j] = out[:, i * dy : (i + 1) * dy]
    smoothed = [by_frame[sigma, j] for sigma in scales[:-1] for j in range(len(frames))]
    now = f[newest]
    anomaly = smooth(s[newest], targets, scales[-1], now, np.isfinite(now))
    return [*smoothed, last - anomaly]


def _km(chord: np.ndarray) -> np.ndarray:
    """Great-circle kilometres of unit-sphere chord lengths."""
    return 2.0 * EARTH_RADIUS_KM * np.arcsin(np.clip(np.asarray(chord) / 2.0, 0.0, 1.0))

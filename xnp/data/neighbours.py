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

Averages are isotropic: they cannot say from which side weather arrives, and
neither can a network whose attention sees only distances.  The gradient kind,
``baseline="autoregressive+gradient"``, adds the local *gradient* (east and north
components, :func:`gradient`) of the last frame at 1.5, 3 and 6 spacings and of its
change since the frame before at 3 spacings (:data:`GRADIENT`): the slopes of a
plane fitted at each target to the frame's observations with the Gaussian weights
above.  With coefficients per initialisation hour, the regression learns how the
slopes of the field carry into the next hours: ``-u·∇T``, advection by the training
period's mean wind, and whatever else a slope foretells.  On the validation days of
ERA5 UK (fitted on days 1–16, the 100 % case), the regression alone forecast with RMSE
1.092 K against the spatial kind's 1.172 K (the scales were chosen on those days
among three sets tried on the regression alone, before any network was fitted on it;
the gradients of the earlier frames' changes added nothing there).

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
    "GRADIENT",
    "MAX_WEIGHTS",
    "SMOOTHING",
    "at_targets",
    "gradient",
    "gradient_scales_km",
    "gradients_of",
    "scales_km",
    "smooth",
    "spacing_km",
]

#: Scales of the smoothed lagged changes, in point spacings.
SMOOTHING = (1.5, 4.0)
#: Scale of the neighbourhood the anomaly is taken from, in point spacings.
ANOMALY = 3.0
#: Scales of the last frame's local gradient (``"autoregressive+gradient"``), in point
#: spacings, then the scale of its last change's gradient.
GRADIENT = (1.5, 3.0, 6.0, 3.0)
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
    spacing = _kept_spacing_km(sites, fraction)
    return tuple(float(k * spacing) for k in (*SMOOTHING, ANOMALY))


def gradient_scales_km(sites: np.ndarray, fraction: float = 1.0) -> tuple[float, ...]:
    """The gradients' scales (km) for data at ``sites``: :data:`GRADIENT` × the kept spacing.

    As :func:`scales_km`: multiples of the spacing of the observations each frame
    keeps, ``spacing / sqrt(fraction)``.
    """
    spacing = _kept_spacing_km(sites, fraction)
    return tuple(float(k * spacing) for k in GRADIENT)


def _kept_spacing_km(sites: np.ndarray, fraction: float) -> float:
    """The spacing of the observations a frame keeps: ``spacing / sqrt(fraction)``."""
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"fraction must be in (0, 1]; got {fraction}.")
    return spacing_km(sites) / np.sqrt(fraction)


def spacing_km(sites: np.ndarray) -> float:
    """The median great-circle distance (km) from each place to its nearest other place."""
    xyz = unit_vectors(np.asarray(sites, np.float64))
    if len(xyz) < 2:
        raise ConfigError(
            "the spatial baselines ('autoregressive+spatial', '+gradient') need at least two "
            "places to have neighbours; use baseline='autoregressive'."
        )
    chord, _ = cKDTree(xyz).query(xyz, k=2)
    spacing = float(np.median(_km(chord[:, 1])))
    if not spacing > 0:
        raise ConfigError(
            "most places of the training data coincide (median spacing 0 km): "
            "the spatial baselines ('autoregressive+spatial', '+gradient') need distinct places."
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


def _tangent_frames(xyz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit east and north vectors ``[M, 3]`` at unit vectors ``xyz`` (east at the poles: +y)."""
    horizontal = np.hypot(xyz[:, 0], xyz[:, 1])
    polar = horizontal < 1e-12
    cos_lon = np.where(polar, 1.0, xyz[:, 0] / np.where(polar, 1.0, horizontal))
    sin_lon = np.where(polar, 0.0, xyz[:, 1] / np.where(polar, 1.0, horizontal))
    east = np.stack([-sin_lon, cos_lon, np.zeros_like(cos_lon)], -1)
    north = np.cross(xyz, east)
    return east, north


def gradient(
    sources: np.ndarray,
    targets: np.ndarray,
    sigma_km: float,
    values: np.ndarray,
    observed: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    r"""The local gradient of ``values`` at ``targets``: east and north components ``[M, B]``.

    At each target, a plane :math:`a + g_e e + g_n n` is fitted by weighted least
    squares to each column's ``observed`` sources, with the Gaussian weights of
    :func:`smooth` (scale ``sigma_km``, cut at :data:`CUTOFF` scales), ``e`` and ``n``
    the sources' displacements east and north in the target's tangent plane.  The
    slopes are returned in units of the values per ``sigma_km`` (so the regressors
    of different scales are of one size).  A small ridge on the slopes (a
    thousandth of the weights' total) keeps a target with collinear or too few
    neighbours finite: with none it gets 0 (no information: no gradient).

    Examples
    --------
    >>> lat, lon = np.meshgrid(
    ...     np.arange(50.0, 52.01, 0.25), np.arange(0.0, 3.01, 0.25), indexing="ij"
    ... )
    >>> sites = np.stack([lat.ravel(), lon.ravel()], -1)
    >>> field = (sites[:, :1] - 51.0) * 111.2  # rises 1 per km northwards
    >>> east, north = gradient(sites, np.array([[51.0, 1.5]]), 50.0, field, field == field)
    >>> round(float(east[0, 0]), 2), round(float(north[0, 0]), 1)  # per 50 km (less the ridge)
    (0.0, 49.9)
    """
    src = unit_vectors(np.asarray(sources, np.float64))
    dst = unit_vectors(np.asarray(targets, np.float64))
    observed = np.asarray(observed, bool)
    values = np.where(observed, np.asarray(values, np.float64), 0.0)
    mask = observed.astype(np.float64)
    n_cols = values.shape[1]
    # The tangent displacement of a source u from a target is R (E·u, N·u) (E, N: the
    # target's east and north; E·u_m = N·u_m = 0), so every weighted moment over the
    # sources is a contraction of the target's E and N with kernel averages of
    # products of the sources' unit-vector components: one product with the weights.
    pairs = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
    columns = [mask, *(mask * src[:, c, None] for c in range(3)),
               *(mask * (src[:, c] * src[:, d])[:, None] for c, d in pairs),
               values, *(values * src[:, c, None] for c in range(3))]  # fmt: skip
    stacked = np.concatenate(columns, 1)  # [N, 14 B]
    east_out = np.zeros((len(dst), n_cols))
    north_out = np.zeros_like(east_out)
    chunk = max(1, MAX_WEIGHTS // max(len(src), 1))
    rate = (EARTH_RADIUS_KM / sigma_km) ** 2
    least = 1.0 - 0.5 * (CUTOFF * sigma_km / EARTH_RADIUS_KM) ** 2
    scale = EARTH_RADIUS_KM / sigma_km  # tangent displacements in units of sigma
    for start in range(0, len(dst), chunk):
        block = dst[start : start + chunk]
        dot = block @ src.T
        sums = np.where(dot > least, np.exp(rate * (dot - 1.0)), 0.0) @ stacked
        sums = sums.reshape(len(block), 14, n_cols)
        first, second = sums[:, 1:4], np.zeros((len(block), 3, 3, n_cols))
        for i, (c, d) in enumerate(pairs):
            second[:, c, d] = second[:, d, c] = sums[:, 4 + i]
        east, north = _tangent_frames(block)
        s0, r0 = sums[:, 0], sums[:, 10]
        se = scale * np.einsum("mc,mcb->mb", east, first)
        sn = scale * np.einsum("mc,mcb->mb", north, first)
        see = scale**2 * np.einsum("mc,md,mcdb->mb", east, east, second)
        sen = scale**2 * np.einsum("mc,md,mcdb->mb", east, north, second)
        snn = scale**2 * np.einsum("mc,md,mcdb->mb", north, north, second)
        re = scale * np.einsum("mc,mcb->mb", east, sums[:, 11:14])
        rn = scale * np.einsum("mc,mcb->mb", north, sums[:, 11:14])
        gram = np.stack(
            [
                np.stack([s0, se, sn], -1),
                np.stack([se, see, sen], -1),
                np.stack([sn, sen, snn], -1),
            ],
            -2,
        )  # [m, B, 3, 3]
        ridge = 1e-3 * s0  # on the slopes only
        empty = np.where(s0 > 0, 0.0, 1.0)  # keeps a target without neighbours solvable
        gram[..., 0, 0] += empty
        gram[..., 1, 1] += ridge + empty
        gram[..., 2, 2] += ridge + empty
        fit = np.linalg.solve(gram, np.stack([r0, re, rn], -1)[..., None])[..., 0]
        east_out[start : start + chunk] = np.where(s0 > 0, fit[..., 1], 0.0)
        north_out[start : start + chunk] = np.where(s0 > 0, fit[..., 2], 0.0)
    return east_out, north_out


def gradients_of(
    sources: tuple[np.ndarray, np.ndarray, np.ndarray],
    change: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    targets: np.ndarray,
    scales: Sequence[float],
) -> list[np.ndarray]:
    """The gradient regressors ``[M, B]`` at ``targets``: east then north, per scale.

    ``sources`` is ``(places, values, observed)`` of the last frame, whose gradient is
    taken at each of ``scales[:-1]``; ``change`` the same of the change since the frame
    before (the most recent lag; None without lags), taken at ``scales[-1]``.
    """
    places, values, observed = sources
    out = []
    for sigma in scales[:-1]:
        out += list(gradient(places, targets, sigma, values, observed))
    if change is not None:
        out += list(gradient(change[0], targets, scales[-1], *change[1:]))
    return out


def at_targets(
    context: tuple[np.ndarray, np.ndarray, np.ndarray],
    targets: np.ndarray,
    *,
    last: np.ndarray,
    before: np.ndarray,
    latest: float,
    lags: Sequence[float],
    scales: Sequence[float],
    gradients: Sequence[float] | None = None,
) -> list[np.ndarray]:
    """The neighbourhood regressors ``[M, Dy]`` at ``targets``, from context points.

    ``context`` is ``(s, t, f)`` of the context points; ``last`` ``[M, Dy]`` the
    persisted value at the targets and ``before`` ``[N, Dy]`` at the context points
    (the last frame's nearest observation); ``latest`` the time of the last frame,
    ``lags`` those of the earlier ones relative to it, ``scales`` the kernel scales.
    As :func:`xnp.data.lagged.spatial_at_sites` forms them at the training places:
    each earlier frame's change at its observations, kernel-averaged at the targets
    at each smoothing scale; then the targets' last value less the last frame's
    kernel average; with ``gradients`` (:func:`gradient_scales_km`), the gradient
    regressors of :func:`gradients_of` after them.
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
    if gradients is None:
        return [*smoothed, last - anomaly]
    change = None
    if frames:  # the change since the frame before, at that frame's observations
        recent = f[frames[-1]] - before[frames[-1]]
        change = (s[frames[-1]], recent, np.isfinite(recent))
    slopes = gradients_of((s[newest], now, np.isfinite(now)), change, targets, gradients)
    return [*smoothed, last - anomaly, *slopes]


def _km(chord: np.ndarray) -> np.ndarray:
    """Great-circle kilometres of unit-sphere chord lengths."""
    return 2.0 * EARTH_RADIUS_KM * np.arcsin(np.clip(np.asarray(chord) / 2.0, 0.0, 1.0))

r"""The autoregressive forecast baseline: the change over a lead, regressed on lagged changes.

For ``ForecastTasks(baseline="autoregressive")`` the baseline at a target is

.. math::

    v_0 + c_0 + \sum_k c_k\,(v_{-k} - v_0) + c_d\,d

where :math:`v_0` is the last observed value nearest to the target (persistence),
:math:`v_{-k}` the value nearest to it in the context frame ``k`` steps earlier,
:math:`d` the mean diurnal change of the place and hour
(:class:`~xnp.data.baseline.ForecastBaseline`), and the coefficients are fitted by
least squares per lead and hour of initialisation over the training times and
places.  Where the tasks keep only part of each context frame
(``context_fraction < 1``), the fit sees each frame thinned the same way, so that
its lagged values come from the nearest kept point as they will at prediction.

Examples
--------
>>> s = np.array([[0.0, 0.0], [0.0, 10.0], [0.0, 0.0]])
>>> t, f = np.array([-6.0, 0.0, 0.0]), np.array([[1.0], [2.0], [3.0]])
>>> nearest_in_frame(s, t, f, np.array([[0.0, 1.0]]), time=-6.0)
array([[1.]])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.spatial import cKDTree

from xnp.data.neighbours import gradients_of, smooth
from xnp.data.times import match_hours
from xnp.geo.sphere import unit_vectors

__all__ = [
    "MAX_INITS",
    "features",
    "fit_coefficients",
    "n_spatial",
    "nearest_in_frame",
    "persisting",
    "spatial_at_sites",
]

#: Most initialisation times per lead the regression is fitted on (evenly thinned beyond).
MAX_INITS = 2048
#: Fewest rows per coefficient before an hour falls back to persistence + diurnal change.
MIN_ROWS_PER_COEF = 10


def nearest_in_frame(
    s: np.ndarray, t: np.ndarray, f: np.ndarray, targets: np.ndarray, *, time: float
) -> np.ndarray:
    """The value nearest to each target ``[M, Dy]`` in the context frame at ``time``.

    ``t`` holds the context points' hours (relative to any reference); a point is in
    the frame when it lies within a minute of ``time``.  A variable the frame does
    not observe is NaN.
    """
    f = np.asarray(f, np.float64)
    out = np.full((len(targets), f.shape[1]), np.nan)
    in_frame = np.abs(np.asarray(t, np.float64) - time) < 1.0 / 60.0
    query = unit_vectors(np.asarray(targets, np.float64))
    for j in range(f.shape[1]):
        seen = in_frame & np.isfinite(f[:, j])
        if seen.any():
            _, nearest = cKDTree(unit_vectors(np.asarray(s, np.float64)[seen])).query(query)
            out[:, j] = f[seen, j][nearest]
    return out


def features(
    last: np.ndarray,
    lagged: Sequence[np.ndarray],
    change: np.ndarray,
    extra: Sequence[np.ndarray] = (),
) -> np.ndarray:
    """The regressors ``[..., F]``: 1, each lagged change ``v_-k - v_0``, the diurnal change.

    A lagged value that is missing (NaN) counts as no change at that lag.  ``extra``
    regressors (the neighbourhood's, :mod:`xnp.data.neighbours`) follow.
    """
    lags = [np.where(np.isfinite(v), v - last, 0.0) for v in lagged]
    return np.stack([np.ones_like(last), *lags, change, *extra], axis=-1)


def n_spatial(
    n_lags: int, scales: Sequence[float], gradients: Sequence[float] | None = None
) -> int:
    """How many neighbourhood regressors ``"autoregressive+spatial"`` adds for ``n_lags``.

    ``scales`` are the kernel scales (:func:`xnp.data.neighbours.scales_km`): the
    smoothings', then the anomaly's.  ``gradients``
    (:func:`xnp.data.neighbours.gradient_scales_km`, ``"autoregressive+gradient"``)
    add two (east, north) per scale of the last frame and two for its last change
    (when there is an earlier frame).
    """
    count = (len(scales) - 1) * n_lags + 1
    if gradients is not None:
        count += 2 * (len(gradients) - 1) + (2 if n_lags else 0)
    return count


def spatial_at_sites(
    sites: np.ndarray,
    scales: Sequence[float],
    last: np.ndarray,
    raw: Sequence[np.ndarray],
    seen: Sequence[np.ndarray],
    gradients: Sequence[float] | None = None,
) -> list[np.ndarray]:
    """The neighbourhood regressors ``[n, S]`` at every training place.

    ``last`` is the filled last frame ``[n, S]``; ``raw`` and ``seen`` hold each
    context frame's values and observed masks ``[n, S]``, the earlier frames in the
    order of the lags and the last frame at the end; ``scales`` the kernel scales
    (the smoothings', then the anomaly's); ``gradients`` the gradients' scales
    (:func:`xnp.data.neighbours.gradients_of`), or None.
    """
    n, k = len(last), len(raw) - 1
    changes = np.concatenate([(frame - last).T for frame in raw[:-1]], 1)  # [S, k n]
    ok = np.concatenate([m.T for m in seen[:-1]], 1)
    out = []
    for sigma in scales[:-1]:
        smoothed = smooth(sites, sites, sigma, changes, ok)
        out += [smoothed[:, j * n : (j + 1) * n].T for j in range(k)]
    anomaly = smooth(sites, sites, scales[-1], raw[-1].T, seen[-1].T).T
    out.append(last - anomaly)
    if gradients is not None:
        change = None
        if k:  # the change since the frame before, at that frame's observations
            change = (sites, (raw[-2] - last).T, seen[-2].T)
        slopes = gradients_of((sites, raw[-1].T, seen[-1].T), change, sites, gradients)
        out += [g.T for g in slopes]
    return out


def persisting(n_lags: int, n_vars: int, n_extra: int = 0) -> np.ndarray:
    """Coefficients ``[F, Dy]`` of persistence plus the diurnal change (the fallback)."""
    coef = np.zeros((n_lags + 2 + n_extra, n_vars))
    coef[n_lags + 1] = 1.0
    return coef


def _filled(x: np.ndarray, xyz: np.ndarray, keep: np.ndarray | None) -> np.ndarray:
    """A frame ``[S]`` at every place: its own value, or the nearest kept observed one's."""
    observed = np.isfinite(x) if keep is None else np.isfinite(x) & keep
    if observed.all():
        return x
    if not observed.any():
        return np.full_like(x, np.nan)
    _, nearest = cKDTree(xyz[observed]).query(xyz)
    return x[observed][nearest]


def fit_coefficients(
    arrays: Sequence[np.ndarray],
    hours: np.ndarray,
    sites: np.ndarray,
    leads: Sequence[float],
    lags: Sequence[float],
    hour_list: np.ndarray,
    change: np.ndarray,
    *,
    fraction: float = 1.0,
    seed: int = 0,
    scales: Sequence[float] | None = None,
    gradients: Sequence[float] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Least-squares coefficients per lead and initialisation hour.

    Parameters
    ----------
    arrays : sequence of ndarray ``[T, S]``
        Each variable's training values at the places (NaN: not observed).
    hours : ndarray ``[T]``
        The training times (hours since 1970).
    sites : ndarray ``[S, 2]``
        Latitude and longitude of the places.
    leads, lags : sequence of float
        Lead times (hours, positive) and lags of the earlier context frames (hours,
        negative).
    hour_list : ndarray ``[H]``
        The initialisation hours of day the coefficients are kept for.
    change : ndarray ``[L, H, S, Dy]``
        The diurnal climatology (the regressor after the lags).
    fraction : float
        Share of each frame's observations the tasks keep (simulated with ``seed``).
    scales : sequence of float, optional
        Kernel scales (km): adds the neighbourhood regressors of
        ``"autoregressive+spatial"`` (:mod:`xnp.data.neighbours`), averaged over the
        observations each frame keeps.
    gradients : sequence of float, optional
        The gradients' scales (km), with ``scales``: adds the gradient regressors of
        ``"autoregressive+gradient"``.

    Returns
    -------
    coef : ndarray ``[L, H, F, Dy]``
        With ``F = len(lags) + 2`` (plus :func:`n_spatial` with ``scales``); hours
        with too few rows persist (:func:`persisting`).
    squares, counts : ndarray ``[Dy]``
        Sum of squared residuals and the number of rows, per variable.
    """
    arrays = [np.asarray(a) for a in arrays]  # (a dask-backed variable: read once)
    n_lags, n_vars = len(lags), len(arrays)
    n_extra = 0 if scales is None else n_spatial(n_lags, scales, gradients)
    n_coef = n_lags + 2 + n_extra
    hod = np.round(np.mod(hours, 24.0)).astype(np.int64) % 24
    xyz = unit_vectors(np.asarray(sites, np.float64))
    rng = np.random.default_rng(seed)
    thinned = fraction < 1.0
    masks: dict[int, np.ndarray | None] = {}
    cache: list[dict[int, np.ndarray]] = [{} for _ in arrays]

    def frame(c: int, i: int) -> np.ndarray:
        if i not in masks:  # one simulated thinning per time, shared by the variables
            masks[i] = rng.random(len(sites)) < fraction if thinned else None
        if i not in cache[c]:
            cache[c][i] = _filled(np.asarray(arrays[c][i], np.float64), xyz, masks[i])
        return cache[c][i]

    def observed(c: int, i: int) -> tuple[np.ndarray, np.ndarray]:
        frame(c, i)  # draws the time's thinning
        x = np.asarray(arrays[c][i], np.float64)
        ok = np.isfinite(x) if masks[i] is None else np.isfinite(x) & masks[i]
        return x, ok

    coef = np.empty((len(leads), hour_list.size, n_coef, n_vars))
    squares, counts = np.zeros(n_vars), np.zeros(n_vars)
    lagged_at = [match_hours(hours, hours + float(lag)) for lag in lags]
    for a, lead in enumerate(leads):
        ahead = match_hours(hours, hours + float(lead))
        ok = ahead >= 0
        for idx in lagged_at:
            ok &= idx >= 0
        inits = np.flatnonzero(ok)
        if inits.size > MAX_INITS:
            inits = inits[np.linspace(0, inits.size - 1, MAX_INITS).round().astype(np.int64)]
        for b, h in enumerate(hour_list):
            at = inits[hod[inits] == h]
            for c in range(n_vars):
                coef[a, b, :, c] = persisting(n_lags, 1, n_extra)[:, 0]
                if at.size == 0:
                    continue
                last = np.stack([frame(c, i) for i in at])  # [n, S]
                lagged = [np.stack([frame(c, idx[i]) for i in at]) for idx in lagged_at]
                extra = []
                if scales is not None:
                    frames = [[observed(c, idx[i]) for i in at] for idx in lagged_at]
                    frames.append([observed(c, i) for i in at])
                    raw = [np.stack([x for x, _ in f]) for f in frames]
                    seen = [np.stack([ok for _, ok in f]) for f in frames]
                    extra = spatial_at_sites(sites, scales, last, raw, seen, gradients)
                diurnal = np.broadcast_to(change[a, b, :, c], last.shape)
                x = features(last, lagged, diurnal, extra)
                y = np.asarray(arrays[c][ahead[at]], np.float64) - last
                rows = np.isfinite(y) & np.isfinite(x).all(-1)
                if rows.sum() < MIN_ROWS_PER_COEF * n_coef:
                    continue
                design, target = x[rows], y[rows]
                coef[a, b, :, c] = np.linalg.lstsq(design, target, rcond=None)[0]
                squares[c] += float(np.sum((target - design @ coef[a, b, :, c]) ** 2))
                counts[c] += int(rows.sum())
    return coef, squares, counts

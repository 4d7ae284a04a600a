"""The pointwise scores of a Gaussian prediction, as numpy kernels.

Each kernel takes the truth ``y``, the predictive mean ``mu`` and the standard
deviation ``sigma`` (float arrays) and returns float64 with NaN where the point is
not scored (any input missing), so sums over points skip it: squared and absolute
error of the mean, the continuous ranked probability score (CRPS) and the negative
log-likelihood (NLL) of the Gaussian, whether the truth is inside a central
predictive interval (coverage), and the probability integral transform (PIT).
``pointwise`` applies a kernel to xarray objects, lazily for dask-backed ones.

This module imports numpy, scipy, xarray and :mod:`xnp.errors` only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import xarray as xr
from scipy import special

from xnp.errors import ConfigError

__all__ = [
    "COVERAGE_LEVELS",
    "METRICS",
    "SUMMED_SCORES",
    "pointwise",
    "score_pit",
    "score_valid",
]

#: Nominal levels of the central predictive intervals whose coverage is reported.
COVERAGE_LEVELS = (0.5, 0.9, 0.95)

#: The metrics :func:`xnp.evaluate` returns for every variable, in order.
METRICS = ("rmse", "mae", "crps", "nll", "coverage_50", "coverage_90", "coverage_95", "n")

_INV_SQRT_PI = 1.0 / np.sqrt(np.pi)


def _prepare(y: Any, mu: Any, sigma: Any) -> tuple[np.ndarray, ...]:
    y, mu, sigma = (np.asarray(a, np.float64) for a in (y, mu, sigma))
    valid = np.isfinite(y) & np.isfinite(mu) & np.isfinite(sigma)
    if np.any(sigma[valid] < 0):
        raise ConfigError(
            "the predictive standard deviation has negative values; it must be ≥ 0. "
            "Check that the `_std` variables really hold standard deviations."
        )
    return y - mu, sigma, valid


def _z(err: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """``err / sigma``, ±inf (or 0 for a zero error) where ``sigma == 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = err / sigma
    degenerate = np.where(err > 0, np.inf, np.where(err < 0, -np.inf, 0.0))
    return np.where(sigma > 0, z, degenerate)


def score_valid(y: Any, mu: Any, sigma: Any) -> np.ndarray:
    """1 where a point is scored (truth, mean and std all finite), else 0.

    Parameters
    ----------
    y, mu, sigma : array_like
        The truth, the predictive mean and the predictive standard deviation.

    Returns
    -------
    numpy.ndarray
        float64, 1.0 or 0.0 per point; summed over points, the number scored.

    Raises
    ------
    ConfigError
        If ``sigma`` is negative at a scored point.
    """
    _, _, valid = _prepare(y, mu, sigma)
    return valid.astype(np.float64)


def _score_se(y: Any, mu: Any, sigma: Any) -> np.ndarray:
    err, _, valid = _prepare(y, mu, sigma)
    return np.where(valid, err * err, np.nan)


def _score_ae(y: Any, mu: Any, sigma: Any) -> np.ndarray:
    err, _, valid = _prepare(y, mu, sigma)
    return np.where(valid, np.abs(err), np.nan)


def _score_crps(y: Any, mu: Any, sigma: Any) -> np.ndarray:
    err, sigma, valid = _prepare(y, mu, sigma)
    z = np.where(sigma > 0, _z(err, sigma), 0.0)
    gauss = sigma * (z * (2.0 * special.ndtr(z) - 1.0) + 2.0 * _phi(z) - _INV_SQRT_PI)
    crps = np.where(sigma > 0, gauss, np.abs(err))
    return np.where(valid, crps, np.nan)


def _score_nll(y: Any, mu: Any, sigma: Any) -> np.ndarray:
    err, sigma, valid = _prepare(y, mu, sigma)
    safe = np.where(sigma > 0, sigma, 1.0)
    nll = 0.5 * np.log(2.0 * np.pi * safe * safe) + 0.5 * (err / safe) ** 2
    nll = np.where(sigma > 0, nll, np.inf)
    return np.where(valid, nll, np.nan)


def _coverage_score(level: float):
    half_width = float(special.ndtri(0.5 + 0.5 * level))

    def score(y: Any, mu: Any, sigma: Any) -> np.ndarray:
        err, sigma, valid = _prepare(y, mu, sigma)
        inside = (np.abs(err) <= half_width * sigma).astype(np.float64)
        return np.where(valid, inside, np.nan)

    return score


def score_pit(y: Any, mu: Any, sigma: Any) -> np.ndarray:
    """The probability integral transform ``Φ((y − μ)/σ)`` of every point.

    Parameters
    ----------
    y, mu, sigma : array_like
        The truth, the predictive mean and the predictive standard deviation.

    Returns
    -------
    numpy.ndarray
        float64 in [0, 1] (0 or 1 below or above a zero ``sigma``, 0.5 on it); NaN
        where the point is not scored.

    Raises
    ------
    ConfigError
        If ``sigma`` is negative at a scored point.
    """
    err, sigma, valid = _prepare(y, mu, sigma)
    return np.where(valid, special.ndtr(_z(err, sigma)), np.nan)


def _phi(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)


#: The kernels :func:`xnp.evaluate` sums over points and averages: squared error
#: (``se``), absolute error (``ae``), ``crps``, ``nll`` and the coverage of each level
#: of :data:`COVERAGE_LEVELS` (``coverage_50``, ...).
SUMMED_SCORES: dict[str, Callable[[Any, Any, Any], np.ndarray]] = {
    "se": _score_se,
    "ae": _score_ae,
    "crps": _score_crps,
    "nll": _score_nll,
    **{f"coverage_{round(100 * p)}": _coverage_score(p) for p in COVERAGE_LEVELS},
}


def pointwise(fn: Any, y: xr.DataArray, mu: xr.DataArray, sigma: xr.DataArray) -> xr.DataArray:
    """Apply a numpy score point by point (lazily for dask-backed inputs).

    Parameters
    ----------
    fn : callable
        A kernel ``fn(y, mu, sigma) -> ndarray`` of this module.
    y, mu, sigma : DataArray
        The truth, mean and std on the same points (see
        :func:`xnp.scoring.align.pair`).

    Returns
    -------
    DataArray
        float64, without the inputs' attributes.
    """
    return xr.apply_ufunc(
        fn, y, mu, sigma, dask="parallelized", output_dtypes=[np.float64], keep_attrs=False
    )

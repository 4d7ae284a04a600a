"""Climatologies per hour of day and place: the forecast baselines' stored means.

:class:`~xnp.data.baseline.ForecastBaseline` keeps the mean change over each lead
per initialisation hour and place of the training data (and the regression's
coefficients per lead and hour).  These helpers fill the places an hour never observed
and read a climatology between the hours and leads it holds.

Examples
--------
>>> hours = np.array([0.0, 12.0])
>>> interpolate(np.array([[0.0], [12.0]]), hours, 18.0, circular=True)  # wraps past 24 h
array([6.], dtype=float32)
"""

from __future__ import annotations

import warnings

import numpy as np

from xnp.errors import EmptyDataError

__all__ = ["fill_places", "interpolate"]


def fill_places(change: np.ndarray) -> np.ndarray:
    """``change`` ``[L, H, S, Dy]`` with the places never observed at an hour filled.

    Such a place takes the hour's mean over the places; a variable no place observed
    at some hour is an :class:`~xnp.errors.EmptyDataError`.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(change, axis=2, keepdims=True)
    if not np.isfinite(mean).all():
        raise EmptyDataError(
            "a variable was never observed at two times a lead apart in the training data, "
            "so its mean change cannot be learned; use baseline='persistence' or none."
        )
    return np.where(np.isfinite(change), change, mean)


def interpolate(values: np.ndarray, axis: np.ndarray, x: float, *, circular: bool) -> np.ndarray:
    """``values`` (first axis along ``axis``) at ``x``: linear between neighbours.

    Circular axes (hours of day, period 24) wrap; others are clamped at their ends.
    """
    if axis.size == 1:
        return values[0]
    if circular:
        grid = np.concatenate([axis - 24.0, axis, axis + 24.0])
        values = np.concatenate([values, values, values])
    else:
        grid = axis
        x = float(np.clip(x, axis.min(), axis.max()))
    hi = int(np.clip(np.searchsorted(grid, x), 1, grid.size - 1))
    lo = hi - 1
    w = 0.0 if grid[hi] == grid[lo] else (x - grid[lo]) / (grid[hi] - grid[lo])
    return ((1.0 - w) * values[lo] + w * values[hi]).astype(np.float32)

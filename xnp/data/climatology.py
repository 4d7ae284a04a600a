"""Climatologies per hour of day and place: the forecast baselines' stored means.

:class:`~xnp.data.baseline.ForecastBaseline` keeps the mean change over each lead
(and for ``"autoregressive+climatology"`` the mean field) per initialisation hour and
place of the training data.  These helpers fill the places an hour never observed
and read a climatology between the hours and leads it holds.

Examples
--------
>>> hours = np.array([0.0, 12.0])
>>> interpolate(np.array([[0.0], [12.0]]), hours, 18.0, circular=True)  # wraps past 24 h
array([6.], dtype=float32)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from xnp.errors import EmptyDataError

__all__ = ["fill_places", "hourly_means", "interpolate"]


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


def hourly_means(
    arrays: Sequence[np.ndarray], hod: np.ndarray, hour_list: np.ndarray
) -> np.ndarray:
    """The mean field ``[H, S, Dy]`` per hour of ``hour_list`` and place over the times.

    ``arrays`` hold each variable's training values ``[T, S]`` and ``hod`` the times'
    hours of day; a place never observed at an hour takes the hour's mean over the
    places (as the diurnal change does, :func:`fill_places`).
    """
    level = np.full((hour_list.size, arrays[0].shape[1], len(arrays)), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # never observed: NaN
        for b, h in enumerate(hour_list):
            at = hod == h
            for c, x in enumerate(arrays):
                level[b, :, c] = np.nanmean(np.asarray(x[at], np.float64), axis=0)
    return fill_places(level[None])[0]


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

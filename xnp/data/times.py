"""Time handling: hours since an epoch for numpy and cftime calendars, time features.

Times become float64 hours since 1970-01-01 00:00 in the data's own calendar
(:func:`time_hours`); tasks subtract their reference time in float64 before the
model casts to float32, so no precision is lost on long records.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from xnp.errors import ConfigError, CoordinateError, EmptyDataError

__all__ = [
    "check_time_axis",
    "day_and_year_fractions",
    "match_hours",
    "time_hours",
    "validation_cut",
]

TOLERANCE_HOURS = 1e-6


def time_hours(values: np.ndarray) -> np.ndarray:
    """Hours since 1970-01-01 00:00 (in the data's own calendar), as float64.

    Works for ``numpy.datetime64`` and cftime datetimes alike, so the two give the
    same hours for the same dates.  ``datetime64`` values are counted in their own
    unit, so dates outside 1677-2262 (which ``datetime64[s]`` or ``[us]`` hold) come
    out right; missing times (NaT) become NaN.

    Examples
    --------
    >>> time_hours(np.array(["1970-01-02T06:00"], "datetime64[ns]"))
    array([30.])
    >>> time_hours(np.array(["1500-01-01", "NaT"], "datetime64[s]"))
    array([-4119936.,       nan])
    """
    values = np.asarray(values)
    if np.issubdtype(values.dtype, np.datetime64):
        return _datetime64_hours(values)
    if values.size == 0:
        return np.zeros(values.shape, np.float64)
    import cftime

    calendar = values.flat[0].calendar
    hours = cftime.date2num(values.ravel(), "hours since 1970-01-01 00:00:00", calendar=calendar)
    return np.asarray(hours, np.float64).reshape(values.shape)


def _datetime64_hours(values: np.ndarray) -> np.ndarray:
    """Hours since 1970 of ``datetime64`` values, counted in their own unit (NaT -> NaN).

    numpy subtracts and divides timedeltas in the finer of the two units, so nothing
    is converted to nanoseconds (which overflows outside 1677-2262); calendar years
    and months, which have no fixed length, are taken as their first day.
    """
    if np.datetime_data(values.dtype)[0] in ("Y", "M", "generic"):
        values = values.astype("datetime64[D]")
    return (values - np.datetime64("1970-01-01")) / np.timedelta64(1, "h")


def match_hours(axis: np.ndarray, hours: np.ndarray) -> np.ndarray:
    """Index in the sorted ``axis`` (hours) of each of ``hours`` (-1 where absent).

    Examples
    --------
    >>> match_hours(np.array([0.0, 6.0, 12.0]), np.array([6.0, 7.0, 12.0]))
    array([ 1, -1,  2])
    """
    axis, hours = np.asarray(axis, np.float64), np.asarray(hours, np.float64)
    i = np.clip(np.searchsorted(axis, hours - TOLERANCE_HOURS), 0, max(axis.size - 1, 0))
    found = np.abs(axis[i] - hours) <= TOLERANCE_HOURS if axis.size else np.zeros(i.shape, bool)
    return np.where(found, i, -1)


def check_time_axis(hours: np.ndarray, name: str) -> None:
    """Raise :class:`CoordinateError` unless ``hours`` is strictly increasing (and not NaN).

    Examples
    --------
    >>> check_time_axis(np.array([0.0, 6.0, 6.0]), "time")
    Traceback (most recent call last):
    ...
    xnp.errors.CoordinateError: Time coordinate 'time' has a duplicate value at ...
    """
    missing = int(np.isnan(hours).sum())
    if missing:
        raise CoordinateError(
            f"Time coordinate {name!r} has {missing} missing (NaT) time(s). Drop them: "
            f"ds = ds.isel({{{name!r}: ds[{name!r}].notnull()}})."
        )
    steps = np.diff(hours)
    if (steps > 0).all():
        return
    i = int(np.argmax(steps <= 0))
    what = "a duplicate value" if steps[i] == 0 else "a decreasing step"
    raise CoordinateError(
        f"Time coordinate {name!r} has {what} at positions {i} and {i + 1} "
        f"({hours[i]:.2f} h and {hours[i + 1]:.2f} h since 1970). Sort with "
        f"ds.sortby({name!r}) and drop duplicates with ds.drop_duplicates({name!r})."
    )


def day_and_year_fractions(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fraction of the (UTC) day and of the calendar year elapsed at each time.

    Both are in ``[0, 1)``; the year fraction uses the calendar's own year length
    (365 or 366 days, 365 for ``noleap``, 360 for ``360_day``).

    Examples
    --------
    >>> day, year = day_and_year_fractions(np.array(["2019-01-01T18:00"], "datetime64[ns]"))
    >>> float(day[0]), round(float(year[0]) * 365, 2)
    (0.75, 0.75)
    """
    values = np.asarray(values)
    times = xr.DataArray(values.ravel(), dims="time")
    hours = times.dt.hour + times.dt.minute / 60.0 + times.dt.second / 3600.0
    day = np.asarray(hours.values, np.float64) / 24.0
    day_of_year = np.asarray((times.dt.dayofyear - 1).values, np.float64) + day
    year = day_of_year / np.asarray(times.dt.days_in_year.values, np.float64)
    return day.reshape(values.shape), year.reshape(values.shape)


def validation_cut(n_times: int, fraction: float) -> int:
    """Index of the first validation time when the last ``fraction`` of times is held out.

    Examples
    --------
    >>> validation_cut(504, 0.1)
    453
    """
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"validation_fraction must be in [0, 1); got {fraction}.")
    held_out = math.ceil(n_times * fraction) if fraction > 0 else 0
    if n_times - held_out < 1:
        raise EmptyDataError(
            f"Only {n_times} time(s): holding out {fraction:.0%} leaves none for training. "
            "Use more times, a smaller validation fraction, or validation=None."
        )
    return n_times - held_out
